"""The lemon board: a recovery reads the kept records without a read of its own; the
records are read again in the background once stale, noted incidents show at once, and
before the first read a recovery waits a bounded time, then goes on without them."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from datetime import UTC, datetime

from resurrect.config import ResurrectConfig
from resurrect.lemons.board import CANDIDATES, FULL_READ_EVERY, LemonBoard, Listing, Records
from resurrect.lemons.models import NodeIncident
from resurrect.operator.models import NodeRepairState
from resurrect.operator.repair_client import repair_timings

TIMINGS = repair_timings(ResurrectConfig())


def incident(name: str) -> NodeIncident:
    return NodeIncident(
        incident=name,
        job_id="7",
        at=datetime.now(UTC),
        fault_class="gpu.hardware",
        kind="xid",
        tier="independent",
    )


class Repairs:
    """The repair workflows' records, counting full reads; ``gate`` holds a read open."""

    def __init__(self) -> None:
        self.records: Records = {}
        self.reads = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None

    async def read(self) -> Records:
        self.reads += 1
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return dict(self.records)


def board(repairs: Repairs, clock: list[float]) -> LemonBoard:
    return LemonBoard(repairs.read, TIMINGS, "c", max_age_s=60, clock=lambda: clock[0])


def state(node: str, *names: str) -> NodeRepairState:
    return NodeRepairState(
        cluster="c", node=node, timings=TIMINGS, incidents=[incident(n) for n in names]
    )


async def test_a_burst_of_recoveries_costs_one_read_and_sees_each_others_incidents() -> None:
    repairs, clock = Repairs(), [0.0]
    repairs.records = {"n1": state("n1", "old")}
    kept = board(repairs, clock)
    await kept.refresh()
    reads = await asyncio.gather(*(kept.records(wait_s=1) for _ in range(500)))
    assert repairs.reads == 1 and all(set(r.records) == {"n1"} and not r.note for r in reads)
    kept.note({"n2": incident("now"), "n1": incident("again")})
    seen = (await kept.records(wait_s=1)).records
    assert [i.incident for i in seen["n1"].incidents] == ["old", "again"]
    assert [i.incident for i in seen["n2"].incidents] == ["now"]
    assert repairs.reads == 1


async def test_stale_records_are_served_while_one_read_runs_in_the_background() -> None:
    repairs, clock = Repairs(), [0.0]
    kept = board(repairs, clock)
    await kept.refresh()
    repairs.records = {"n3": state("n3", "elsewhere")}  # another process recorded it
    repairs.gate.clear()
    clock[0] = 61
    stale = await asyncio.gather(*(kept.records(wait_s=1) for _ in range(50)))
    assert all(dict(r.records) == {} for r in stale) and repairs.reads == 2
    kept.note({"n4": incident("during the read")})
    repairs.gate.set()
    await asyncio.sleep(0.01)
    fresh = (await kept.records(wait_s=1)).records
    assert set(fresh) == {"n3", "n4"}  # the read's records, and what was noted meanwhile


async def test_before_the_first_read_a_recovery_waits_bounded_then_goes_on_with_a_note() -> None:
    repairs, clock = Repairs(), [0.0]
    repairs.gate.clear()
    kept = board(repairs, clock)
    missing = await kept.records(wait_s=0.05)
    assert dict(missing.records) == {} and "first read not done within 0.05 s" in missing.note
    repairs.gate.set()
    assert not (await kept.records(wait_s=1)).note
    assert repairs.reads == 1


async def test_a_failed_read_keeps_what_was_kept_and_says_why_when_nothing_was() -> None:
    repairs, clock = Repairs(), [0.0]
    repairs.fail = TimeoutError("query timed out")
    kept = board(repairs, clock)
    failed = await kept.records(wait_s=1)
    assert dict(failed.records) == {} and "TimeoutError: query timed out" in failed.note
    repairs.fail = None
    repairs.records = {"n1": state("n1", "a")}
    clock[0] = 31  # a failed read is tried again after half the age
    await kept.records(wait_s=1)
    assert set((await kept.records(wait_s=1)).records) == {"n1"}
    repairs.fail = RuntimeError("visibility down")
    clock[0] = 200
    await kept.records(wait_s=1)
    await asyncio.sleep(0.01)
    assert set((await kept.records(wait_s=1)).records) == {"n1"}  # kept through a failure


