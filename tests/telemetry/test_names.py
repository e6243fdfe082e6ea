"""The workflow and activity names telemetry and goodput read histories by are the ones the
workflows use (resurrect does not import the workflows package: the names are repeated)."""

from __future__ import annotations

from resurrect.contracts.workflow_names import RECOVERY_WORKFLOW, REPORT_SIGNAL, Activity
from resurrect.goodput import history
from resurrect.scheduler.base import DRAIN_REASON_PREFIX
from resurrect.telemetry import interceptor, record


def test_names_match_the_workflows() -> None:
    assert interceptor.RECOVERY_WORKFLOW == RECOVERY_WORKFLOW
    assert interceptor.ASSESS == Activity.ASSESS
    assert history.REPORT_SIGNAL == REPORT_SIGNAL
    assert history.GATHER_EVIDENCE == Activity.GATHER_EVIDENCE
    assert history.ASSESS == Activity.ASSESS
    assert history._NOT_STEPS == {Activity.GATHER_EVIDENCE, Activity.ASSESS}
    assert record.DRAIN_REASON_PREFIX == DRAIN_REASON_PREFIX
