"""What the checkpoint security tests share: hostile pickles, a victim to watch, a job user.

Every test performs an attack first and then shows that nothing outside the job's own
directory changed (:class:`Victim`), that no code ran (the payload would create
``marker``), that the verdict names the problem, and that the service still serves a good
checkpoint afterwards.
"""

from __future__ import annotations

import asyncio
import grp
import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from resurrect.checkpoint import as_owner as as_owner_module
from resurrect.checkpoint.dcp import METADATA_NAME
from resurrect.checkpoint.owner import Owner

JOB_USER = "resurrect-demo"  # the unprivileged user the demo and e2e tests submit as


def _unicode(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) < 256
    return b"\x8c" + bytes([len(raw)]) + raw


def call_pickle(module: str, name: str, *args: str) -> bytes:
    """A protocol-4 pickle that imports ``module``/``name`` (STACK_GLOBAL) and calls it
    with string ``args``: what a hostile ``.metadata`` does."""
    body = _unicode(module) + _unicode(name) + b"\x93" + b"(" + b"".join(map(_unicode, args))
    return b"\x80\x04" + body + b"tR."


def dotted_chain_pickle(command: str) -> bytes:
    """The reported exploit shape: a DCP module prefix plus a dotted name that walks to
    ``os.system`` through a module DCP itself imports."""
    return call_pickle("torch.distributed.checkpoint.filesystem", "os.system", command)


def methodcaller_pickle(command: str) -> bytes:
    """``operator.methodcaller("system", cmd)(os)``, with both globals reached by dotted
    names from a DCP module (no ``getattr`` needed)."""
    caller = (
        _unicode("torch.distributed.checkpoint.filesystem")
        + _unicode("operator.methodcaller")
        + b"\x93("
        + _unicode("system")
        + _unicode(command)
        + b"tR"
    )
    target = _unicode("torch.distributed.checkpoint.filesystem") + _unicode("os") + b"\x93"
    return b"\x80\x04" + caller + b"(" + target + b"tR."


def hostile_payloads(marker: Path) -> dict[str, bytes]:
    """Every shape of hostile ``.metadata`` we know; each would create ``marker``."""
    cmd = f"id > {marker}"
    return {
        "dotted os.system under a DCP module": dotted_chain_pickle(cmd),
        "operator.methodcaller via dotted names": methodcaller_pickle(cmd),
        "pickle.Unpickler via a DCP module": call_pickle(
            "torch.distributed.checkpoint.metadata", "pickle.Unpickler", cmd
        ),
        "module prefix (a submodule of DCP)": call_pickle(
            "torch.distributed.checkpoint.filesystem.os", "system", cmd
        ),
        "os.system": call_pickle("os", "system", cmd),
        "posix.system": call_pickle("posix", "system", cmd),
        "builtins.eval": call_pickle("builtins", "eval", f"__import__('os').system({cmd!r})"),
        "getattr on a non-enum": call_pickle("builtins", "getattr", "x", "__class__"),
        "torch.load": call_pickle("torch", "load", str(marker)),
    }


@dataclass
class Victim:
    """A sibling directory an attacker aims at, with a file in it; snapshot and compare."""

    path: Path

    @classmethod
    def make(cls, parent: Path) -> Victim:
        path = parent / "victim"
        (path / "data").mkdir(parents=True)
        (path / "secret.txt").write_text("the victim's own text\n")
        (path / "data" / "step_9").mkdir()
        (path / "data" / "step_9" / "weights.pt").write_bytes(b"victim weights")
        return cls(path)

    @property
    def target(self) -> Path:
        return self.path / "secret.txt"

    def snapshot(self) -> dict[str, tuple[int, int, str]]:
        out: dict[str, tuple[int, int, str]] = {}
        for dirpath, dirs, files in os.walk(self.path):
            for name in dirs + files:
                p = Path(dirpath) / name
                st = p.lstat()
                digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
                out[str(p.relative_to(self.path))] = (st.st_mode, st.st_uid, digest)
        return out


def write_metadata(ckpt: Path, data: bytes) -> None:
    (ckpt / METADATA_NAME).write_bytes(data)


# ------------------------------------------------------------------------------ job user
def job_owner() -> Owner:
    """The unprivileged job user (created as deploy/local-slurm/start.sh does, if missing)."""
    try:
        pw = pwd.getpwnam(JOB_USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", JOB_USER], check=True)
        pw = pwd.getpwnam(JOB_USER)
    grp.getgrgid(pw.pw_gid)
    return Owner(pw.pw_uid, pw.pw_gid)


def reachable_tmpdir() -> Iterator[Path]:
    """A scratch directory the job user can traverse (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="resurrect-sec-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def chown_tree(path: Path, owner: Owner) -> None:
    for dirpath, dirs, files in os.walk(path):
        os.chown(dirpath, owner.uid, owner.gid)
        for name in dirs + files:
            os.chown(Path(dirpath) / name, owner.uid, owner.gid, follow_symlinks=False)


class HelperProcesses:
    """The checkpoint-helper processes :mod:`resurrect.checkpoint.as_owner` starts once this
    is made, each recorded as it starts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started: list[Any] = []
        real_exec = asyncio.create_subprocess_exec

        async def recording_exec(*args: Any, **kwargs: Any) -> Any:
            proc = await real_exec(*args, **kwargs)
            self.started.append(proc)
            return proc

        monkeypatch.setattr(as_owner_module.asyncio, "create_subprocess_exec", recording_exec)

    def assert_one_ran_and_is_gone(self) -> None:
        """One helper was started; it has exited and been reaped (no such process now)."""
        (proc,) = self.started
        assert proc.returncode is not None
        with pytest.raises(ProcessLookupError):
            os.kill(proc.pid, 0)
