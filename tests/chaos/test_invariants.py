"""Each invariant of the soak on constructed histories: one that keeps it, one that breaks
it (benchmarks/chaos/invariants.py)."""

from __future__ import annotations

from support.chaos_history import fault, history, job, recovery

from benchmarks.chaos.history import (
    JobGoodputRecord,
    JobSample,
    ProcessLife,
    Sample,
)
from benchmarks.chaos.invariants import (
    INVARIANTS,
    DrainBudgetKept,
    GoodputAddsUp,
    HealedNodesReturnByRepair,
    NoFalseDrain,
    NoJobLeftHeld,
    NotOptedInUntouched,
    OneRequeuePerFault,
    OptedInJobsEndWell,
    RecoveriesEnd,
    RssStable,
    check_all,
)


def sample(at: float, drained: dict[str, str] | None = None, **jobs: JobSample) -> Sample:
    return Sample(at=at, jobs={k.lstrip("j"): v for k, v in jobs.items()}, drained=drained or {})


# ---------------------------------------------------------------- opted-in jobs end well
def test_a_completed_job_with_the_fault_free_parameters_ends_well() -> None:
    assert OptedInJobsEndWell().check(history(jobs=[job()])) == []


def test_a_completed_job_with_other_parameters_is_a_violation() -> None:
    [found] = OptedInJobsEndWell().check(history(jobs=[job(final_sha="zzz")]))
    assert "zzz" in found and "abc" in found


def test_a_job_that_never_ended_is_a_violation() -> None:
    [found] = OptedInJobsEndWell().check(history(jobs=[job(final_state=None)]))
    assert "had not ended" in found


def test_a_failed_job_without_a_recorded_stop_is_lost() -> None:
    [found] = OptedInJobsEndWell().check(history(jobs=[job(final_state="FAILED")]))
    assert "lost job" in found


def test_a_stop_after_an_injected_application_fault_ends_well() -> None:
    h = history(
        jobs=[job(final_state="FAILED")],
        faults=[fault("app_exception", 90.0)],
        recoveries=[recovery(outcome="stopped", requeued=False, fault_class="app.error")],
    )
    assert OptedInJobsEndWell().check(h) == []


def test_a_stop_with_the_budget_spent_ends_well() -> None:
    h = history(
        jobs=[job(final_state="FAILED", restart_count=3)],
        recoveries=[recovery(outcome="stopped", requeued=False)],
    )
    assert OptedInJobsEndWell().check(h) == []


def test_a_stop_with_restarts_left_and_no_application_fault_is_a_violation() -> None:
    h = history(
        jobs=[job(final_state="FAILED", restart_count=1)],
        faults=[fault("node_loss", 90.0, node="node2")],
        recoveries=[recovery(outcome="stopped", requeued=False, fault_class="unknown")],
    )
    [found] = OptedInJobsEndWell().check(h)
    assert "restarts left" in found


def test_jobs_not_opted_in_are_not_judged_by_how_they_end() -> None:
    assert (
        OptedInJobsEndWell().check(history(jobs=[job(opted_in=False, final_state="FAILED")])) == []
    )


# ---------------------------------------------------------------- one requeue per fault
def test_one_requeue_for_one_fault_is_kept() -> None:
    h = history(jobs=[job(restart_count=1)], faults=[fault("node_loss", 50.0)])
    assert OneRequeuePerFault().check(h) == []


def test_two_requeues_for_one_fault_is_a_violation_even_if_only_a_sample_saw_it() -> None:
    h = history(
        jobs=[job(restart_count=1)],
        faults=[fault("node_loss", 50.0)],
        samples=[sample(60.0, j1=JobSample("RUNNING", 2, False))],
    )
    [found] = OneRequeuePerFault().check(h)
    assert "requeued 2 times for 1 faults" in found


def test_an_attempt_the_faulted_nodes_leftover_srun_ended_counts_against_that_fault() -> None:
    """node3 froze under attempt 0; once thawed, its srun cancelled attempt 1's step on
    node5 (Slurm's step numbers start again at each requeue): two requeues, one fault."""
    h = history(
        jobs=[job(restart_count=2, leftover_cancellations=[("node3", "node5")])],
        faults=[fault("host_freeze", 50.0, node="node3")],
    )
    assert OneRequeuePerFault().check(h) == []


def test_a_leftover_of_a_node_no_fault_hit_excuses_nothing() -> None:
    h = history(
        jobs=[job(restart_count=2, leftover_cancellations=[("node4", "node5")])],
        faults=[fault("host_freeze", 50.0, node="node3")],
    )
    [found] = OneRequeuePerFault().check(h)
    assert "requeued 2 times for 1 faults" in found


def test_a_skipped_fault_does_not_count() -> None:
    skipped = fault("node_loss", 50.0)
    skipped.skipped = "no running job"
    h = history(jobs=[job(restart_count=1)], faults=[skipped])
    assert OneRequeuePerFault().check(h) != []


