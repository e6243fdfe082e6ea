"""A job owner tries to frame a node as a lemon, or to hide one (resurrect/lemons).

Everything a job prints is its own: a hundred jobs printing Xid lines about a node record
nothing and score nothing; hangs a job provokes on purpose (resurrect's probes name the node,
no hardware evidence) weigh ``probe_weight`` at most once per job and can never push the
independent incidents out of the node's bounded record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from resurrect.config import ResurrectConfig
from resurrect.contracts import DEFAULT_ACTION, Diagnosis, Evidence, FaultClass, SignalKind
from resurrect.lemons.incidents import node_incidents
from resurrect.lemons.models import LemonRules, NodeIncident
from resurrect.lemons.records import report_incidents, score_records
from resurrect.lemons.score import lemon_score
from resurrect.workflows.node_repair import _bounded

NOW = datetime(2026, 6, 1, tzinfo=UTC)
RULES = LemonRules(keep_incidents=8)


def printed_xid(job: str) -> NodeIncident:
    line = Evidence(
        kind=SignalKind.JOB_LOG,
        text="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus",
        role="root",
        fault_class=FaultClass.GPU_HARDWARE,
        host="gpu-1",
        rule="xid.fallen_off_bus",
    )
    found = Diagnosis(
        fault_class=FaultClass.GPU_HARDWARE,
        action=DEFAULT_ACTION[FaultClass.GPU_HARDWARE],
        confidence=0.99,
        culprit_hosts=["gpu-1"],
        evidence=[line],
    )
    incidents = node_incidents(
        incident=f"recover/c/{job}/0",
        job_id=job,
        at=NOW,
        diagnosis=found,
        job_nodes=["gpu-1"],
        nodes=[],
    )
    return incidents["gpu-1"]


def incident(job: str, tier: str, age: timedelta = timedelta(0), n: int = 0) -> NodeIncident:
    return NodeIncident.model_validate(
        {
            "incident": f"recover/c/{job}/{n}",
            "job_id": job,
            "at": NOW - age,
            "fault_class": "gpu.hardware",
            "kind": "xid",
            "tier": tier,
        }
    )


def test_a_hundred_jobs_printing_xid_lines_about_a_node_score_nothing() -> None:
    framed = {str(j): printed_xid(str(j)) for j in range(100)}
    assert {i.tier for i in framed.values()} == {"job_output"}
    (score,) = score_records({}, RULES, NOW, adding={"gpu-1": framed["7"]}) or [None]
    assert score is None  # not even scored: job output is never part of a record
    assert lemon_score("gpu-1", list(framed.values()), [], NOW, RULES).score == 0


async def test_job_output_incidents_are_never_recorded() -> None:
    config = ResurrectConfig.model_validate({"repair": {"enabled": True}})

    class Refuses:
        """A client any call to which fails the test: nothing may be signalled."""

        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"client.{name} used for a job-output incident")

    recorded = await report_incidents(Refuses(), config, {"gpu-1": printed_xid("1")})  # type: ignore[arg-type]
    assert recorded == []


def test_hangs_a_job_provokes_weigh_the_probe_weight_once_per_job() -> None:
    provoked = [incident("66", "probe", n=n) for n in range(50)]
    assert lemon_score("gpu-1", provoked, [], NOW, RULES).score == pytest.approx(RULES.probe_weight)


def test_probe_incidents_never_push_independent_ones_out_of_the_record() -> None:
    real = [incident(str(j), "independent", timedelta(days=2)) for j in range(3)]
    flood = [incident("66", "probe", n=n) for n in range(100)]
    kept = _bounded([*real, *flood], RULES)
    assert len(kept) == RULES.keep_incidents
    assert [i for i in kept if i.tier == "independent"] == real
