"""Attack 16 (socket): the kick socket's ``chmod`` after ``bind`` followed symlinks, and its
default path differed from the hook script's, so kicks were silently lost.

Whoever could write in the socket's directory could swap the freshly bound socket for a
symlink between ``bind`` and ``chmod`` and have any file of the watcher's user made
world-writable. The socket is now bound in a private directory and renamed into place, its
directory must be the watcher's own and writable by nobody else, and the hook script and
the watcher share one default path.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from resurrect.config import DEFAULT_KICK_SOCKET, ResurrectConfig
from resurrect.sensors.watcher_kick import (
    KickListener,
    KickSocketError,
    bind_kick_socket,
    send_kick,
)

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "deploy" / "hooks" / "kick-watcher.sh"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (AF_UNIX paths are limited to ~107 bytes), mode 0755."""
    path = Path(tempfile.mkdtemp(prefix="kick-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_the_hook_and_the_watcher_share_one_default_path() -> None:
    match = re.search(r"RESURRECT_KICK_SOCKET:-([^}]+)\}", HOOK.read_text())
    assert match, "the hook script names no default socket"
    assert Path(match.group(1)) == DEFAULT_KICK_SOCKET
    assert ResurrectConfig().watcher.kick_socket == DEFAULT_KICK_SOCKET
    unit = (REPO / "deploy" / "systemd" / "resurrect-watch.service").read_text()
    assert f"RuntimeDirectory={DEFAULT_KICK_SOCKET.parent.name}" in unit.splitlines()
    assert DEFAULT_KICK_SOCKET.parent.parent == Path("/run")


def test_a_planted_symlink_is_never_followed(short_dir: Path) -> None:
    victim = short_dir / "victim"
    victim.write_text("secret")
    victim.chmod(0o600)
    sock_path = short_dir / "kick.sock"
    sock_path.symlink_to(victim)  # the attack: the socket path points at another file
    with pytest.raises(KickSocketError, match="not a socket"):
        bind_kick_socket(sock_path)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600 and victim.read_text() == "secret"
    assert sock_path.is_symlink()


def test_a_symlinked_or_foreign_or_shared_directory_is_refused(short_dir: Path) -> None:
    real = short_dir / "real"
    real.mkdir(mode=0o755)
    link = short_dir / "link"
    link.symlink_to(real)
    with pytest.raises(KickSocketError, match="symlink"):
        bind_kick_socket(link / "kick.sock")
    shared = short_dir / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: anyone could swap entries
    with pytest.raises(KickSocketError, match="writable by others"):
        bind_kick_socket(shared / "kick.sock")
    if os.geteuid() == 0:
        foreign = short_dir / "foreign"
        foreign.mkdir(mode=0o755)
        os.chown(foreign, 65534, 65534)
        with pytest.raises(KickSocketError, match="belongs to uid 65534"):
            bind_kick_socket(foreign / "kick.sock")
    assert not any(p.name.endswith(".sock") for p in short_dir.rglob("*"))


def test_the_socket_is_created_with_its_mode_and_replaces_a_stale_one(short_dir: Path) -> None:
    path = short_dir / "kick.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(path))
    stale.close()  # a socket file left by a crashed watcher
    sock = bind_kick_socket(path)
    try:
        info = os.lstat(path)
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o666
        assert sorted(p.name for p in short_dir.iterdir()) == ["kick.sock"]  # no leftovers
        assert send_kick(path, "test")
        assert sock.recv(256) == b"test"
    finally:
        sock.close()


async def test_the_listener_creates_its_missing_directory_privately(short_dir: Path) -> None:
    path = short_dir / "run" / "kick.sock"
    got: list[str] = []
    listener = KickListener(path, got.append)
    await listener.start()
    try:
        info = os.lstat(path.parent)
        assert stat.S_IMODE(info.st_mode) == 0o755 and info.st_uid == os.geteuid()
    finally:
        listener.close()
    assert not path.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_an_unprivileged_watcher_binds_in_its_runtime_directory(short_dir: Path) -> None:
    """As resurrect-watch.service runs it: User= owns the RuntimeDirectory (0755)."""
    runtime = short_dir / "resurrect"
    runtime.mkdir(mode=0o755)
    os.chown(runtime, 65534, 65534)
    code = (
        "import sys; from pathlib import Path; from resurrect.sensors.watcher_kick import bind_kick_socket;"
        "s = bind_kick_socket(Path(sys.argv[1])); print('bound')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(runtime / "kick.sock")],
        user=65534,
        group=65534,
        extra_groups=[],
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "bound" in proc.stdout, proc.stderr
    assert stat.S_IMODE(os.lstat(runtime / "kick.sock").st_mode) == 0o666
