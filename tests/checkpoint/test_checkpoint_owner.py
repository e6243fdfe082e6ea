"""The helper really runs as the job's owner (as root only): the kernel stops it where the
owner would be stopped, and it still does the quarantine, tracker and hint writes in the
owner's own directory, as the owner."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from support.checkpoint_attacks import Victim, chown_tree, job_owner, reachable_tmpdir

from checkpoint.factory import make_dcp, shard_files, truncate
from resurrect.checkpoint import HINT_NAME, prepare_resume
from resurrect.checkpoint.as_owner import run_helper
from resurrect.checkpoint.helper import HelperRequest
from resurrect.checkpoint.layout import QUARANTINE_DIR, TRACKER_NAME
from resurrect.checkpoint.owner import Owner

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(os.geteuid() != 0, reason="dropping to the job owner needs root"),
]


@pytest.fixture
def base() -> Iterator[Path]:
    yield from reachable_tmpdir()


@pytest.fixture
def owner() -> Owner:
    return job_owner()


def _megatron_root(base: Path, owner: Owner) -> Path:
    root = base / "ckpts"
    make_dcp(root / "iter_0000001", seed=1)
    make_dcp(root / "iter_0000002", seed=2)
    truncate(shard_files(root / "iter_0000002")[0])
    (root / TRACKER_NAME).write_text("2\n")
    chown_tree(root, owner)
    return root


def _prepare(root: Path, owner: Owner | None) -> HelperRequest:
    return HelperRequest(
        op="prepare",
        root=str(root),
        level="full",
        act=True,
        owner_uid=owner.uid if owner else None,
        owner_gid=owner.gid if owner else None,
    )


def test_writes_in_the_owners_dir_are_made_as_the_owner(base: Path, owner: Owner) -> None:
    root = _megatron_root(base, owner)
    seen: list[str] = []
    verdict = asyncio.run(run_helper(_prepare(root, owner), timeout_s=120, progress=seen.append))
    assert f"checkpoint helper running as uid {owner.uid} gid {owner.gid}" in seen
    assert verdict.latest_valid == str(root / "iter_0000001"), verdict
    assert (root / TRACKER_NAME).read_text() == "1\n"
    (moved,) = (root / QUARANTINE_DIR).iterdir()
    backups = list(root.glob(f"{TRACKER_NAME}.resurrect-bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == "2\n"
    for made in (root / QUARANTINE_DIR, root / TRACKER_NAME, backups[0], root / HINT_NAME):
        st = made.stat()
        assert (st.st_uid, st.st_gid) == (owner.uid, owner.gid), made
    assert moved.name.startswith("iter_0000002-")


def test_the_kernel_stops_the_helper_where_it_stops_the_owner(base: Path, owner: Owner) -> None:
    root = _megatron_root(base, owner)
    # A damaged checkpoint directory that root owns: the owner may not move it (moving a
    # directory rewrites its "..", which needs write access to it); root could.
    os.chown(root / "iter_0000002", 0, 0)
    (root / "iter_0000002").chmod(0o755)
    victim = Victim.make(base)
    before = victim.snapshot()
    verdict = asyncio.run(run_helper(_prepare(root, owner), timeout_s=120))
    assert verdict.latest_valid == str(root / "iter_0000001")
    assert "marked iter_0000002 damaged (move failed: permission denied)" in verdict.note
    assert (root / "iter_0000002").is_dir() and victim.snapshot() == before
    # Control: the same work done with the service's own (root) rights would have moved it.
    control = base / "control"
    (control / "ckpts" / QUARANTINE_DIR).mkdir(parents=True)
    _megatron_root(control, owner)
    os.chown(control / "ckpts" / "iter_0000002", 0, 0)
    assert "moved iter_0000002" in prepare_resume(control / "ckpts").note


def test_a_root_the_owner_cannot_reach_is_not_read(base: Path, owner: Owner) -> None:
    hidden = base / "root-only"
    hidden.mkdir(mode=0o700)
    root = _megatron_root(hidden, owner)  # the owner's, but behind a root-only directory
    verdict = asyncio.run(run_helper(_prepare(root, owner), timeout_s=120))
    assert not verdict.verified and "permission denied" in verdict.note
    assert not (root / HINT_NAME).exists() and (root / TRACKER_NAME).read_text() == "2\n"


def run_dropped_to(
    owner: Owner, code: str, *, args: Sequence[str] = (), launcher: Sequence[str] = ()
) -> str:
    """Run ``code`` in a fresh interpreter (started through ``launcher``) once the helper's
    own ``drop_to`` has made it ``owner``; its output (the drop is checked)."""
    dropped_first = (
        "from resurrect.checkpoint.helper import drop_to\n"
        "from resurrect.checkpoint.owner import Owner\n"
        f"print(drop_to(Owner({owner.uid}, {owner.gid})))\n"
    )
    out = subprocess.run(
        [*launcher, sys.executable, "-c", dropped_first + code, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout
    assert f"uid {owner.uid} gid {owner.gid}" in out
    return out


def test_the_dropped_helper_cannot_write_system_files(base: Path, owner: Owner) -> None:
    target = base / "root-file"
    target.write_text("root's\n")
    target.chmod(0o644)
    write_each_argument = (
        "import sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        open(path, 'a').write('pwned')\n"
        "        print('WROTE', path)\n"
        "    except PermissionError:\n"
        "        print('denied', path)\n"
    )
    out = run_dropped_to(
        owner, write_each_argument, args=[str(target), "/etc/resurrect-security-test"]
    )
    assert "WROTE" not in out and out.count("denied") == 2
    assert target.read_text() == "root's\n"
    assert not Path("/etc/resurrect-security-test").exists()


def test_an_unknown_owner_is_refused_as_root(base: Path, owner: Owner) -> None:
    root = _megatron_root(base, owner)
    verdict = asyncio.run(run_helper(_prepare(root, None), timeout_s=60))
    assert not verdict.verified and "owner uid/gid is unknown" in verdict.note
    assert not (root / HINT_NAME).exists()
    # ... and the next job with a known owner is served.
    assert asyncio.run(run_helper(_prepare(root, owner), timeout_s=120)).latest_valid == str(
        root / "iter_0000001"
    )


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_a_non_root_service_with_setuid_capabilities_drops_them_all(owner: Owner) -> None:
    """A worker running as a service user with CAP_SETUID/CAP_SETGID (ambient, as a systemd
    unit grants them) becomes the job owner and keeps no capability at all."""
    service = pwd.getpwnam("nobody")
    print_ids_and_capabilities = (
        "import os\n"
        "print(os.getresuid())\n"
        "print([l for l in open('/proc/self/status') if l.startswith('Cap')])\n"
    )
    as_service = [
        "setpriv",
        f"--reuid={service.pw_uid}",
        f"--regid={service.pw_gid}",
        "--clear-groups",
        "--inh-caps=+setuid,+setgid",
        "--ambient-caps=+setuid,+setgid",
    ]
    out = run_dropped_to(owner, print_ids_and_capabilities, launcher=as_service)
    assert str((owner.uid,) * 3) in out
    for name in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert f"'{name}:\\t0000000000000000\\n'" in out, out


@pytest.mark.parametrize("command", ["prepare-resume", "verify"])
def test_the_cli_run_by_root_works_in_the_tree_as_its_owner(
    base: Path, owner: Owner, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operator's ``resurrect checkpoint prepare-resume`` as root leaves no root-owned
    file in the job's tree: the same helper, as the tree's owner, does the work."""
    from resurrect.checkpoint.__main__ import main

    root = _megatron_root(base, owner)
    assert main([command, str(root), "--json", "--level", "full", "--progress"]) == 0
    assert f"checkpoint helper running as uid {owner.uid} gid {owner.gid}" in (
        capsys.readouterr().err
    )
    made = [root, *root.rglob("*")]
    assert [p for p in made if p.lstat().st_uid != owner.uid] == []
    if command == "prepare-resume":
        assert (root / TRACKER_NAME).read_text() == "1\n"
        assert (root / HINT_NAME).lstat().st_uid == owner.uid
    else:
        assert (root / TRACKER_NAME).read_text() == "2\n"  # verify changes nothing
