"""Heartbeat datagrams: JSON, authenticated with HMAC-SHA256 under a key of the node.

Each node's agent holds only its own node key, ``HMAC(master, cluster, node)``
(:func:`node_key`); only the collector holds the master key and derives every node's key
from it. A datagram is ``<node>\\n<json>\\n<hex mac>``; the MAC covers the node line and the
JSON, and the node in the JSON must be the node of the line, so a node's key speaks for that
node alone (root on one node cannot heartbeat, or stop, another node). The collector refuses
a datagram whose MAC is wrong, whose clock is far off (``MAX_SKEW_S``) or whose sequence
number does not move forward for its agent instance (a replay), and answers an accepted
heartbeat with an acknowledgement under the same node key, so an agent can tell that the
collector hears it and fall back to Temporal heartbeats when it does not.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import AwareDatetime, Field, ValidationError

from resurrect.contracts import Contract
from resurrect.secret_file import read_key

MAX_DATAGRAM = 2048
MAX_SKEW_S = 30.0
MAX_NODE_BYTES = 200
_MAC_HEX = 64


class WireError(ValueError):
    """A datagram that is not an authentic, well-formed heartbeat or acknowledgement."""


class Beat(Contract):
    """One heartbeat as sent on the wire."""

    kind: Literal["beat"] = "beat"
    cluster: str = Field(min_length=1, max_length=200)
    node: str = Field(min_length=1, max_length=200)
    instance: str = Field(min_length=1, max_length=64)  # one agent process (new on restart)
    seq: int = Field(ge=0)
    sent_at: AwareDatetime  # a time without a zone could mean any time: refused
    gpus: int = Field(default=0, ge=0)
    nvml: str = Field(default="ok", max_length=200)
    silence_threshold_s: float = Field(default=6.0, gt=0, le=3600)
    stopping: bool = False  # the agent stops on purpose: its silence is no fault


class Ack(Contract):
    """The collector heard ``seq`` of ``instance``."""

    kind: Literal["ack"] = "ack"
    node: str = Field(min_length=1, max_length=200)
    instance: str = Field(min_length=1, max_length=64)
    seq: int = Field(ge=0)


def load_key(path: Path) -> bytes:
    """A liveness key (the collector's master key, an agent's node key): a regular file of
    at least 32 bytes, owned by this user or root, that no other user can read or write
    (:func:`resurrect.secret_file.read_key`)."""
    return read_key(path, "liveness key")


def node_key(master: bytes, cluster: str, node: str) -> bytes:
    """The key of ``node``'s agent, derived from the collector's master key (hex text, so a
    node key file is text like the master's)."""
    label = b"resurrect-liveness-node-key\0" + cluster.encode() + b"\0" + node.encode()
    return hmac.digest(master, label, "sha256").hex().encode()


def _mac(key: bytes, signed: bytes) -> bytes:
    return hmac.digest(key, signed, "sha256").hex().encode()


def seal(key: bytes, message: Beat | Ack) -> bytes:
    """``message`` as a datagram under ``key`` (the key of ``message.node``)."""
    signed = message.node.encode() + b"\n" + message.model_dump_json().encode()
    return signed + b"\n" + _mac(key, signed)


def _open(key_of: Callable[[str], bytes], datagram: bytes) -> tuple[str, bytes]:
    """The node and the authentic JSON of ``datagram`` (``key_of(node)``: that node's key)."""
    if len(datagram) > MAX_DATAGRAM:
        raise WireError("datagram too long")
    signed, sep, mac = datagram.rpartition(b"\n")
    if not sep or len(mac) != _MAC_HEX:
        raise WireError("no MAC")
    raw_node, sep, body = signed.partition(b"\n")
    if not sep or not raw_node or len(raw_node) > MAX_NODE_BYTES:
        raise WireError("no node line")
    try:
        node = raw_node.decode()
    except UnicodeDecodeError as exc:
        raise WireError("no node line") from exc
    if not hmac.compare_digest(_mac(key_of(node), signed), mac):
        raise WireError("bad MAC")
    return node, body


def open_beat(
    key_of: Callable[[str], bytes], datagram: bytes, *, now: datetime | None = None
) -> Beat:
    """The authentic heartbeat in ``datagram``; WireError otherwise. ``key_of(node)`` gives
    the key of the node the datagram names (the collector derives it from its master)."""
    node, body = _open(key_of, datagram)
    try:
        beat = Beat.model_validate_json(body)
    except (ValueError, ValidationError) as exc:
        raise WireError(f"not a heartbeat: {str(exc)[:120]}") from exc
    if beat.node != node:
        raise WireError("node line and heartbeat disagree")
    now = now or datetime.now(UTC)
    if abs((now - beat.sent_at).total_seconds()) > MAX_SKEW_S:
        raise WireError(f"clock skew over {MAX_SKEW_S:.0f}s (sent {beat.sent_at.isoformat()})")
    return beat


def open_ack(key: bytes, datagram: bytes) -> Ack:
    """The authentic acknowledgement in ``datagram`` under this agent's node ``key``."""
    node, body = _open(lambda _node: key, datagram)
    try:
        ack = Ack.model_validate_json(body)
    except (ValueError, ValidationError) as exc:
        raise WireError(f"not an acknowledgement: {str(exc)[:120]}") from exc
    if ack.node != node:
        raise WireError("node line and acknowledgement disagree")
    return ack
