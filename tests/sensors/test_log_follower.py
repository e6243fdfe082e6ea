from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import pytest
from support.builders import job, opt_in
from support.reports import Reports
from support.rules import engine_of

from resurrect.config import ResurrectConfig
from resurrect.contracts import Evidence, FaultClass, Interruption, JobInfo, JobState, SignalKind
from resurrect.evidence_trust import HANG_HISTORY_RULE
from resurrect.progress.hang import HangSuspicion
from resurrect.progress.watch import HangReport
from resurrect.rules.engine import RuleEngine
from resurrect.sensors.log_follower import FollowedFile, JobLogFollower
from resurrect.sensors.node_agent.gpu_activity import RankGpu
from resurrect.stacks.classify import RankStack, judge
from resurrect.stacks.pyspy_text import parse_pyspy_dump
from resurrect.stacks.sampling import RankWait
from resurrect.testing import FakeScheduler

# the follower keeps its hang-culprit record in the state directory: a private one here
STATE = tempfile.TemporaryDirectory(prefix="resurrect-follower-test-")
CONFIG = ResurrectConfig.model_validate(
    {"cluster": {"name": "c1"}, "temporal": {"state_dir": STATE.name}}
)


def keyword_engine() -> RuleEngine:
    """Two rules: 'XID79 on <host>' is a gpu.hardware root cause on that host; 'peer closed'
    (what ranks print when a peer dies) a weak network.fabric root."""
    return engine_of(
        {
            "id": "t.xid",
            "literal": ["XID79 on "],
            "pattern": r"XID79 on (?P<host>\S+)",
            "fields": ["host"],
            "fault_class": FaultClass.GPU_HARDWARE,
            "role": "root",
            "confidence": 0.97,
            "examples": {"match": ["XID79 on node2"]},
        },
        {
            "id": "t.peer",
            "literal": ["peer closed"],
            "pattern": "peer closed",
            "fault_class": FaultClass.NETWORK_FABRIC,
            "role": "root",
            "confidence": 0.4,
            "examples": {"match": ["RuntimeError: peer closed"]},
        },
    )


