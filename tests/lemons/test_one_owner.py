"""One job owner cannot make a healthy node a lemon: contributions are capped per owner,
and a lemon needs incidents from two owners or one incident with hardware evidence no job
can write (NVML, a health check, Slurm's node state)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from resurrect.contracts import (
    Diagnosis,
    Evidence,
    FaultClass,
    NodeInfo,
    RecoveryAction,
    SignalKind,
)
from resurrect.lemons.incidents import node_incidents
from resurrect.lemons.models import EvidenceTier, LemonRules, NodeIncident
from resurrect.lemons.score import OutOfService, lemon_score

NOW = datetime(2026, 6, 1, tzinfo=UTC)
RULES = LemonRules(half_life_s=7 * 86400, lemon_score=2.0, drain_incidents=3)


def incident(
    job: str,
    owner: str | None,
    tier: EvidenceTier = "independent",
    *,
    hardware: bool = False,
    kind: str = "xid",
) -> NodeIncident:
    return NodeIncident(
        incident=f"recover/c/{job}/0",
        job_id=job,
        owner=owner,
        at=NOW,
        fault_class="job.hang" if kind == "hang" else "gpu.hardware",
        kind=kind,  # type: ignore[arg-type]
        tier=tier,
        hardware=hardware,
    )


def test_twenty_one_self_hanging_jobs_of_one_owner_do_not_make_a_lemon() -> None:
    hangs = [incident(str(j), "1001", "probe", kind="hang") for j in range(21)]
    result = lemon_score("n1", hangs, [], NOW, RULES)
    assert result.score <= RULES.per_owner_cap * RULES.probe_weight + 1e-9
    assert not result.lemon and not result.drain_due


def test_one_owner_with_kernel_log_incidents_alone_is_never_a_lemon() -> None:
    # even scaled up by a node mostly out of service, one owner's jobs are not enough
    many = [incident(str(j), "1001") for j in range(30)]
    drained = [OutOfService(NOW - timedelta(days=60), NOW - timedelta(seconds=1))]
    result = lemon_score("n1", many, drained, NOW, RULES)
    assert not result.lemon and not result.drain_due


def test_two_owners_make_a_lemon() -> None:
    both = [incident("1", "1001"), incident("22", "1002")]
    result = lemon_score("n1", both, [], NOW, RULES)
    assert result.lemon


def test_one_owner_with_hardware_evidence_no_job_can_write_can_make_a_lemon() -> None:
    drained = [OutOfService(NOW - timedelta(days=60), NOW - timedelta(seconds=1))]
    one = [incident("1", "1001", hardware=True)]
    assert lemon_score("n1", one, drained, NOW, RULES).lemon
    assert not lemon_score("n1", [incident("1", "1001")], drained, NOW, RULES).lemon


def _diagnosis(kind: SignalKind, source: str | None = None) -> Diagnosis:
    return Diagnosis(
        fault_class=FaultClass.GPU_HARDWARE,
        action=RecoveryAction.DRAIN_AND_RESTART,
        confidence=0.9,
        summary="gpu",
        culprit_hosts=["n1"],
        evidence=[
            Evidence(
                kind=kind,
                source=source,  # type: ignore[arg-type]
                host="n1",
                text="Xid 79",
                rule="xid.fallen_off_bus",
                fault_class=FaultClass.GPU_HARDWARE,
                role="root",
            )
        ],
    )


def test_an_incident_records_its_owner_and_whether_hardware_no_job_writes_vouches() -> None:
    nodes = [NodeInfo(name="n1", state="IDLE")]
    for kind, hardware in (
        (SignalKind.GPU_EVENT, True),
        (SignalKind.GPU_METRIC, True),
        (SignalKind.SCHEDULER_STATE, True),
        (SignalKind.KERNEL_LOG, False),  # a user can put text in the kernel log
    ):
        found = node_incidents(
            incident="recover/c/5/0",
            job_id="5",
            owner="1001",
            at=NOW,
            diagnosis=_diagnosis(kind),
            job_nodes=["n1"],
            nodes=nodes,
        )
        assert found["n1"].owner == "1001"
        assert found["n1"].hardware is hardware, kind


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 40),
            st.sampled_from(["independent", "probe", "job_output"]),
            st.integers(0, 30),
        ),
        max_size=60,
    ),
    st.floats(0, 1),
)
def test_fuzz_one_owner_without_hardware_evidence_never_makes_a_lemon(
    items: list[tuple[int, str, int]], out_fraction: float
) -> None:
    incidents = [
        NodeIncident(
            incident=f"recover/c/{job}/{n}",
            job_id=str(job),
            owner="1001",
            at=NOW - timedelta(days=n),
            fault_class="gpu.hardware",
            kind="xid",
            tier=tier,  # type: ignore[arg-type]
        )
        for n, (job, tier, _) in enumerate(items)
    ]
    spells = [OutOfService(NOW - timedelta(days=60 * out_fraction), NOW)] if out_fraction else []
    result = lemon_score("n1", incidents, spells, NOW, RULES)
    assert not result.lemon and not result.drain_due
    assert result.score <= RULES.per_owner_cap / RULES.min_in_service + 1e-9
