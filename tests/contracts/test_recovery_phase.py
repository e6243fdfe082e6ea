"""A recovery's phases (resurrect.contracts.RecoveryPhase): the values visibility stores,
and the phase of a plan step."""

from __future__ import annotations

from resurrect.contracts import RecoveryPhase, step_phase
from resurrect.contracts.recovery_status import RecoveryWorkflowStatus


def test_the_search_attribute_values_of_the_phases_stay_as_stored() -> None:
    assert {p.value for p in RecoveryPhase} == {
        "reported",
        "gathering_evidence",
        "awaiting_second_source",
        "attributing",
        "awaiting_approval",
        "drain_nodes",
        "verify_checkpoint",
        "requeue_job",
        "wait_running",
        "notify",
        "run_program",
        "done",
    }


def test_a_built_in_step_is_its_phase_and_a_plugin_step_its_activity_name() -> None:
    assert step_phase("recovery.drain_nodes") is RecoveryPhase.DRAIN_NODES
    assert step_phase("webhook.post") == "webhook.post"
    assert step_phase("recovery.something_new") == "something_new"


def test_the_status_reads_a_phase_as_the_enum_and_a_plugin_step_as_text() -> None:
    done = RecoveryWorkflowStatus.model_validate_json('{"phase": "done"}')
    assert done.phase is RecoveryPhase.DONE
    plugin = RecoveryWorkflowStatus.model_validate_json('{"phase": "webhook.post"}')
    assert plugin.phase == "webhook.post" and not isinstance(plugin.phase, RecoveryPhase)
