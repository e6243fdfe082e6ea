"""Structure of ``.safetensors`` files: an 8-byte header length, a JSON header, the data."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from resurrect.checkpoint.fsutil import open_regular

_MAX_HEADER = 100 << 20


def check_safetensors(path: Path, size: int) -> str | None:
    """The first structural problem of a safetensors file, or None if it is sound."""
    try:
        with open_regular(path) as fh:
            raw = fh.read(8)
            if len(raw) < 8:
                return f"{path.name}: safetensors header truncated"
            (hlen,) = struct.unpack("<Q", raw)
            if hlen > _MAX_HEADER or 8 + hlen > size:
                return f"{path.name}: safetensors header length {hlen} exceeds the file"
            header = json.loads(fh.read(hlen))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{path.name}: safetensors header unreadable ({exc})"
    if not isinstance(header, dict):
        return f"{path.name}: safetensors header is not a map"
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2):
            return f"{path.name}: tensor {name} has no data_offsets"
        end = max(end, int(offsets[1]))
    if 8 + hlen + end > size:
        return f"{path.name}: truncated (data needs {8 + hlen + end} bytes, file has {size})"
    return None
