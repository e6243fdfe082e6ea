"""A stand-in for Slurm's step daemon, for tests that run rank processes outside Slurm.

What :mod:`resurrect.stacks.job_membership` checks of a step daemon is what only root can
make: a process running as root, named ``slurmstepd``, titled ``slurmstepd: [JOB.STEP]``.
As root, a test makes one (a shell run through a link named ``slurmstepd``, its argv[0] the
title) and starts the "rank" as its child, so the rank is in that job's step as the kernel
sees it. Processes started outside it, whatever their environment says, are not.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def step_daemon(
    job_id: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    workdir: Path,
    step: str = "0",
    user: str | None = None,
    **popen: object,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` (as ``user``, else root) as a task of ``job_id``'s step ``step`` under
    a root-owned stand-in step daemon; yields the daemon (the task is its child). Everything
    is killed at exit."""
    if os.geteuid() != 0:
        pytest.skip("a step daemon stand-in runs as root")
    link = workdir / "slurmstepd"
    if not link.exists():
        link.symlink_to("/bin/bash")
    task = list(argv) if user is None else ["runuser", "-u", user, "--", *argv]
    daemon = subprocess.Popen(  # type: ignore[call-overload]
        [f"slurmstepd: [{job_id}.{step}]", "-c", '"$@"; exit $?', "task", *task],
        executable=str(link),
        env=dict(env),
        start_new_session=True,
        **popen,
    )
    try:
        yield daemon
    finally:
        for pid in _descendants(daemon.pid):
            with _quiet():
                os.kill(pid, signal.SIGKILL)
        with _quiet():
            os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=30)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(name))
    out: list[int] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(), []):
            out.append(child)
            queue.append(child)
    return out


@contextmanager
def _quiet() -> Iterator[None]:
    try:
        yield
    except ProcessLookupError:
        pass