# ---------------------------------------------------------------- no job left held
def test_a_hold_released_before_the_end_is_kept() -> None:
    h = history(samples=[sample(1.0, j1=JobSample("PENDING", 1, True)),
                         sample(2.0, j1=JobSample("RUNNING", 1, False))])  # fmt: skip
    assert NoJobLeftHeld().check(h) == []


def test_a_job_held_at_the_end_is_a_violation() -> None:
    h = history(samples=[sample(2.0, j1=JobSample("PENDING", 1, True)),
                         sample(1.0, j1=JobSample("RUNNING", 0, False))])  # fmt: skip
    assert NoJobLeftHeld().check(h) == ["job 1 is held at the end"]


# ---------------------------------------------------------------- not opted in
def test_a_job_not_opted_in_that_resurrect_refused_is_untouched() -> None:
    h = history(
        jobs=[job(opted_in=False, final_state="FAILED")],
        recoveries=[recovery(outcome="refused_not_opted_in", requeued=False)],
        samples=[sample(1.0, j1=JobSample("RUNNING", 0, False))],
    )
    assert NotOptedInUntouched().check(h) == []


def test_a_job_not_opted_in_requeued_held_or_drained_for_is_a_violation() -> None:
    h = history(
        jobs=[job(opted_in=False)],
        recoveries=[recovery(drained_nodes=["node3"])],
        samples=[sample(1.0, j1=JobSample("PENDING", 1, True))],
    )
    found = NotOptedInUntouched().check(h)
    assert len(found) == 3 and "node3" in found[2]


# ---------------------------------------------------------------- false drains
def test_a_drain_after_a_node_fault_on_that_node_is_not_false() -> None:
    h = history(
        faults=[fault("node_loss", 10.0, node="node2")],
        samples=[sample(5.0), sample(20.0, {"node2": "resurrect: node.lost"})],
    )
    assert NoFalseDrain().check(h) == []


def test_a_drain_after_a_fault_that_is_not_a_node_fault_is_false() -> None:
    h = history(
        faults=[fault("fake_xid", 10.0, node="node2")],
        samples=[sample(20.0, {"node2": "resurrect: gpu.hardware"})],
    )
    [found] = NoFalseDrain().check(h)
    assert found.startswith("node node2 drained")


def test_a_second_drain_needs_a_fault_of_its_own() -> None:
    h = history(
        faults=[fault("node_loss", 10.0, node="node2")],
        samples=[
            sample(20.0, {"node2": "resurrect: node.lost"}),
            sample(30.0),  # repaired and returned
            sample(40.0, {"node2": "resurrect: node.lost"}),  # drained again: no new fault
        ],
    )
    assert len(NoFalseDrain().check(h)) == 1


def test_a_drain_of_another_node_than_the_faulted_one_is_false() -> None:
    h = history(
        faults=[fault("gpu_fatal", 10.0, node="node2")],
        samples=[sample(20.0, {"node5": "resurrect: gpu.hardware"})],
    )
    assert len(NoFalseDrain().check(h)) == 1


# ---------------------------------------------------------------- drain budget
# ------------------------------------------------------- healed nodes return by repair
def test_a_crashed_hosts_drain_ended_by_the_repair_workflow_is_kept() -> None:
    h = history(
        faults=[fault("host_crash", 10.0, node="node2")],
        samples=[sample(20.0, {"node2": "resurrect: node.lost"}), sample(40.0)],
        returned_by_repair={"node2": [35.0]},
    )
    assert HealedNodesReturnByRepair().check(h) == []


def test_a_crashed_hosts_drain_ended_without_the_repair_workflow_is_a_violation() -> None:
    h = history(
        faults=[fault("host_crash", 10.0, node="node2")],
        samples=[sample(20.0, {"node2": "resurrect: node.lost"}), sample(40.0)],
    )
    [found] = HealedNodesReturnByRepair().check(h)
    assert found.startswith("node node2 drained at 20.0 was back in service at 40.0")


def test_a_drain_a_later_node_loss_caused_is_the_soak_operators_to_end() -> None:
    """The node crashed as a host once; its next drain is for a node loss, which the soak
    resumes itself (its operator), not the repair workflow."""
    h = history(
        faults=[fault("host_crash", 10.0, node="node2"), fault("node_loss", 100.0, node="node2")],
        samples=[
            sample(20.0, {"node2": "resurrect: node.lost"}),
            sample(40.0),  # returned by the repair workflow
            sample(120.0, {"node2": "resurrect: node.lost"}),
            sample(140.0),  # resumed by the soak's operator
        ],
        returned_by_repair={"node2": [35.0]},
    )
    assert HealedNodesReturnByRepair().check(h) == []


def test_drains_within_the_budget_are_kept_and_one_more_is_a_violation() -> None:
    within = sample(1.0, {"node1": "r", "node2": "r"})
    over = sample(2.0, {"node1": "r", "node2": "r", "node3": "r"})
    assert DrainBudgetKept().check(history(samples=[within])) == []
    [found] = DrainBudgetKept().check(history(samples=[within, over]))
    assert "3 nodes drained" in found and "allows 2" in found


