"""One bounded ``py-spy dump`` of one process.

A running process is dumped with ``--native`` (py-spy pauses it for about a second to unwind
C++ frames, which is what tells DDP's reducer or a gloo/NCCL wait from computation). A stopped
process (state ``T``) cannot be paused again: py-spy fails with "Failed to suspend process"; it
is read with ``--nonblocking`` (Python frames only, no pause). A native dump that fails is
retried without ``--native``. argv lists only; output bounded.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from resurrect.errors import StackDumpError

MAX_OUTPUT = 1 << 20


def pyspy_binary() -> str | None:
    """py-spy next to this Python (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


def _run(argv: list[str], timeout_s: float) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise StackDumpError(f"{argv[0]} timed out after {timeout_s:.0f} s") from exc
    except OSError as exc:
        raise StackDumpError(f"cannot run {argv[0]}: {exc}") from exc
    out = done.stdout[:MAX_OUTPUT].decode("utf-8", "replace")
    if done.returncode != 0:
        err = (done.stderr[:4096] or done.stdout[:4096]).decode("utf-8", "replace").strip()
        raise StackDumpError(f"py-spy exit {done.returncode}: {err.splitlines()[-1:] or err}")
    return out


def dump_stack(pid: int, *, stopped: bool, timeout_s: float = 10.0) -> str:
    """The text of ``py-spy dump`` for ``pid``."""
    binary = pyspy_binary()
    if binary is None:
        raise StackDumpError("py-spy is not installed")
    base = [binary, "dump", "--pid", str(pid)]
    if stopped:
        return _run([*base, "--nonblocking"], timeout_s)
    try:
        return _run([*base, "--native"], timeout_s)
    except StackDumpError:
        return _run([*base, "--nonblocking"], timeout_s)
