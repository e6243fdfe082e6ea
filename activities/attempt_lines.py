"""Which of a job output's findings are the interrupted attempt's: an attempt shares its
output file with the attempts before it, whose lines say nothing of why it ended - unless an
earlier attempt's leftovers ended it (:func:`this_attempts`); and how the attempt ended, as
known now (:func:`attempt_end_state`)."""

from __future__ import annotations

from resurrect.activities.earlier_recoveries import EarlierRecoveries
from resurrect.contracts import Evidence, JobState, RecoveryContext
from resurrect.contracts.scheduler import FINISHED_JOB_STATES
from resurrect.evidence_trust import earlier_attempts_leftover, names_a_node_the_attempt_lacks


def this_attempts(
    found: list[Evidence], bundle: RecoveryContext, earlier: EarlierRecoveries | None
) -> tuple[list[Evidence], str]:
    """The output's findings without the lines of an earlier attempt that the interrupted
    attempt shares the file with (a node lost that this attempt never ran on,
    :func:`~resurrect.evidence_trust.names_a_node_the_attempt_lacks`), which say nothing of
    why this attempt ended - unless they are how it ended: an earlier attempt's leftovers on
    a node that attempt lost cancelled this attempt's step
    (:func:`~resurrect.evidence_trust.earlier_attempts_leftover`, a finding added then; not
    when the attempt ended cancelled, a person's word); and a note on those left out ("" when
    none). Its nodes: as the report saw them, else the job's now."""
    nodes = bundle.interruption.nodes or bundle.job.nodes
    kept: list[Evidence] = []
    dropped: list[Evidence] = []
    for evidence in found:
        (dropped if names_a_node_the_attempt_lacks(evidence, nodes) else kept).append(evidence)
    if not dropped:
        return kept, ""
    lost_before = earlier.lost_nodes if earlier is not None else frozenset()
    leftover = (
        earlier_attempts_leftover(dropped, kept, nodes, lost_before)
        if attempt_end_state(bundle) is not JobState.CANCELLED
        else None
    )
    if leftover is not None:
        return [*kept, leftover], (
            f"attempt {bundle.interruption.restart_count} (on {','.join(nodes)}) was ended by"
            f" an earlier attempt's leftovers on {leftover.host}, a node that attempt lost:"
            f" {len(dropped)} line(s) of it, e.g. {dropped[0].text[:160]!r}"
        )
    return kept, (
        f"not a fault of attempt {bundle.interruption.restart_count} (on {','.join(nodes)}):"
        f" {len(dropped)} line(s) of an earlier attempt, e.g. {dropped[0].text[:160]!r}"
    )


def attempt_end_state(bundle: RecoveryContext) -> JobState | None:
    """How the interrupted attempt ended, as known now: the job's state when the job read is
    still that attempt and has finished (a report sent while it ran, a node agent's silence,
    is answered by Slurm's final word later) or is ending (COMPLETING: the state its reason
    already says, :attr:`~resurrect.contracts.JobInfo.ending_state`, else COMPLETING, its
    final word still to come); otherwise the state the report saw."""
    job, report = bundle.job, bundle.interruption
    if job.restart_count == report.restart_count and (
        job.state in FINISHED_JOB_STATES or job.state is JobState.COMPLETING
    ):
        return job.ending_state
    return report.job_state or job.state
