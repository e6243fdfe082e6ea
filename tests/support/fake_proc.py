"""A CONSTRUCTED ``/proc`` (and cgroup tree) for unit tests of rank identity: processes with
the stat, status, command line, environment, cgroup, executable and sockets the real files
would show."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

USER = 1001
OTHER = 1002
PYTHON = "/usr/bin/python3.11"
BASH = "/usr/bin/bash"


@dataclass
class FakeProc:
    root: Path  # the fake /proc
    cgroups: Path  # the fake /sys/fs/cgroup
    _inode: int = 5000

    @classmethod
    def at(cls, base: Path) -> FakeProc:
        (base / "proc" / "net").mkdir(parents=True)
        (base / "proc" / "net" / "unix").write_text(
            "Num       RefCount Protocol Flags    Type St Inode Path\n"
        )
        (base / "cgroup").mkdir()
        return cls(base / "proc", base / "cgroup")

    def process(
        self,
        pid: int,
        ppid: int,
        *,
        comm: str = "python3",
        uid: int = USER,
        cmdline: str = "python3 train.py",
        env: Mapping[str, str] | None = None,
        exe: str = PYTHON,
        state: str = "S",
        cgroup: str = "0::/\n",
    ) -> None:
        d = self.root / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} 1 1 0 -1 " + "0 " * 45)
        (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")
        (d / "environ").write_bytes(b"".join(f"{k}={v}\0".encode() for k, v in (env or {}).items()))
        (d / "cgroup").write_text(cgroup)
        os.symlink(exe, d / "exe")

    def step_daemon(
        self,
        pid: int,
        job: str,
        step: str,
        *,
        node: str | None = None,
        uid: int = 0,
        slurm_conf: str | None = None,
    ) -> None:
        """A ``slurmstepd`` (root's, unless ``uid``) titled ``slurmstepd: [job.step]``,
        listening on ``<spool>/<node>_<job>.<step>`` when ``node`` is given."""
        title = f"slurmstepd: [{job}.{step}]"
        d = self.root / str(pid)
        env = {"SLURM_CONF": slurm_conf} if slurm_conf else {}
        self.process(pid, 1, comm="slurmstepd", uid=uid, exe="/usr/sbin/slurmstepd", env=env)
        (d / "cmdline").write_bytes(title.encode() + b"\0" * 8)
        if node is not None:
            self._inode += 1
            number = step if step.isdigit() else "4294967291"
            with open(self.root / "net" / "unix", "a") as table:
                table.write(
                    f"0000000000000000: 00000002 00000000 00010000 0001 01 {self._inode}"
                    f" /var/spool/slurmd/{node}/{node}_{job}.{number}\n"
                )
            os.symlink(f"socket:[{self._inode}]", d / "fd" / "6")

    def cgroup_dir(self, path: str, owner: int = 0) -> None:
        """A directory of the fake cgroup tree, owned by ``owner``."""
        d = self.cgroups / path.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        os.chown(d, owner, owner)
