"""Found by the chaos soak (benchmarks/chaos_soak.py, seed 1): a job whose rank failed was
taken for one a person cancelled, because srun's teardown of the step prints the same
``*** STEP n ON host CANCELLED AT ... ***`` line scancel does; the recovery ended
``nothing_to_do`` and the job was lost. Only Slurm's job state says a person cancelled it."""

from __future__ import annotations

from pathlib import Path

from resurrect.contracts import Evidence, FaultClass, JobState, RecoveryAction
from resurrect.rules import attribute, load_engine
from resurrect.rules.scheduler_evidence import cancel_claims_checked

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chaos"
ENGINE = load_engine()


def evidence_of(name: str) -> list[Evidence]:
    lines = (FIXTURES / name).read_text().splitlines()
    return ENGINE.scan_lines(lines, file=name)


def attribute_as(found: list[Evidence], state: JobState) -> tuple[FaultClass, RecoveryAction]:
    diagnosis = attribute(cancel_claims_checked(found, state), confidences=ENGINE.confidences())
    return diagnosis.fault_class, diagnosis.action


def test_a_step_srun_took_down_after_a_rank_raised_is_the_application_error() -> None:
    found = evidence_of("app-error-step-cancelled.log")
    assert (
        attribute(found, confidences=ENGINE.confidences()).fault_class is FaultClass.JOB_CANCELLED
    )
    assert attribute_as(found, JobState.FAILED) == (FaultClass.APP_ERROR, RecoveryAction.STOP)


def test_a_launch_that_failed_on_a_lost_node_is_not_a_cancel() -> None:
    fault, action = attribute_as(evidence_of("launch-failed-on-lost-node.log"), JobState.FAILED)
    assert fault is not FaultClass.JOB_CANCELLED
    assert action is not RecoveryAction.NONE


def test_a_job_slurm_says_was_cancelled_keeps_the_cancel() -> None:
    found = evidence_of("app-error-step-cancelled.log")
    assert attribute_as(found, JobState.CANCELLED)[0] is FaultClass.JOB_CANCELLED


def test_a_running_job_or_an_unknown_state_changes_nothing() -> None:
    found = evidence_of("app-error-step-cancelled.log")
    assert cancel_claims_checked(found, JobState.RUNNING) == found
    assert cancel_claims_checked(found, None) == found
