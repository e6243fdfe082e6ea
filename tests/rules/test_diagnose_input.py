"""Attacks on ``resurrect diagnose FILE``, which an operator runs on a job's output: a FIFO
(it blocked the command forever), a device or a symlink planted as the output, a sparse
terabyte. Each is refused without blocking or read only up to a bound, with a clear line on
stderr, and the other files given are still diagnosed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resurrect.errors import JobFileRefused
from resurrect.rules.diagnose import scan_log_file
from resurrect.rules.engine import default_engine

XID = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"


def diagnose(*files: Path) -> subprocess.CompletedProcess[str]:
    """``resurrect diagnose --json FILE...`` in its own process: a read that blocks shows as
    a timeout here, not as a test run that never ends."""
    return subprocess.run(
        [sys.executable, "-m", "resurrect.cli", "diagnose", "--json", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def test_a_fifo_a_device_and_symlinks_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "slurm-1.out"
    os.mkfifo(fifo)
    zero = tmp_path / "slurm-2.out"
    zero.symlink_to("/dev/zero")
    good = tmp_path / "slurm-3.out"
    good.write_bytes(b"[rank0] step 1\n" + XID)
    link = tmp_path / "slurm-4.out"
    link.symlink_to(good)
    done = diagnose(fifo, zero, Path("/dev/zero"), link, good)
    assert done.returncode == 1  # some files failed, the good one was diagnosed
    assert '"fault_class": "gpu.hardware"' in done.stdout
    assert f"{fifo} is a FIFO, not a regular file: not read" in done.stderr
    assert f"{zero} is a symlink, not a regular file: not read" in done.stderr
    assert "/dev/zero is a character device, not a regular file: not read" in done.stderr
    assert f"{link} is a symlink, not a regular file: not read" in done.stderr


def test_only_the_end_of_a_huge_file_is_read_and_stderr_says_so(tmp_path: Path) -> None:
    huge = tmp_path / "slurm-5.out"
    with huge.open("wb") as out:
        out.write(b"old line\n" * 1000)
        out.truncate(1 << 40)  # a sparse terabyte
        out.seek(1 << 40)
        out.write(b"\n" + XID)
    started = time.monotonic()
    scanned = scan_log_file(huge, engine=default_engine(), max_bytes=1 << 20)
    assert time.monotonic() - started < 10
    assert [e.rule for e in scanned.evidence if e.role == "root"]
    assert scanned.note is not None and "only its last 1048576 bytes were read" in scanned.note
    done = diagnose(huge)  # the command's own bound: the last GiB, holes skipped
    assert done.returncode == 0
    assert "only its last 1073741824 bytes were read" in done.stderr


def test_the_library_call_refuses_the_same_files(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(JobFileRefused, match="is a FIFO"):
        scan_log_file(fifo, engine=default_engine())
