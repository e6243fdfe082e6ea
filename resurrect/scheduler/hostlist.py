"""Slurm hostlist expressions: ``node[1-3,5],gpu-a[01-02]`` <-> ``["node1", ...]``.

Slurm prints node sets in this compressed form (squeue ``nodes``, ``ExcNodeList``, ...).
Ranges keep zero padding (``gpu[08-10]`` -> ``gpu08, gpu09, gpu10``) and a name may have
several bracket groups (``rack[1-2]-n[1-2]``), expanded as a cartesian product.
"""

from __future__ import annotations

import re
from itertools import product

_MAX_HOSTS = 100_000  # a guard against absurd ranges from untrusted text


class HostlistError(ValueError):
    """A hostlist expression is malformed."""


def _split_top_level(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _expand_range_set(body: str, expr: str) -> list[str]:
    """Expand the inside of one bracket group: ``1-3,05,7``."""
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", item)
        if not m:
            raise HostlistError(f"bad range {item!r} in hostlist {expr!r}")
        lo_s, hi_s = m.group(1), m.group(2)
        if hi_s is None:
            out.append(lo_s)
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"descending range {item!r} in hostlist {expr!r}")
        if hi - lo + 1 > _MAX_HOSTS:
            raise HostlistError(f"range {item!r} too large in hostlist {expr!r}")
        width = len(lo_s) if lo_s.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return out


def expand_hostlist(expr: str | None) -> list[str]:
    """Expand a Slurm hostlist expression into host names, in order, without duplicates.

    ``""``, ``None`` and Slurm's placeholders ``(null)`` / ``None`` give ``[]``.
    """
    if expr is None:
        return []
    expr = expr.strip()
    if expr in {"", "(null)", "None", "N/A"}:
        return []
    hosts: list[str] = []
    seen: set[str] = set()
    for part in _split_top_level(expr):
        pieces = re.split(r"(\[[^\]]*\])", part)
        choices: list[list[str]] = []
        for piece in pieces:
            if piece.startswith("[") and piece.endswith("]"):
                choices.append(_expand_range_set(piece[1:-1], expr))
            elif piece:
                if "[" in piece or "]" in piece:
                    raise HostlistError(f"unbalanced brackets in hostlist {expr!r}")
                choices.append([piece])
        for combo in product(*choices):
            name = "".join(combo)
            if name not in seen:
                seen.add(name)
                hosts.append(name)
            if len(hosts) > _MAX_HOSTS:
                raise HostlistError(f"hostlist {expr!r} expands to too many hosts")
    return hosts


def compress_hostlist(hosts: list[str]) -> str:
    """A comma-joined list; Slurm accepts plain comma lists everywhere a hostlist is taken.

    Deliberately not bracket-compressed: explicit names are easier to audit in logs.
    """
    return ",".join(dict.fromkeys(h.strip() for h in hosts if h.strip()))