def test_followed_file_handles_partial_lines_truncation_and_rotation(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_bytes(b"one\ntw")
    followed = FollowedFile(str(path))
    assert followed.read_new_lines() == [(1, b"one")]
    with open(path, "ab") as handle:
        handle.write(b"o\nthree\n")
    assert followed.read_new_lines() == [(2, b"two"), (3, b"three")]
    path.write_bytes(b"new\n")  # truncated
    assert followed.read_new_lines() == [(1, b"new")]
    path.rename(tmp_path / "out.1")
    path.write_bytes(b"rotated-line-longer\n")
    assert followed.read_new_lines() == [(1, b"rotated-line-longer")]
    assert FollowedFile(str(tmp_path / "missing")).read_new_lines() == []


def test_huge_line_is_cut_not_buffered_forever(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_bytes(b"x" * (3 << 20))
    followed = FollowedFile(str(path))
    lines = followed.read_new_lines()
    assert len(lines) == 1 and len(lines[0][1]) == 256 << 10
    assert followed.pending == b""


async def test_root_cause_in_a_running_jobs_output_is_reported_once(tmp_path: Path) -> None:
    out = tmp_path / "slurm-9.out"
    out.write_text("[rank0] step 1\n")
    s = FakeScheduler.with_nodes(4)
    s.jobs["9"] = job(
        "9", state=JobState.RUNNING, nodes=("node1", "node2"), comment=opt_in(), stdout=out
    )
    s.jobs["10"] = JobInfo(
        job_id="10", state=JobState.RUNNING, nodes=["node3"], stdout_path=str(out)
    )
    reports = Reports()

    follower = JobLogFollower(s, CONFIG, keyword_engine(), reports)
    await follower.refresh_jobs()
    assert list(follower.jobs) == [("9", 0)]  # job 10 did not opt in
    assert await follower.poll_once() == []
    with open(out, "a") as handle:
        handle.write("[rank0] RuntimeError: peer closed\n")
    assert await follower.poll_once() == []  # too weak to interrupt a running job alone
    with open(out, "a") as handle:
        handle.write("[rank1] fatal: XID79 on node2 \xff\n".encode("latin-1").decode("latin-1"))
    [found] = await follower.poll_once()
    assert found.suspect_nodes == ["node2"] and found.fault_hint is FaultClass.GPU_HARDWARE
    assert found.workflow_id == "recover/c1/9/0" and found.evidence[0].line == 3
    with open(out, "a") as handle:
        handle.write("XID79 on node1\n")
    assert await follower.poll_once() == []  # one report per attempt
    s.jobs["9"] = s.jobs["9"].model_copy(update={"state": JobState.PENDING})
    await follower.refresh_jobs()
    assert follower.jobs == {}


async def test_a_job_silent_past_its_hang_threshold_is_reported_as_hung(tmp_path: Path) -> None:
    out = tmp_path / "slurm-11.out"
    out.write_text("[rank0] step 1\n")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    s = FakeScheduler.with_nodes(2)
    s.jobs["11"] = job(
        "11",
        state=JobState.RUNNING,
        nodes=("node1", "node2"),
        comment=opt_in(hang_after_s=60, checkpoint_dir=str(ckpt)),
        stdout=out,
    )
    reports = Reports()

    follower = JobLogFollower(s, CONFIG, keyword_engine(), reports)
    await follower.refresh_jobs()
    followed = follower.jobs[("11", 0)]
    assert await follower.poll_once() == []  # printing: progress
    followed.last_progress -= 59
    assert await follower.poll_once() == []  # not yet past the threshold
    (ckpt / "step_20").mkdir()  # a checkpoint save is progress, however long it takes
    followed.last_progress -= 120
    assert await follower.poll_once() == []
    long_ago = time.time() - 600  # then silence past the threshold, checkpoints included
    for path in (ckpt, ckpt / "step_20"):
        os.utime(path, (long_ago, long_ago))
    followed.last_progress -= 61
    [hung] = await follower.poll_once()
    assert hung.fault_hint is FaultClass.JOB_HANG and "no output" in hung.reason
    assert hung.workflow_id == "recover/c1/11/0"
    followed.last_progress -= 600
    assert await follower.poll_once() == []  # reported once


async def test_jobs_without_a_hang_threshold_are_never_called_hung(tmp_path: Path) -> None:
    out = tmp_path / "slurm-12.out"
    out.write_text("x\n")
    s = FakeScheduler.with_nodes(1)
    s.jobs["12"] = job("12", state=JobState.RUNNING, nodes=("node1",), comment=opt_in(), stdout=out)

    async def report(i: Interruption) -> None:
        raise AssertionError(f"unexpected report {i}")

    follower = JobLogFollower(s, CONFIG, keyword_engine(), report)
    await follower.refresh_jobs()
    follower.jobs[("12", 0)].last_progress -= 10**6
    assert await follower.poll_once() == []


class StoppedRankOne:
    """The ranks of a DDP job whose rank 1 is stopped: real py-spy dumps (fixtures)."""

    def stacks(self) -> list[RankStack]:
        stacks = []
        for name, rank, node, state in (
            ("gloo-ddp-victim-rank0-native.txt", 0, "node1", "S"),
            ("gloo-ddp-stopped-rank1-nonblocking.txt", 1, "node2", "T"),
        ):
            text = (Path(__file__).parent.parent / "fixtures" / "stacks" / name).read_text()
            dump = parse_pyspy_dump(text)
            assert dump.pid is not None
            stacks.append(RankStack(rank, node, dump.pid, state, dump, text, world_size=2))
        return stacks

    def waits(self) -> list[RankWait]:
        return []

    def evidence(self) -> list[Evidence]:
        return []

    def gpus(self) -> list[RankGpu]:
        return []


async def test_progress_that_stops_is_a_hang_naming_the_culprit_from_the_stacks(
    tmp_path: Path,
) -> None:
    out = tmp_path / "slurm-13.out"
    out.write_text("")
    s = FakeScheduler.with_nodes(2)
    s.jobs["13"] = job(
        "13", state=JobState.RUNNING, nodes=("node1", "node2"), comment=opt_in(), stdout=out
    )  # no hang_after_s: adaptive detection
    reports = Reports()

    follower = JobLogFollower(
        s, CONFIG, keyword_engine(), reports, rank_access=lambda job: StoppedRankOne()
    )
    await follower.refresh_jobs()
    followed = follower.jobs[("13", 0)]
    assert followed.progress is not None
    for step in (10, 20, 30):
        with open(out, "a") as handle:
            handle.write(f"[rank0] step {step}/100 loss 0.5\n[rank1] step {step}/100 loss 0.5\n")
        assert await follower.poll_once() == []
    assert followed.progress.tracker.last_step == 30
    followed.progress.tracker.last_progress_at -= 6  # silent past the 5 s floor
    deadline = time.monotonic() + 10
    while not reports and time.monotonic() < deadline:  # the stacks are read in the background
        await follower.poll_once()
        await asyncio.sleep(0.02)
    [hung] = reports
    assert hung.fault_hint is FaultClass.JOB_HANG and hung.suspect_nodes == []
    assert "rank 1 on node2 (stopped" in hung.reason
    culprit = hung.evidence[0]
    assert (culprit.kind, culprit.role, culprit.rank, culprit.host) == (
        SignalKind.STACK_DUMP,
        "root",
        1,
        "node2",
    )


async def test_hang_after_s_overrides_adaptive_detection(tmp_path: Path) -> None:
    s = FakeScheduler.with_nodes(1)
    s.jobs["14"] = job(
        "14",
        state=JobState.RUNNING,
        nodes=("node1",),
        comment=opt_in(hang_after_s=600),
        stdout=tmp_path / "out",
    )

    async def report(i: Interruption) -> None:
        raise AssertionError(f"unexpected report {i}")

    follower = JobLogFollower(s, CONFIG, keyword_engine(), report)
    await follower.refresh_jobs()
    assert follower.jobs[("14", 0)].progress is None


def test_a_node_that_is_the_culprit_in_hangs_of_two_jobs_is_named_a_suspect(
    tmp_path: Path,
) -> None:
    stacks = StoppedRankOne().stacks()
    verdict = judge(stacks)
    suspicion = HangSuspicion(6.0, 5.0, "train", 1.0, 0.1, 30)
    report = HangReport("stalled", suspicion, verdict, [])
    temporal = CONFIG.temporal.model_copy(update={"state_dir": tmp_path})
    config = CONFIG.model_copy(update={"temporal": temporal})
    follower = JobLogFollower(FakeScheduler.with_nodes(2), config, keyword_engine(), _no_report)
    [first] = follower._implicate(report, job("21"))
    assert (first.rule, first.host, first.fields["jobs"]) == (HANG_HISTORY_RULE, "node2", "21")
    [again] = follower._implicate(report, job("21"))  # the same job again: still one job
    assert again.fields["jobs"] == "21"
    [both] = follower._implicate(report, job("22"))
    assert both.fields["jobs"] == "21,22" and both.source == "sensor"
    # a restarted follower still knows
    again = JobLogFollower(FakeScheduler.with_nodes(2), config, keyword_engine(), _no_report)
    assert again.hang_culprits.jobs("node2", time.time()) == ["21", "22"]


async def _no_report(i: Interruption) -> None:
    raise AssertionError(f"unexpected report {i}")


async def test_a_progress_bar_redrawn_without_newlines_is_progress(tmp_path: Path) -> None:
    out = tmp_path / "slurm-15.out"
    out.write_bytes(b"")
    s = FakeScheduler.with_nodes(1)
    s.jobs["15"] = job("15", state=JobState.RUNNING, nodes=("node1",), comment=opt_in(), stdout=out)
    follower = JobLogFollower(
        s, CONFIG, keyword_engine(), _no_report, rank_access=lambda job: StoppedRankOne()
    )
    await follower.refresh_jobs()
    watch = follower.jobs[("15", 0)].progress
    assert watch is not None
    for step in (1, 2, 3):
        with open(out, "ab") as handle:
            handle.write(
                f"\rEpoch 0:   {step}%|          | {step}/100 [00:0{step}<01:40,  1.00it/s]".encode()
            )
        await follower.poll_once()
    assert watch.tracker.last_step == 3 and watch.tracker.step_time_s == 1.0


def test_a_look_at_a_quiet_open_file_is_one_fstat_and_one_lstat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "out"
    path.write_text("one\n")
    followed = FollowedFile(str(path))
    assert followed.read_new_lines() == [(1, b"one")]
    calls: list[str] = []
    for name in ("open", "fstat", "stat", "lseek", "close"):
        real = getattr(os, name)

        def counted(*args: object, _real: object = real, _name: str = name, **kw: object) -> object:
            calls.append(_name)
            return _real(*args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(os, name, counted)
    for _ in range(5):
        assert followed.read_new_lines() == []
    assert calls == ["fstat", "stat"] * 5
    monkeypatch.undo()
    with path.open("a") as out:
        out.write("two\n")
    assert followed.read_new_lines() == [(2, b"two")]
    followed.close()
    assert followed.fd is None


def test_a_kept_open_file_replaced_by_a_symlink_is_not_followed_there(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    path = tmp_path / "out"
    path.write_text("one\n")
    followed = FollowedFile(str(path), owner_uid=os.getuid())
    assert followed.read_new_lines() == [(1, b"one")]
    path.unlink()
    path.symlink_to(secret)
    assert followed.read_new_lines() == []
    assert followed.refused is not None and "symlink" in followed.refused
    followed.close()


async def test_a_requeued_jobs_report_says_where_following_its_attempt_began(
    tmp_path: Path,
) -> None:
    """Attempt 0 of job 9 appended a fatal line naming node2; attempt 1 (on node3, node4)
    is followed from the file's end and reported with that mark, so its recovery reads only
    attempt 1's lines."""
    out = tmp_path / "slurm-9.out"
    out.write_text("attempt 0\n[rank1] fatal: XID79 on node2\n")
    s = FakeScheduler.with_nodes(4)
    s.jobs["9"] = job(
        "9",
        state=JobState.RUNNING,
        nodes=("node3", "node4"),
        comment=opt_in(),
        stdout=out,
        restart_count=1,
    )
    reports = Reports()

    follower = JobLogFollower(s, CONFIG, keyword_engine(), reports)
    await follower.refresh_jobs()
    assert await follower.poll_once() == []  # attempt 0's line was judged by its recovery
    began = out.stat().st_size
    with open(out, "a") as handle:
        handle.write("[rank1] fatal: XID79 on node4\n")
    [found] = await follower.poll_once()
    assert found.workflow_id == "recover/c1/9/1" and found.suspect_nodes == ["node4"]
    [mark] = found.output_marks
    assert (mark.path, mark.inode, mark.offset) == (str(out), out.stat().st_ino, began)


async def test_a_first_attempts_report_needs_no_mark(tmp_path: Path) -> None:
    out = tmp_path / "slurm-9.out"
    out.write_text("[rank1] fatal: XID79 on node2\n")
    s = FakeScheduler.with_nodes(4)
    s.jobs["9"] = job("9", state=JobState.RUNNING, comment=opt_in(), stdout=out)
    reports = Reports()

    follower = JobLogFollower(s, CONFIG, keyword_engine(), reports)
    await follower.refresh_jobs()
    [found] = await follower.poll_once()
    assert found.output_marks == []  # the file is all attempt 0's


async def test_a_node_failure_line_naming_a_node_the_attempt_lacks_is_an_earlier_attempts(
    tmp_path: Path,
) -> None:
    """Attempt 2 of job 9 runs on node2; the srun of attempt 1, frozen on node4 and thawed,
    prints 'Node failure on node4' into the output both share: no fault of attempt 2 (which
    was requeued for it, a third time for two faults, in the seeded soak). The same line
    naming node2 is attempt 2's."""
    from resurrect.rules.engine import default_engine

    out = tmp_path / "srun-1n-9.out"
    out.write_text("resurrect-train-srun: job 9 restart 2 nodes node2\n")
    s = FakeScheduler.with_nodes(4)
    s.jobs["9"] = job(
        "9", state=JobState.RUNNING, nodes=("node2",), comment=opt_in(), stdout=out,
        restart_count=2,
    )  # fmt: skip
    reports = Reports()
    follower = JobLogFollower(s, CONFIG, default_engine(), reports)
    await follower.refresh_jobs()
    assert await follower.poll_once() == []
    with open(out, "a") as handle:
        handle.write(
            "slurmstepd-node4: error: *** STEP 9.0 ON node4 CANCELLED AT 2026-12-03T14:43:08"
            " DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
            "srun: error: Node failure on node4\nsrun: got SIGCONT\n"
        )
    assert await follower.poll_once() == []
    with open(out, "a") as handle:
        handle.write("srun: error: Node failure on node2\n")
    [found] = await follower.poll_once()
    assert found.workflow_id == "recover/c1/9/2" and found.fault_hint is FaultClass.NODE_LOST
    assert found.suspect_nodes == ["node2"]
