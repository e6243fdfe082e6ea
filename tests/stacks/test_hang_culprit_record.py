"""Issue 20, item 8: the hang-culprit record took node names from the ranks' environment
(up to 256 characters each) without matching them to the job's nodes: 40 hangs of one job
naming 256 invented nodes evicted every real record, and each hang rewrote the whole file
(about 4 s and 0.7 GB per hang).

Now only names among the job's nodes (from Slurm) are recorded, per job at most
MAX_NODES_PER_JOB, and each record is one appended line. The attack is performed through the
follower's own path (``JobLogFollower._implicate``, as a confirmed hang reaches it)."""

from __future__ import annotations

import time
from pathlib import Path

from support.builders import job, make_config
from support.rules import engine_of

from resurrect.progress.hang_culprits import MAX_NODES_PER_JOB, HangCulprits
from resurrect.progress.watch import HangReport, HangSuspicion
from resurrect.sensors.log_follower import JobLogFollower
from resurrect.stacks.classify import RankStack, judge
from resurrect.stacks.pyspy_text import parse_pyspy_dump
from resurrect.testing import FakeScheduler

STACKS = Path(__file__).parent.parent / "fixtures" / "stacks"


async def _no_report(_: object) -> None:
    raise AssertionError("no interruption is reported here")


def hang_naming(nodes: list[str]) -> HangReport:
    """A confirmed hang whose culprits are ranks stopped on ``nodes`` (as their probes
    named them), rank 0 waiting in a collective (real py-spy dumps)."""
    world = len(nodes) + 1
    victim_text = (STACKS / "gloo-ddp-victim-rank0-native.txt").read_text()
    stopped_text = (STACKS / "gloo-ddp-stopped-rank1-nonblocking.txt").read_text()
    victim = parse_pyspy_dump(victim_text)
    stopped = parse_pyspy_dump(stopped_text)
    ranks = [RankStack(0, "node1", 10, "S", victim, victim_text, world_size=world)]
    ranks += [
        RankStack(r + 1, node, 100 + r, "T", stopped, stopped_text, world_size=world)
        for r, node in enumerate(nodes)
    ]
    verdict = judge(ranks)
    assert verdict.culprits
    return HangReport("stalled", HangSuspicion(6.0, 5.0, "train", 1.0, 0.1, 30), verdict, [])


def test_invented_culprit_names_are_not_recorded_and_evict_nothing(tmp_path: Path) -> None:
    follower = JobLogFollower(
        FakeScheduler.with_nodes(4), make_config(state_dir=tmp_path), engine_of(), _no_report
    )
    record_file = tmp_path / "hang-culprits.json"
    good = job("500", nodes=("node3", "node4"))
    follower._implicate(hang_naming(["node3"]), good)  # a real record of another job
    hostile = job("666", nodes=("node1", "node2"))
    invented = [f"{n:03d}-" + "x" * 250 for n in range(256)]
    before = record_file.stat().st_size
    for _ in range(40):  # the attack: 40 hangs, each naming 256 invented nodes
        follower._implicate(hang_naming(invented), hostile)
    # the victim's record is untouched, nothing invented was written
    assert follower.hang_culprits.jobs("node3", time.time()) == ["500"]
    assert record_file.stat().st_size == before
    assert not any(follower.hang_culprits.jobs(name, time.time()) for name in invented[:5])
    # the hostile job got one clear note per hang (names cut short), and the follower serves
    note = follower.notes.latest["666"]
    # (at most MAX_NODES_PER_JOB names of one hang are looked at)
    assert note.startswith(f"{MAX_NODES_PER_JOB} hang culprit name(s) not recorded")
    assert len(note) < 500
    [evidence] = follower._implicate(hang_naming(["node4"]), good)
    assert evidence.host == "node4" and evidence.fields["jobs"] == "500"


def test_a_job_naming_its_own_nodes_over_and_over_keeps_a_bounded_record(tmp_path: Path) -> None:
    path = tmp_path / "hang-culprits.json"
    culprits = HangCulprits(7 * 24 * 3600.0, path)
    culprits.implicate("500", ["gpu-1"], ["gpu-1"], now=0.0)
    big = [f"gpu-{n}" for n in range(2, 2 + 4 * MAX_NODES_PER_JOB)]
    for hang in range(40):
        culprits.implicate("666", big, big, now=float(hang))
    assert culprits.jobs("gpu-1", now=50.0) == ["500"]
    assert sum(bool(culprits.jobs(n, now=50.0)) for n in big) == MAX_NODES_PER_JOB
    # appended one line per record; rewritten only when far larger than what is live
    lines = len(path.read_text().splitlines())
    assert lines <= 2 * (1 + MAX_NODES_PER_JOB) + 1_000
    assert HangCulprits(7 * 24 * 3600.0, path).jobs("gpu-1", now=50.0) == ["500"]
