"""The soak's figures on constructed histories (benchmarks/chaos/figures.py)."""

from __future__ import annotations

from support.chaos_history import fault, history, job, recovery

from benchmarks.chaos.figures import figures


def test_a_fault_on_a_node_an_in_flight_recovery_drains_is_detected_and_not_timed() -> None:
    """A host crash on node3 eight seconds into a recovery that drains node3: the node was on
    its way out, the job's next recovery (for a later fault) answers nothing of it."""
    first = recovery(at=100.0, drained_nodes=["node3"], running_again_at=140.0)
    later = recovery(at=181.0, drained_nodes=["node4"], workflow_id="recovery/c/1/1")
    seen = figures(
        history(
            jobs=[job()],
            faults=[
                fault("host_crash", 108.0, node="node3"),
                fault("partition", 178.0, node="node4"),
            ],
            recoveries=[first, later],
        )
    )
    assert seen["on_a_node_already_draining"] == {"host_crash": 1}
    assert "host_crash" not in seen["detect_s"]
    assert seen["detect_s"]["partition"]["n"] == 1
    assert seen["detected_share"] == 1.0


def test_a_fault_after_the_job_runs_again_is_answered_by_the_next_recovery() -> None:
    first = recovery(at=100.0, drained_nodes=["node3"], running_again_at=120.0)
    later = recovery(at=190.0, drained_nodes=["node3"], workflow_id="recovery/c/1/1")
    seen = figures(
        history(
            jobs=[job()],
            faults=[fault("host_crash", 186.0, node="node3")],
            recoveries=[first, later],
        )
    )
    assert seen["on_a_node_already_draining"] == {}
    assert seen["detect_s"]["host_crash"]["p50"] == 4.0


def test_a_fault_answered_by_a_job_started_on_the_node_after_it_is_timed_apart() -> None:
    """A host crash on node6 just after its job ended: Slurm started the next job there
    before it knew, and that job's recovery (Slurm's own detection, 15 s) is the first
    answer. It is timed as a detection after placement, not as the crash's detection."""
    crash = fault("host_crash", 200.0, node="node6")
    crash.affected_jobs = ["1", "2"]  # job 2 had a step on node6, after the crash
    seen = figures(
        history(
            jobs=[job(), job("2", submitted_at=203.0)],
            faults=[crash, fault("host_crash", 400.0)],
            recoveries=[recovery("2", at=215.0), recovery(at=403.0)],
        )
    )
    assert seen["detected_share"] == 1.0
    assert seen["detect_s"]["host_crash"] == {"n": 1, "p50": 3.0, "p95": 3.0}
    assert seen["detect_after_placement_s"]["host_crash"] == {"n": 1, "p50": 15.0, "p95": 15.0}


def test_a_second_fault_on_an_attempt_whose_recovery_is_open_is_answered_by_it() -> None:
    """The soak injects a second fault just after a recovery of the hit job started: that
    recovery takes it in; it is detected, and not timed (no later recovery answers it)."""
    seen = figures(
        history(
            jobs=[job()],
            faults=[fault("second_fault", 100.5, node="node5")],
            recoveries=[recovery(at=100.0)],
        )
    )
    assert seen["detected_share"] == 1.0
    assert seen["answered_in_flight"] == {"second_fault": 1}
    assert "second_fault" not in seen["detect_s"]


def test_a_fault_after_the_jobs_recovery_closed_is_not_answered_by_it() -> None:
    seen = figures(
        history(
            jobs=[job()],
            faults=[fault("host_crash", 200.0, node="node5")],
            recoveries=[recovery(at=100.0)],  # closed at 130
        )
    )
    assert seen["detected_share"] == 0.0
    assert seen["answered_in_flight"] == {}