def hardware_incident(name: str, job_id: str) -> NodeIncident:
    return incident(name).model_copy(update={"job_id": job_id, "hardware": True})


def lemon(node: str, jobs: int) -> NodeRepairState:
    """A node with hardware incidents of ``jobs`` distinct jobs (3 or more: a lemon)."""
    return NodeRepairState(
        cluster="c",
        node=node,
        timings=TIMINGS,
        incidents=[hardware_incident(f"{node}-{j}", str(j)) for j in range(jobs)],
    )


async def test_the_board_keeps_its_lemons_ranked_so_a_recovery_scores_only_those() -> None:
    repairs, clock = Repairs(), [0.0]
    repairs.records = {f"n{i:04d}": state(f"n{i:04d}", f"once-{i}") for i in range(2000)}
    repairs.records |= {"worst": lemon("worst", 5), "bad": lemon("bad", 3)}
    kept = board(repairs, clock)
    await kept.refresh()
    read = await kept.records(wait_s=1)
    assert len(read.records) == 2002 and read.candidates == ("worst", "bad")
    # an incident noted here changes the ranking at once: n0001 becomes a lemon ...
    kept.note({"n0001": hardware_incident("a", "8")})
    kept.note({"n0001": hardware_incident("b", "9")})
    kept.note({"n0002": hardware_incident("c", "8")})  # ... n0002 does not
    assert (await kept.records(wait_s=1)).candidates == ("worst", "bad", "n0001")


async def test_the_candidates_are_bounded_however_many_lemons_there_are() -> None:
    repairs, clock = Repairs(), [0.0]
    repairs.records = {f"n{i:04d}": lemon(f"n{i:04d}", 3 + i % 4) for i in range(CANDIDATES * 3)}
    kept = board(repairs, clock)
    await kept.refresh()
    candidates = (await kept.records(wait_s=1)).candidates
    assert len(candidates) == CANDIDATES
    worst = {n for n, s in repairs.records.items() if len(s.incidents) == 6}
    assert set(candidates[: len(worst)]) == worst  # the highest scored first


class ListedRepairs:
    """The repair workflows as a board with a listing reads them: the listed scores, and
    the records of the nodes asked for (each query counted)."""

    def __init__(self, records: Records, scores: dict[str, float]) -> None:
        self.records, self.scores = records, scores
        self.queried: list[str] = []

    async def scored(self) -> dict[str, float]:
        return dict(self.scores)

    async def states(self, names: Collection[str]) -> Records:
        self.queried.extend(names)
        return {n: self.records[n] for n in names if n in self.records}


async def full_read_forbidden() -> Records:
    raise AssertionError("a board with a listing reads through it")


async def test_a_read_queries_only_the_nodes_whose_recorded_score_changed() -> None:
    clock = [0.0]
    records = {f"n{i:04d}": state(f"n{i:04d}", f"once-{i}") for i in range(1000)}
    repairs = ListedRepairs(records, {name: 1.0 for name in records})
    kept = LemonBoard(
        full_read_forbidden,
        TIMINGS,
        "c",
        listing=Listing(scored=repairs.scored, states=repairs.states),
        max_age_s=60,
        clock=lambda: clock[0],
    )
    await kept.refresh()
    assert len(repairs.queried) == 1000  # the first read: every scored node
    repairs.queried.clear()
    # another process recorded an incident on n0007 and on a new node; n0003 left the list
    repairs.records["n0007"] = state("n0007", "once-7", "again")
    repairs.records["new"] = state("new", "first")
    repairs.scores |= {"n0007": 2.0, "new": 1.0}
    del repairs.scores["n0003"]
    clock[0] = 61
    await kept.refresh()
    assert sorted(repairs.queried) == ["n0007", "new"]
    seen = (await kept.records(wait_s=1)).records
    assert len(seen["n0007"].incidents) == 2 and "new" in seen and "n0003" not in seen
    assert len(seen) == 1000
    for read in range(2, FULL_READ_EVERY + 1):  # every FULL_READ_EVERY reads: all of them
        repairs.queried.clear()
        clock[0] = 61 * read
        await kept.refresh()
    assert len(repairs.queried) == 1000