# ---------------------------------------------------------------- recoveries end
def test_an_open_recovery_or_one_without_an_outcome_is_a_violation() -> None:
    closed = recovery()
    open_ = recovery(job_id="2", closed_at=None, status="running", outcome=None)
    no_outcome = recovery(job_id="3", status="failed", outcome=None)
    found = RecoveriesEnd().check(history(recoveries=[closed, open_, no_outcome]))
    assert len(found) == 2 and "running" in found[0] and "failed" in found[1]


# ---------------------------------------------------------------- goodput adds up
def test_goodput_parts_that_add_up_to_the_wall_time_are_kept() -> None:
    parts = {"productive": 80.0, "detection": 5.0, "recovery": 10.0, "unattributed": 5.2}
    assert GoodputAddsUp().check(history(goodput=[JobGoodputRecord("1", 100.0, parts)])) == []


def test_goodput_parts_that_miss_part_of_the_wall_time_are_a_violation() -> None:
    parts = {"productive": 80.0, "detection": 5.0}
    [found] = GoodputAddsUp().check(history(goodput=[JobGoodputRecord("1", 100.0, parts)]))
    assert "85.0 s of 100.0 s" in found


# ---------------------------------------------------------------- RSS
def test_rss_within_ten_percent_of_its_warm_up_value_is_kept() -> None:
    life = ProcessLife(
        "worker", 10, 0.0, rss_kb=[(10.0, 50_000), (70.0, 100_000), (900.0, 109_000)]
    )
    assert RssStable().check(history(processes=[life])) == []


def test_rss_growing_past_ten_percent_is_a_violation_and_killed_processes_are_not_judged() -> None:
    grows = ProcessLife("watcher", 11, 0.0, rss_kb=[(70.0, 100_000), (900.0, 120_000)])
    killed = ProcessLife("worker", 12, 0.0, ended_at=500.0,
                         rss_kb=[(70.0, 100_000), (400.0, 200_000)])  # fmt: skip
    young = ProcessLife("agent-node1", 13, 950.0, rss_kb=[(960.0, 10_000), (990.0, 90_000)])
    [found] = RssStable().check(history(processes=[grows, killed, young]))
    assert found.startswith("watcher (pid 11) grew")


def test_every_invariant_reports_one_verdict_each() -> None:
    verdicts = check_all(history(jobs=[job()]))
    assert [v.name for v in verdicts] == [i.name for i in INVARIANTS]
    assert all(v.violations == [] for v in verdicts)
    assert verdicts[0].as_line()["violations"] == 0


def test_a_saved_history_loads_back_the_same() -> None:
    import json

    from benchmarks.chaos.history import load_history

    original = history(
        jobs=[job()],
        faults=[fault("node_loss", 10.0, node="node2")],
        recoveries=[recovery()],
        samples=[
            sample(20.0, {"node2": "resurrect: node.lost"}, j1=JobSample("RUNNING", 1, False))
        ],
        processes=[ProcessLife("worker", 10, 0.0, rss_kb=[(70.0, 100_000)])],
        goodput=[JobGoodputRecord("1", 100.0, {"productive": 100.0})],
    )
    again = load_history(json.loads(json.dumps(original.to_json())))
    assert again == original


def test_slurm_requeueing_a_job_not_opted_in_off_a_lost_node_is_not_resurrect_touching_it() -> None:
    """Seen in the seed-11 soak: slurmctld logged "requeue JobId=45 per user/system request"
    two seconds after the job's node was killed; no recovery of the job existed."""
    lost = history(
        jobs=[job(opted_in=False, restart_count=1)],
        faults=[fault("node_loss", 5.0, job_id="1", node="node6")],
    )
    assert NotOptedInUntouched().check(lost) == []
    no_loss = history(
        jobs=[job(opted_in=False, restart_count=1)],
        faults=[fault("gpu_fatal", 5.0, job_id="1", node="node6")],
    )
    assert NotOptedInUntouched().check(no_loss) == ["job 1 (not opted in) was requeued"]


def test_slurm_requeueing_a_job_not_opted_in_on_a_node_cut_off_is_not_resurrect_touching_it() -> (
    None
):
    """Seen in the seventh 60-minute host soak: job 189, not opted in, ended on node2 7 s into a
    one-way partition of node2 and slurmctld requeued it at once ("per user/system request":
    its batch step could not reach slurmctld); no recovery of the job existed."""
    cut = history(
        jobs=[job(opted_in=False, restart_count=1)],
        faults=[fault("partition_one_way", 5.0, job_id="1", node="node2")],
    )
    assert NotOptedInUntouched().check(cut) == []
    liveness_only = history(
        jobs=[job(opted_in=False, restart_count=1)],
        faults=[fault("agent_partition", 5.0, job_id="1", node="node2")],
    )
    assert NotOptedInUntouched().check(liveness_only) == ["job 1 (not opted in) was requeued"]
