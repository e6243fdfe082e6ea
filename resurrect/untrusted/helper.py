"""``python -m resurrect.untrusted.helper``: parse one job-written file as the job's owner.

Started by :func:`resurrect.untrusted.runner.run_parse`. It reads one JSON request from
stdin (``op``, ``args``, ``owner`` as ``[uid, gid]``, ``cpu_s``, ``memory_bytes``), caps its
own address space and CPU time (hard limits, so they stay), writes no file and no core,
becomes the owner (when it runs as root), then runs the one parser ``op`` names and prints
one JSON line: ``{"result": ...}``, ``{"refused": "the note"}`` or ``{"oserror": "...",
"errno": N}``. It imports only what that parser needs, so it starts in tens of
milliseconds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from resurrect.errors import JobFileRefused
from resurrect.untrusted.privileges import DropFailed, drop_to, limit_resources

MAX_REQUEST_BYTES = 64 << 10


class _Ids:
    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid


def _flight_recorder(args: dict[str, object]) -> object:
    from resurrect.stacks.flight_recorder_dump import read_dump

    path, owner_uid, max_bytes = args.get("path"), args.get("owner_uid"), args.get("max_bytes")
    if not isinstance(path, str) or not isinstance(max_bytes, int):
        raise JobFileRefused("bad flight_recorder request")
    if not (owner_uid is None or isinstance(owner_uid, int)):
        raise JobFileRefused("bad flight_recorder request")
    return [list(c) for c in read_dump(path, owner_uid, max_bytes)]


OPS: dict[str, Callable[[dict[str, object]], object]] = {"flight_recorder": _flight_recorder}


def _emit(doc: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def main() -> int:
    try:
        request = json.loads(sys.stdin.buffer.read(MAX_REQUEST_BYTES))
    except ValueError:
        request = None
    if not isinstance(request, dict) or request.get("op") not in OPS:
        _emit({"refused": "the parse helper got a bad request"})
        return 2
    memory, cpu = _int(request.get("memory_bytes")), _int(request.get("cpu_s"))
    owner_ids = request.get("owner")
    args = request.get("args")
    if memory is None or cpu is None or not isinstance(args, dict):
        _emit({"refused": "the parse helper got a bad request"})
        return 2
    limit_resources(memory_bytes=memory, cpu_s=cpu, file_bytes=0)
    owner = None
    if isinstance(owner_ids, list) and len(owner_ids) == 2:
        uid, gid = _int(owner_ids[0]), _int(owner_ids[1])
        owner = None if uid is None or gid is None else _Ids(uid, gid)
    try:
        drop_to(owner)
    except (DropFailed, OSError) as exc:
        _emit({"refused": f"the parse helper could not become the owner: {exc}"})
        return 3
    try:
        _emit({"result": OPS[request["op"]](args)})
    except JobFileRefused as exc:
        _emit({"refused": str(exc)})
    except MemoryError:
        what = args.get("path")
        _emit({"refused": f"{what}: needs more than {memory >> 20} MiB to parse: not read"})
    except OSError as exc:
        _emit({"oserror": exc.strerror or str(exc), "errno": exc.errno})
    return 0


if __name__ == "__main__":
    sys.exit(main())
