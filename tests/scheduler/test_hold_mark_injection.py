"""Issue 20, attack 3: hold-mark injection on Slurm 22.05.

The hold mark used to be read with a regex out of ``scontrol show job -o``, which prints the
job's name, command and working directory (all chosen by its owner) before AdminComment. A
job named ``x AdminComment=resurrect-hresurrect-hold:1old:1  y`` was read as carrying a
mark; resurrect's next hold wrote that text over the administrator's AdminComment; one
removal pass left ``resurrect-hold:1`` behind; and the watchdog released a job an
administrator held ("held by resurrect for 1796133739 s").

Each test performs the attack on the real local cluster first, then shows what resurrect
reads now: AdminComment only where Slurm delimits it (``squeue --json`` on 22.05), marks
removed until none is left, and only marks resurrect tagged (key, job id, plausible time)
released. The administrator's AdminComment is kept and the administrator's hold stays.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from resurrect.demo.local_cluster import LocalSlurm
from resurrect.operator.watchdog import release_stale_holds
from resurrect.scheduler.hold_marker import HoldMarkKey, has_marker, read_mark, unmarked
from resurrect.scheduler.slurm_cli import SlurmCli

pytestmark = pytest.mark.slurm

ADMIN_NOTE = "ticket 42: keep held, bad input data"
FORGED_NAME = "x AdminComment=resurrect-hresurrect-hold:1old:1  y"
KEY = HoldMarkKey(key=b"hold-mark-test-key".ljust(32, b"."))
# how the mark used to be read and removed (one pass), for the attack's first half
_OLD_READ = re.compile(r"(?:^|\s)AdminComment=(.*?)(?:  |\n|$)")
_OLD_MARK = re.compile(r"\s*resurrect-hold:(\d{1,12})")


def scheduler(cluster: LocalSlurm) -> SlurmCli:
    slurm = cluster.scheduler()
    slurm.hold_mark_key = KEY
    return slurm


def admin_held(cluster: LocalSlurm, name: str, workdir: Path | None = None) -> str:
    """A job of the demo user that an administrator held, with a note in AdminComment. It
    may not begin for an hour, so a release never lets it start before the next hold."""
    extra = ["--hold", "--begin=now+3600"] + ([f"--chdir={workdir}"] if workdir else [])
    job_id = cluster.submit(
        ["sleep", "600"], nodes=1, name=name, output="/dev/null", extra_args=extra
    )
    cluster.run(["scontrol", "update", f"JobId={job_id}", f"AdminComment={ADMIN_NOTE}"])
    cluster.run(["scontrol", "hold", job_id])  # now the administrator's hold
    return job_id


async def test_a_job_name_is_not_read_as_a_hold_mark(cluster: LocalSlurm) -> None:
    victim = admin_held(cluster, FORGED_NAME)
    # the attack: the text reader finds the job's name first, and one pass leaves a mark
    text = cluster.run(["scontrol", "show", "job", "-o", victim])
    found = _OLD_READ.search(text)
    assert found is not None and found.group(1) == "resurrect-hresurrect-hold:1old:1"
    assert _OLD_MARK.findall(_OLD_MARK.sub("", found.group(1))) == ["1"]

    slurm = scheduler(cluster)
    assert await slurm.read_admin_comment(victim) == ADMIN_NOTE  # Slurm's own delimiting
    assert (await slurm.get_job(victim)).name == FORGED_NAME
    released = await release_stale_holds(slurm, bound_s=-1)
    assert released == []
    job = await slurm.get_job(victim)
    assert job.held and job.state_reason == "JobHeldAdmin"
    assert await slurm.read_admin_comment(victim) == ADMIN_NOTE


async def test_newlines_in_the_name_or_work_dir_forge_no_line_of_their_own(
    cluster: LocalSlurm,
) -> None:
    forged_dir = cluster.out_dir / "wd\nAdminComment=resurrect-hold:5 "
    forged_dir.mkdir(exist_ok=True)
    forged_dir.chmod(0o777)
    by_name = admin_held(cluster, "a\n   AdminComment=resurrect-hold:1")
    by_dir = admin_held(cluster, "plain", workdir=forged_dir)
    for victim in (by_name, by_dir):
        # the attack: the multi-line text shows a line that looks like the real one
        lines = cluster.run(["scontrol", "show", "job", victim]).splitlines()
        assert any(line.strip().startswith("AdminComment=resurrect-hold:") for line in lines)
        slurm = scheduler(cluster)
        assert await slurm.read_admin_comment(victim) == ADMIN_NOTE
        assert await release_stale_holds(slurm, bound_s=-1) == []
        assert (await slurm.get_job(victim)).held


async def test_resurrects_hold_keeps_the_administrators_comment(cluster: LocalSlurm) -> None:
    """The service keeps serving: a job resurrect holds is marked, released by the watchdog
    once stale, and its AdminComment is the administrator's again afterwards; the forged
    job beside it stays held."""
    victim = admin_held(cluster, FORGED_NAME)
    ours = cluster.submit(["sleep", "600"], nodes=1, output="/dev/null", extra_args=["--hold"])
    cluster.run(["scontrol", "update", f"JobId={ours}", f"AdminComment={ADMIN_NOTE}"])
    slurm = scheduler(cluster)
    for job_id in (victim, ours):  # resurrect marks both, as a requeue's hold does
        assert await slurm._mark_held(await slurm.get_job(job_id)) is None
        comment = await slurm.read_admin_comment(job_id)
        assert unmarked(comment) == ADMIN_NOTE and has_marker(comment)
    cluster.run(["scontrol", "release", victim])  # its recovery released it ...
    await slurm._clear_mark(victim)  # ... and cleared the mark
    cluster.run(["scontrol", "hold", victim])  # then an administrator held it again
    assert await slurm.read_admin_comment(victim) == ADMIN_NOTE
    released = await release_stale_holds(slurm, bound_s=-1)
    assert [r.target for r in released] == [ours]
    assert await slurm.read_admin_comment(ours) == ADMIN_NOTE
    assert (await slurm.get_job(victim)).held  # the administrator's hold stays


async def test_a_mark_resurrect_did_not_write_is_noted_and_kept(
    cluster: LocalSlurm, caplog: pytest.LogCaptureFixture
) -> None:
    """What the attack left in AdminComment (an untagged, implausibly old mark) releases
    nothing: the job stays held, the comment unchanged, and the watchdog says why."""
    victim = admin_held(cluster, "victim")
    cluster.run(["scontrol", "update", f"JobId={victim}", "AdminComment=x resurrect-hold:1"])
    slurm = scheduler(cluster)
    comment = await slurm.read_admin_comment(victim)
    mark = read_mark(comment, key=KEY.get(), job_id=victim, now=0)
    assert mark is not None and mark.at is None
    with caplog.at_level(logging.WARNING):
        assert await release_stale_holds(slurm, bound_s=-1) == []
    assert (await slurm.get_job(victim)).held
    assert await slurm.read_admin_comment(victim) == "x resurrect-hold:1"
    assert any("left held: a mark resurrect did not write" in r.message for r in caplog.records)
