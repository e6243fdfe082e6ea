"""Attack 16 (units): the shipped systemd units did not work as shipped.

``resurrect-watch.service`` (ProtectSystem=strict, no writable path) could not create its
kick socket, and ``resurrect-worker.service`` made checkpoint directories read-only, so
quarantine and resume hints failed in production. Each unit is checked here with
``systemd-analyze verify`` (in a throwaway root, so no running systemd is needed) and for
the paths and rights it needs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.requirements import missing

from resurrect.config import DEFAULT_KICK_SOCKET

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
EXEC = "opt/resurrect/.venv/bin/resurrect"


def _analyze_unavailable() -> str | None:
    if shutil.which("systemd-analyze") is None:
        return "systemd-analyze is missing (apt-get install systemd; deploy/install.sh does)"
    if not (SYSTEM_UNITS / "sysinit.target").exists():
        return f"no systemd unit library in {SYSTEM_UNITS}"
    return None


def directives(path: Path) -> dict[str, list[str]]:
    """KEY -> every value it is given in the file (comments and sections ignored)."""
    found: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


@pytest.fixture
def system_root(tmp_path: Path) -> Iterator[Path]:
    """A root with systemd's own units, the shipped units and a resurrect executable."""
    reason = _analyze_unavailable()
    if reason:
        missing(reason)
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    shutil.copytree(UNITS, root / "etc/systemd/system", dirs_exist_ok=True)
    exe = root / EXEC
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    yield root


@pytest.mark.parametrize("unit", sorted(p.name for p in UNITS.glob("*.service")))
def test_systemd_analyze_verifies_each_unit_without_a_warning(system_root: Path, unit: str) -> None:
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"--root={system_root}", unit],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # unknown keys are only warnings: none


def test_verify_catches_a_broken_unit(system_root: Path) -> None:
    """The check above is not vacuous: a typo and a missing program are reported."""
    broken = system_root / "etc/systemd/system/resurrect-worker.service"
    broken.write_text(
        broken.read_text()
        .replace("ProtectSystem=strict", "ProtectSytem=strict")
        .replace("ExecStart=", "ExecStartPre=/opt/resurrect/missing\nExecStart=")
    )
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"--root={system_root}", broken.name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Unknown key 'ProtectSytem'" in proc.stderr
    assert proc.returncode != 0 and "/opt/resurrect/missing" in proc.stderr


def test_the_watch_unit_can_create_the_kick_socket() -> None:
    unit = directives(UNITS / "resurrect-watch.service")
    assert unit["RuntimeDirectory"] == [DEFAULT_KICK_SOCKET.parent.name]
    assert DEFAULT_KICK_SOCKET.parent == Path("/run") / unit["RuntimeDirectory"][0]
    # the watcher refuses a directory that others can write
    assert unit["RuntimeDirectoryMode"] == ["0755"]
    assert unit["User"] == ["slurm"] and unit["CapabilityBoundingSet"] == [""]


def test_the_worker_can_write_checkpoints_as_their_owners() -> None:
    unit = directives(UNITS / "resurrect-worker.service")
    for cap in ("CAP_SETUID", "CAP_SETGID"):
        assert cap in unit["AmbientCapabilities"][0].split()
        assert cap in unit["CapabilityBoundingSet"][0].split()
    assert set(unit["CapabilityBoundingSet"][0].split()) == {"CAP_SETUID", "CAP_SETGID"}
    assert "ProtectHome" not in unit  # checkpoints under /home stay reachable
    assert unit["StateDirectory"] == ["resurrect"]
    assert "/var/lib/resurrect" in unit["ReadWritePaths"]
    drop_in = directives(UNITS / "resurrect-worker.service.d" / "checkpoint-roots.conf")
    roots = [p.lstrip("-") for value in drop_in["ReadWritePaths"] for p in value.split()]
    assert "/home" in roots and len(roots) >= 2


def test_every_unit_runs_the_same_installed_program() -> None:
    for path in UNITS.glob("*.service"):
        exec_start = directives(path)["ExecStart"][0]
        assert exec_start.startswith(f"/{EXEC} "), (path.name, exec_start)
