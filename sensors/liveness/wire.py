"""Heartbeat datagrams: JSON, authenticated with HMAC-SHA256 under a key shared by the
agents and the collector (a file readable only by the service users).

A datagram is ``<json>\\n<hex mac>``; the MAC covers the JSON bytes. The collector refuses a
datagram whose MAC is wrong, whose clock is far off (``MAX_SKEW_S``) or whose sequence
number does not move forward for its agent instance (a replay). The collector answers an
accepted heartbeat with an acknowledgement under the same key, so an agent can tell that
the collector hears it and fall back to Temporal heartbeats when it does not.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from resurrect.contracts import Contract
from resurrect.errors import ConfigError

MAX_DATAGRAM = 2048
MAX_SKEW_S = 30.0
MIN_KEY_BYTES = 32
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
    sent_at: datetime
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
    """The shared key: a regular file of at least MIN_KEY_BYTES bytes that no other user can
    read or write (a key anyone can read lets anyone forge heartbeats)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"liveness key {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"liveness key {path}: not a regular file")
        if st.st_mode & 0o007:
            raise ConfigError(f"liveness key {path}: readable or writable by others (chmod o=)")
        key = os.read(fd, 4096).strip()
    finally:
        os.close(fd)
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"liveness key {path}: shorter than {MIN_KEY_BYTES} bytes")
    return key


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def seal(key: bytes, message: Beat | Ack) -> bytes:
    body = message.model_dump_json().encode()
    return body + b"\n" + _mac(key, body)


def _open(key: bytes, datagram: bytes) -> bytes:
    if len(datagram) > MAX_DATAGRAM:
        raise WireError("datagram too long")
    body, sep, mac = datagram.rpartition(b"\n")
    if not sep or len(mac) != _MAC_HEX:
        raise WireError("no MAC")
    if not hmac.compare_digest(_mac(key, body), mac):
        raise WireError("bad MAC")
    return body


def open_beat(key: bytes, datagram: bytes, *, now: datetime | None = None) -> Beat:
    """The authentic heartbeat in ``datagram``; WireError otherwise."""
    body = _open(key, datagram)
    try:
        beat = Beat.model_validate_json(body)
    except (ValueError, ValidationError) as exc:
        raise WireError(f"not a heartbeat: {str(exc)[:120]}") from exc
    now = now or datetime.now(UTC)
    if abs((now - beat.sent_at).total_seconds()) > MAX_SKEW_S:
        raise WireError(f"clock skew over {MAX_SKEW_S:.0f}s (sent {beat.sent_at.isoformat()})")
    return beat


def open_ack(key: bytes, datagram: bytes) -> Ack:
    body = _open(key, datagram)
    try:
        return Ack.model_validate_json(body)
    except (ValueError, ValidationError) as exc:
        raise WireError(f"not an acknowledgement: {str(exc)[:120]}") from exc
