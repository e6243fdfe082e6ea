"""RecoveryWorkflow's decision ladder and outcomes, on the time-skipping test server.

Every activity is a stand-in registered under its production name (resurrect/contracts/workflow_names.py for
the fixed ones, the plan files' ``recovery.*`` names for the steps), scripted by a
:class:`Stage`: what the evidence is, how it is attributed, how many restarts were charged,
what each step reports or raises. Retry backoffs and timeouts cost no wall time. The real
activities over a real dev server and real Slurm are tested in test_recovery_workflow.py
and tests/e2e.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.builders import job, make_config
from support.histories import keep
from support.temporal import skipping_time
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.common import TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from resurrect.config import ApprovalSettings
from resurrect.contracts import (
    Diagnosis,
    Evidence,
    FaultClass,
    Interruption,
    JobPolicy,
    JobState,
    NodeInfo,
    RecoveryAction,
    RecoveryContext,
    RecoveryOutcome,
    SignalKind,
    StepInput,
    StepResult,
)
from resurrect.contracts.assessment import Assessment, AssessRequest
from resurrect.contracts.recovery_status import RecoveryWorkflowStatus
from resurrect.contracts.workflow_names import (
    PHASE_QUERY,
    REPORT_SIGNAL,
    STATUS_QUERY,
    Activity,
)
from resurrect.errors import JobNotFound, PermanentStepError, SchedulerUnavailable
from resurrect.plans.loader import load_plans
from resurrect.plans.models import ResolvedPlan
from resurrect.progress.hang_culprits import HangCulprits
from resurrect.sensors.report import report_interruption
from resurrect.temporal import search_attributes as sa
from resurrect.testing.steps import make_step_input
from resurrect.workers.recovery_worker import PASSTHROUGH_MODULES
from resurrect.workflows.recovery import RecoveryWorkflow

StepFn = Callable[[StepInput], StepResult]
# The steps of the shipped plan restart-from-checkpoint (no drain).
RESTART_IN_PLACE = ["recovery.verify_checkpoint", "recovery.requeue_job", "recovery.wait_running"]


def _drained(step: StepInput) -> StepResult:
    nodes = step.decision.drain_nodes
    if step.observe:
        return StepResult(would_have=[f"would drain {n}" for n in nodes])
    return StepResult(drained_nodes=nodes, excluded_nodes=nodes)


def _requeued(step: StepInput) -> StepResult:
    if step.observe:
        return StepResult(would_have=[f"would requeue job {step.bundle.job.job_id}"])
    return StepResult(requeued=True, excluded_nodes=step.decision.exclude_nodes)


def _running(step: StepInput) -> StepResult:
    return StepResult() if step.observe else StepResult(running_again=True)


def _nothing(step: StepInput) -> StepResult:
    return StepResult()


@dataclass
class Stage:
    """What the stand-in activities answer, and what they were asked (in order)."""

    bundle: RecoveryContext
    diagnosis: Diagnosis
    charged: int = 0
    plans: list[ResolvedPlan] = field(default_factory=load_plans)
    steps: dict[str, StepFn | BaseException] = field(
        default_factory=lambda: {
            "recovery.drain_nodes": _drained,
            "recovery.verify_checkpoint": _nothing,
            "recovery.requeue_job": _requeued,
            "recovery.wait_running": _running,
            "recovery.notify": _nothing,
        }
    )
    gather_failures: list[BaseException] = field(default_factory=list)
    # what later readings of the evidence find (in order; the last one stays)
    readings: list[RecoveryContext] = field(default_factory=list)
    # run as local activities (recovery.notify is a built-in quick step; drain_nodes stands in
    # for a quick step that can fail)
    quick_steps: list[str] = field(
        default_factory=lambda: ["recovery.drain_nodes", "recovery.notify"]
    )
    calls: list[str] = field(default_factory=list)
    inputs: dict[str, list[Any]] = field(default_factory=dict)

    def _record(self, name: str, value: object) -> None:
        self.calls.append(name)
        self.inputs.setdefault(name, []).append(value)

    def activities(self) -> list[Callable[..., Any]]:
        @activity.defn(name=Activity.GATHER_EVIDENCE)
        async def gather_evidence(report: Interruption) -> RecoveryContext:
            self._record(Activity.GATHER_EVIDENCE, report)
            if self.gather_failures:
                raise self.gather_failures.pop(0)
            if self.calls.count(Activity.GATHER_EVIDENCE) > 1 and self.readings:
                self.bundle = self.readings.pop(0)
            return self.bundle

        @activity.defn(name=Activity.ASSESS)
        async def assess(request: AssessRequest) -> Assessment:
            self._record(Activity.ASSESS, request)
            # the operator's approval settings: nothing asks a person in these tests (the
            # approval gates have their own: tests/workflows/test_drain_budget_and_approvals)
            return Assessment(
                diagnosis=self.diagnosis,
                charged_restarts=self.charged,
                plans=self.plans,
                approvals=ApprovalSettings(),
                quick_steps=self.quick_steps,
            )

        def step(name: str) -> Callable[..., Any]:
            @activity.defn(name=name)
            async def run(step_input: StepInput) -> StepResult:
                self._record(name, step_input)
                behaviour = self.steps[name]
                if isinstance(behaviour, BaseException):
                    raise behaviour
                return behaviour(step_input)

            return run

        return [gather_evidence, assess, *(step(name) for name in self.steps)]

    @property
    def steps_run(self) -> list[str]:
        return [call for call in self.calls if call in self.steps]


def stage(
    fault: FaultClass,
    *,
    culprits: tuple[str, ...] = (),
    state: JobState = JobState.NODE_FAIL,
    mode: str = "act",
    policy: JobPolicy | None = None,
    charged: int = 0,
) -> Stage:
    """An interrupted 2-node job (100, on node1+node2) diagnosed as ``fault``."""
    incident = make_step_input(
        "recovery.drain_nodes",
        observe=mode == "observe",
        job=job(state=state),
        fault_class=fault,
        culprits=list(culprits),
    )
    bundle = incident.bundle.model_copy(update={"policy": policy or JobPolicy(max_restarts=2)})
    return Stage(bundle=bundle, diagnosis=incident.diagnosis, charged=charged)


@dataclass
class Run:
    env: WorkflowEnvironment
    task_queue: str

    async def start(self, report: Interruption) -> WorkflowHandle[Any, RecoveryOutcome]:
        workflow_id = await report_interruption(self.env.client, report, task_queue=self.task_queue)
        return self.env.client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)


@pytest.fixture
async def run(time_skipping: WorkflowEnvironment) -> AsyncIterator[Run]:
    yield Run(time_skipping, make_config().temporal.task_queue)


def worker(run: Run, scripted: Stage) -> Worker:
    return Worker(
        run.env.client,
        task_queue=run.task_queue,
        workflows=[RecoveryWorkflow],
        activities=scripted.activities(),
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
        ),
    )


async def search_attributes(run: Run, outcome: RecoveryOutcome) -> TypedSearchAttributes:
    """What the recovery is searchable by, now that it ended."""
    handle = run.env.client.get_workflow_handle(outcome.workflow_id)
    return (await handle.describe()).typed_search_attributes


async def recover(run: Run, scripted: Stage) -> RecoveryOutcome:
    async with worker(run, scripted):
        handle = await run.start(scripted.bundle.interruption)
        async with skipping_time(run.env):
            return await handle.result()


# ---------------------------------------------------------------------------------------
# the ladder: diagnosis -> action -> plan -> steps -> outcome


async def test_node_loss_drains_the_culprit_then_restarts_from_a_checkpoint(run: Run) -> None:
    scripted = stage(FaultClass.NODE_LOST, culprits=("node2",))
    outcome = await recover(run, scripted)
    assert scripted.calls == [
        Activity.GATHER_EVIDENCE,
        Activity.ASSESS,
        "recovery.drain_nodes",
        "recovery.verify_checkpoint",
        "recovery.requeue_job",
        "recovery.wait_running",
    ]
    assert (outcome.outcome, outcome.recovered) == ("recovered", True)
    assert outcome.action is RecoveryAction.DRAIN_AND_RESTART
    assert outcome.drained_nodes == ["node2"] and outcome.excluded_nodes == ["node2"]
    [requeue] = scripted.inputs["recovery.requeue_job"]
    assert requeue.decision.exclude_nodes == ["node2"] and not requeue.observe
    assert requeue.state.drained_nodes == ["node2"]  # each step sees what the earlier did
    assert any("plan 'drain-and-restart'" in note for note in outcome.notes)


async def test_a_restart_class_without_culprits_requeues_without_draining(run: Run) -> None:
    scripted = stage(FaultClass.PROCESS_CRASH, state=JobState.FAILED)
    outcome = await recover(run, scripted)
    assert scripted.steps_run == RESTART_IN_PLACE
    assert outcome.outcome == "recovered" and outcome.drained_nodes == []
    assert any("restart charged to budget (1/2)" in note for note in outcome.notes)


async def test_an_application_error_stops_and_notifies(run: Run) -> None:
    scripted = stage(FaultClass.APP_ERROR, state=JobState.FAILED)
    outcome = await recover(run, scripted)
    assert scripted.steps_run == ["recovery.notify"]
    assert scripted.inputs["recovery.notify"][0].params == {"severity": "critical"}
    assert (outcome.outcome, outcome.requeued, outcome.action) == (
        "stopped",
        False,
        RecoveryAction.STOP,
    )


async def test_a_cancelled_job_is_left_alone(run: Run) -> None:
    scripted = stage(FaultClass.JOB_CANCELLED, state=JobState.CANCELLED)
    outcome = await recover(run, scripted)
    assert scripted.steps_run == ["recovery.notify"]
    assert outcome.outcome == "nothing_to_do" and not outcome.requeued


async def test_a_spent_restart_budget_stops_charged_faults(run: Run) -> None:
    scripted = stage(FaultClass.PROCESS_CRASH, state=JobState.FAILED, charged=2)
    outcome = await recover(run, scripted)
    assert scripted.steps_run == ["recovery.notify"]
    assert outcome.outcome == "stopped" and outcome.action is RecoveryAction.STOP
    assert any("restart budget spent: 2 of 2" in note for note in outcome.notes)


async def test_infrastructure_faults_are_free_even_over_budget(run: Run) -> None:
    scripted = stage(FaultClass.GPU_HARDWARE, culprits=("node1",), charged=5)
    outcome = await recover(run, scripted)
    assert outcome.outcome == "recovered" and outcome.drained_nodes == ["node1"]
    attributes = await search_attributes(run, outcome)
    assert attributes.get(sa.BUDGET_CHARGED) is None  # a free restart is not charged


async def test_a_charged_restart_is_marked_for_the_next_budget_count(run: Run) -> None:
    scripted = stage(FaultClass.PROCESS_CRASH, state=JobState.FAILED)
    outcome = await recover(run, scripted)
    attributes = await search_attributes(run, outcome)
    assert attributes.get(sa.BUDGET_CHARGED) is True
    assert attributes.get(sa.OUTCOME) == "recovered"
    assert attributes.get(sa.FAULT_CLASS) == "process.crash"
    assert attributes.get(sa.PHASE) == "done"
    assert attributes.get(sa.NODES) == ["node1", "node2"]


async def test_observe_mode_runs_the_plan_dry_and_reports_what_it_would_do(run: Run) -> None:
    scripted = stage(FaultClass.NODE_LOST, culprits=("node2",), mode="observe")
    outcome = await recover(run, scripted)
    assert all(step.observe for name in scripted.steps_run for step in scripted.inputs[name])
    assert (outcome.outcome, outcome.recovered, outcome.mode) == ("observed", False, "observe")
    assert outcome.would_have == ["would drain node2", "would requeue job 100"]
    assert outcome.drained_nodes == []


async def test_no_matching_plan_ends_with_no_plan(run: Run) -> None:
    scripted = stage(FaultClass.NODE_LOST, culprits=("node2",))
    scripted.plans = [p for p in scripted.plans if p.name != "drain-and-restart"]
    outcome = await recover(run, scripted)
    assert scripted.steps_run == []
    assert outcome.outcome == "no_plan"
    assert any("no recovery plan matches action drain_and_restart" in n for n in outcome.notes)


async def test_requeued_but_not_running_again(run: Run) -> None:
    scripted = stage(FaultClass.PROCESS_CRASH, state=JobState.FAILED)
    scripted.steps["recovery.wait_running"] = lambda step: StepResult(
        ok=False, running_again=False, detail="still pending after 60s"
    )
    outcome = await recover(run, scripted)
    assert (outcome.outcome, outcome.requeued, outcome.recovered) == (
        "requeued_not_running",
        True,
        False,
    )
    assert "recovery.wait_running: still pending after 60s" in outcome.notes


async def test_a_step_that_asks_to_stop_ends_the_recovery_with_its_outcome(run: Run) -> None:
    scripted = stage(FaultClass.PROCESS_CRASH, state=JobState.FAILED)
    scripted.steps["recovery.verify_checkpoint"] = lambda step: StepResult(
        stop_recovery=True, outcome="job_completed", detail="the job had finished"
    )
    outcome = await recover(run, scripted)
    assert scripted.steps_run == ["recovery.verify_checkpoint"]
    assert outcome.outcome == "job_completed"


# ---------------------------------------------------------------------------------------
# failures and retries (the retry backoffs are skipped, not slept)


async def test_a_permanent_step_error_is_not_retried_and_stops_the_plan(run: Run) -> None:
    scripted = stage(FaultClass.NODE_LOST, culprits=("node2",))
    scripted.steps["recovery.drain_nodes"] = PermanentStepError("node2: permission denied")
    outcome = await recover(run, scripted)
    assert scripted.steps_run == ["recovery.drain_nodes"]  # once: non-retryable
    assert outcome.outcome == "failed" and not outcome.requeued
    assert any("PermanentStepError: node2: permission denied" in n for n in outcome.notes)


async def test_a_failed_step_marked_continue_lets_the_plan_go_on(run: Run) -> None:
    scripted = stage(FaultClass.PROCESS_CRASH, state=JobState.FAILED)
    scripted.steps["recovery.wait_running"] = PermanentStepError("cannot read the job")
    outcome = await recover(run, scripted)
    assert outcome.outcome == "requeued_not_running"
    assert any(n.startswith("recovery.wait_running failed:") for n in outcome.notes)


async def test_an_unreachable_controller_is_retried_until_it_answers(run: Run) -> None:
    scripted = stage(FaultClass.NODE_LOST, culprits=("node2",))
    scripted.gather_failures = [SchedulerUnavailable("slurmctld down") for _ in range(6)]
    start = await run.env.get_current_time()
    outcome = await recover(run, scripted)
    waited = (await run.env.get_current_time()) - start
    assert scripted.calls.count(Activity.GATHER_EVIDENCE) == 7
    assert outcome.outcome == "recovered"
    assert waited.total_seconds() >= 1 + 2 + 4 + 8 + 15 + 15  # backoff, capped at 15 s


async def test_an_unknown_job_is_not_retried_and_ends_job_unknown(run: Run) -> None:
    scripted = stage(FaultClass.NODE_LOST)
    scripted.gather_failures = [JobNotFound("job 100 not known to slurmctld")]
    outcome = await recover(run, scripted)
    assert scripted.calls == [Activity.GATHER_EVIDENCE]
    assert outcome.outcome == "job_unknown" and outcome.fault_class is FaultClass.UNKNOWN
    assert any("JobNotFound: job 100 not known" in note for note in outcome.notes)


# ---------------------------------------------------------------------------------------
# what people and other sensors see while it runs


async def test_reports_of_other_sensors_reach_attribution_deduplicated(run: Run) -> None:
    scripted = stage(FaultClass.GPU_HARDWARE, culprits=("node1",))
    xid = Evidence(
        kind=SignalKind.KERNEL_LOG,
        text="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus",
        rule="xid.fallen_off_bus",
        role="root",
        host="node1",
    )
    report = scripted.bundle.interruption
    agent = report.model_copy(update={"source": "node_agent", "evidence": [xid]})
    handle = await run.start(report)
    for _ in range(2):  # the same evidence twice: kept once
        await handle.signal(REPORT_SIGNAL, agent)
    async with worker(run, scripted):  # a burst: the reports are in before a worker looks
        async with skipping_time(run.env):
            outcome = await handle.result()
        status = await handle.query(STATUS_QUERY, result_type=RecoveryWorkflowStatus)
        phase = await handle.query(PHASE_QUERY)
    [request] = scripted.inputs[Activity.ASSESS]
    assert request.reported == [xid]
    assert outcome.outcome == "recovered"
    assert phase == "done" and status.plan == "drain-and-restart"
    assert status.fault_class == "gpu.hardware" and status.state.drained_nodes == ["node1"]


# ---------------------------------------------------------------------------------------
# hangs (decide.py rules 7 and 8): where the ladder takes a stalled job


def hang_stage(*reported: Evidence) -> Stage:
    """Job 100 hung, its ranks' stacks naming rank 1 on node2; ``reported``: what the
    follower sent with its report."""
    scripted = stage(FaultClass.JOB_HANG, culprits=("node2",), state=JobState.RUNNING)
    interruption = scripted.bundle.interruption.model_copy(update={"evidence": list(reported)})
    scripted.bundle = scripted.bundle.model_copy(update={"interruption": interruption})
    return scripted


async def test_a_hang_without_hardware_evidence_restarts_in_place_charged(run: Run) -> None:
    scripted = hang_stage()
    outcome = await recover(run, scripted)
    assert scripted.steps_run == RESTART_IN_PLACE
    assert outcome.outcome == "recovered" and outcome.drained_nodes == []
    assert outcome.action is RecoveryAction.RESTART
    [requeue] = scripted.inputs["recovery.requeue_job"]
    assert requeue.decision.exclude_nodes == []  # in place: the same nodes may run it
    attributes = await search_attributes(run, outcome)
    assert attributes.get(sa.BUDGET_CHARGED) is True


THROTTLED = Evidence(
    kind=SignalKind.GPU_METRIC,
    text="nvml gpu=0 pci=0000:3b:00 clocks event_reasons=hw_thermal_slowdown",
    rule="gpu.clocks.hw_slowdown",
    role="diagnostic",
    fault_class=FaultClass.JOB_STRAGGLER,
    host="node2",
    source="node_agent",
)


async def test_a_hang_whose_culprit_node_is_throttled_drains_it_free(run: Run) -> None:
    scripted = hang_stage(THROTTLED)
    scripted.charged = 2  # the budget is spent: a free restart still happens
    outcome = await recover(run, scripted)
    assert scripted.steps_run[0] == "recovery.drain_nodes"
    assert outcome.outcome == "recovered" and outcome.drained_nodes == ["node2"]
    assert outcome.action is RecoveryAction.DRAIN_AND_RESTART
    assert any(
        "culprit node2 has hardware evidence from the node agent" in n for n in outcome.notes
    )
    attributes = await search_attributes(run, outcome)
    assert attributes.get(sa.BUDGET_CHARGED) is None


async def test_hardware_evidence_in_a_later_report_reaches_the_decision(run: Run) -> None:
    """The follower reports the hang; the node agent's reading of the culprit node arrives
    as a second report: the decision weighs it as if it had come with the first."""
    scripted = hang_stage()
    scripted.charged = 2
    report = scripted.bundle.interruption
    agent = report.model_copy(update={"source": "node_agent", "evidence": [THROTTLED]})
    handle = await run.start(report)
    await handle.signal(REPORT_SIGNAL, agent)
    async with worker(run, scripted):
        async with skipping_time(run.env):
            outcome = await handle.result()
    assert scripted.steps_run[0] == "recovery.drain_nodes"
    assert outcome.outcome == "recovered" and outcome.drained_nodes == ["node2"]
    assert outcome.action is RecoveryAction.DRAIN_AND_RESTART


async def test_a_node_that_hung_other_jobs_is_flagged_in_the_recovery(run: Run) -> None:
    culprits = HangCulprits(window_s=7 * 24 * 3600)  # what the follower remembers
    culprits.record("node2", "97", now=0.0, job_nodes=["node1", "node2"])
    culprits.record("node2", "100", now=60.0, job_nodes=["node2", "node3"])
    history = culprits.evidence("node2", now=120.0)
    assert history is not None
    outcome = await recover(run, hang_stage(history))
    assert outcome.drained_nodes == []
    assert any("node node2 flagged as suspect" in n and "jobs 97" in n for n in outcome.notes)


# ---------------------------------------------------------------------------------------
# a node agent's silence alone: nothing changes until a second source agrees

SILENCE = Evidence(
    kind=SignalKind.HEARTBEAT,
    text="node agent on node2 silent for 6.0s (threshold 6.0s)",
    rule="node_agent.heartbeat_silence",
    role="root",
    fault_class=FaultClass.NODE_LOST,
    host="node2",
    source="node_agent",
)


NODES = ("node1", "node2", "node3")


def silence_stage() -> Stage:
    """Job 100 runs on node1+node2; node2's agent fell silent (its heartbeats stopped
    coming: a dead agent, lost datagrams or a lost node); Slurm still sees both nodes."""
    scripted = stage(FaultClass.NODE_LOST, culprits=("node2",), state=JobState.RUNNING)
    interruption = scripted.bundle.interruption.model_copy(
        update={"source": "node_agent", "evidence": [SILENCE], "suspect_nodes": ["node2"]}
    )
    nodes = [NodeInfo(name=n, state="ALLOCATED") for n in NODES]
    scripted.bundle = scripted.bundle.model_copy(
        update={"interruption": interruption, "nodes": nodes}
    )
    scripted.diagnosis = scripted.diagnosis.model_copy(update={"evidence": [SILENCE]})
    return scripted


def later(
    scripted: Stage, state: JobState, restart_count: int = 0, **node_flags: list[str]
) -> RecoveryContext:
    """A later reading of job 100: its state and attempt, and nodes with the flags given."""
    bundle = scripted.bundle
    nodes = [n.model_copy(update={"flags": node_flags.get(n.name, n.flags)}) for n in bundle.nodes]
    job = bundle.job.model_copy(update={"state": state, "restart_count": restart_count})
    return bundle.model_copy(update={"job": job, "nodes": nodes})


async def test_an_agents_silence_alone_changes_nothing_while_slurm_runs_the_job(run: Run) -> None:
    """Heartbeats lost on the way (for every node at once when the collector's network
    fails) must not requeue healthy jobs: the recovery waits, re-reading the job, and ends
    with the attempt when nothing else agreed."""
    scripted = silence_stage()
    running = later(scripted, JobState.RUNNING)
    scripted.readings = [running, running, later(scripted, JobState.COMPLETED)]
    outcome = await recover(run, scripted)
    assert scripted.calls == [Activity.GATHER_EVIDENCE] * 4  # no assessment, no step
    assert (outcome.outcome, outcome.requeued, outcome.drained_nodes) == (
        "job_completed",
        False,
        [],
    )
    assert outcome.excluded_nodes == []
    assert any("nothing is changed until a second source agrees" in n for n in outcome.notes)
    assert any("completed after" in n and "nothing was changed" in n for n in outcome.notes)


async def test_a_silent_node_is_left_out_of_the_restart_once_the_attempt_fails(run: Run) -> None:
    """A node really lost takes the job's attempt down: then the silence is confirmed enough
    to keep the node out of the restart, not to drain it (Slurm still sees it)."""
    scripted = silence_stage()
    scripted.readings = [later(scripted, JobState.RUNNING), later(scripted, JobState.FAILED)]
    outcome = await recover(run, scripted)
    assert scripted.calls.count(Activity.GATHER_EVIDENCE) == 3
    assert scripted.steps_run == RESTART_IN_PLACE
    assert outcome.outcome == "recovered" and outcome.drained_nodes == []
    [requeue] = scripted.inputs["recovery.requeue_job"]
    assert requeue.decision.exclude_nodes == ["node2"]
    assert any("a second source after" in n and "job FAILED" in n for n in outcome.notes)


async def test_an_attempt_being_torn_down_is_waited_for_until_it_ended(run: Run) -> None:
    """COMPLETING says the attempt is ending, not how: its output may hold slurmstepd's
    "CANCELLED" of a step taken down with a lost node, which only the final state (FAILED,
    not CANCELLED) tells from a person's cancel. Found by the 60-minute soak: job 133 was
    read COMPLETING, taken for cancelled and lost."""
    scripted = silence_stage()
    scripted.readings = [later(scripted, JobState.COMPLETING), later(scripted, JobState.FAILED)]
    outcome = await recover(run, scripted)
    assert scripted.calls.count(Activity.GATHER_EVIDENCE) == 3
    [request] = scripted.inputs[Activity.ASSESS]
    assert request.bundle.job.state is JobState.FAILED
    assert outcome.outcome == "recovered"


async def test_slurm_marking_the_silent_node_down_ends_the_wait(run: Run) -> None:
    scripted = silence_stage()
    down = later(scripted, JobState.RUNNING, node2=["NOT_RESPONDING"])
    down.nodes[1] = down.nodes[1].model_copy(update={"state": "DOWN"})
    scripted.readings = [down]
    outcome = await recover(run, scripted)
    assert scripted.calls[:3] == [
        Activity.GATHER_EVIDENCE,
        Activity.GATHER_EVIDENCE,
        Activity.ASSESS,
    ]
    assert outcome.outcome == "recovered" and outcome.drained_nodes == ["node2"]


async def test_the_silent_node_not_responding_in_two_reads_a_grace_apart_ends_the_wait(
    run: Run,
) -> None:
    """NOT_RESPONDING without DOWN is Slurm's word once a read after the grace (4 s) still
    shows it: the wait's next read (10 s later) does."""
    scripted = silence_stage()
    scripted.readings = [later(scripted, JobState.RUNNING, node2=["NOT_RESPONDING"])]
    outcome = await recover(run, scripted)
    assert scripted.calls[:4] == [Activity.GATHER_EVIDENCE] * 3 + [Activity.ASSESS]
    [request] = scripted.inputs[Activity.ASSESS]
    assert request.bundle.lasting_unavailable == ["node2"]
    assert outcome.outcome == "recovered" and outcome.drained_nodes == ["node2"]
    assert any("node2 unavailable but not DOWN in one read" in n for n in outcome.notes)


async def test_a_slurmctld_restart_after_an_agent_was_killed_drains_nothing(run: Run) -> None:
    """The 60-minute soak's sequence (docs/chaos-soak.md, 975955d): node2's agent is killed
    and the recovery waits for a second source; slurmctld restarts 17 s later and the wait's
    next read finds every node NOT_RESPONDING, not DOWN, until each slurmd registers again;
    the read after shows them all back, and the job runs on to its end. One read of a node
    not responding is no second source: nothing is drained, requeued or left out."""
    scripted = silence_stage()
    blip = later(scripted, JobState.RUNNING, **{n: ["NOT_RESPONDING"] for n in NODES})
    back = later(scripted, JobState.RUNNING)
    scripted.readings = [blip, back, back, later(scripted, JobState.COMPLETED)]
    outcome = await recover(run, scripted)
    assert scripted.calls == [Activity.GATHER_EVIDENCE] * 5  # no assessment, no step
    assert (outcome.outcome, outcome.drained_nodes, outcome.excluded_nodes) == (
        "job_completed",
        [],
        [],
    )
    assert any("node1, node2, node3 unavailable but not DOWN" in n for n in outcome.notes)
    history = await run.env.client.get_workflow_handle(outcome.workflow_id).fetch_history()
    keep("slurmctld-restart-blip-nr-read-twice", history)  # replayed by test_replay.py


async def test_a_node_not_responding_once_beside_job_output_is_read_again_before_deciding(
    run: Run,
) -> None:
    """A report with evidence of its own (the job's output names node2) and a first read of
    node2 NOT_RESPONDING during a controller restart: the recovery reads again after the
    grace and, node2 back, decides on the job's output alone (no drain)."""
    scripted = stage(FaultClass.NODE_LOST, culprits=("node2",), state=JobState.FAILED)
    printed = Evidence(
        kind=SignalKind.JOB_LOG,
        text="connection to node2 lost",
        rule="nccl.remote_error",
        role="root",
        fault_class=FaultClass.NODE_LOST,
        host="node2",
    )
    # what the read of node2 not responding makes of it, as the stand-in assessment is told
    not_responding = Evidence(
        kind=SignalKind.SCHEDULER_STATE,
        text="node node2 IDLE+NOT_RESPONDING (no reason)",
        rule="scheduler.node_state",
        role="root",
        fault_class=FaultClass.NODE_LOST,
        host="node2",
    )
    scripted.diagnosis = scripted.diagnosis.model_copy(
        update={"evidence": [printed, not_responding]}
    )
    blip = [NodeInfo(name=n, state="IDLE", flags=["NOT_RESPONDING"]) for n in NODES]
    scripted.bundle = scripted.bundle.model_copy(update={"nodes": blip})
    back = scripted.bundle.model_copy(
        update={"nodes": [NodeInfo(name=n, state="IDLE") for n in NODES]}
    )
    scripted.readings = [back]
    outcome = await recover(run, scripted)
    assert scripted.calls[:3] == [Activity.GATHER_EVIDENCE] * 2 + [Activity.ASSESS]
    [request] = scripted.inputs[Activity.ASSESS]
    assert request.bundle.lasting_unavailable == []
    assert outcome.drained_nodes == [] and outcome.outcome == "recovered", outcome.notes
    assert any("not draining node2: only the job's output names it" in n for n in outcome.notes)


async def test_an_attempt_slurm_requeued_itself_ends_the_wait(run: Run) -> None:
    """Slurm requeued the job on its own (the node failed) and the next attempt runs: the
    waiting recovery of the earlier attempt goes on with what it found, never waits on the
    next attempt's life."""
    scripted = silence_stage()
    scripted.readings = [later(scripted, JobState.RUNNING, restart_count=1)]
    outcome = await recover(run, scripted)
    assert scripted.calls[:3] == [
        Activity.GATHER_EVIDENCE,
        Activity.GATHER_EVIDENCE,
        Activity.ASSESS,
    ]
    assert any("a second source after" in n for n in outcome.notes), outcome.notes


async def test_an_attempt_slurm_requeued_that_then_completed_is_still_recovered(run: Run) -> None:
    """The silent node was lost with the batch host: Slurm requeued the job itself and its
    short next attempt completed before the wait looked again. The attempt the silence
    reported did not complete: the recovery goes on (found by the live silent-agent test)."""
    scripted = silence_stage()
    scripted.readings = [later(scripted, JobState.COMPLETED, restart_count=1)]
    outcome = await recover(run, scripted)
    assert Activity.ASSESS in scripted.calls and scripted.steps_run, outcome.notes
    assert not any("nothing was changed" in n for n in outcome.notes)


async def test_a_report_of_another_kind_ends_the_wait(run: Run) -> None:
    """The follower's report of the same attempt (here: a hang) is the second source."""
    scripted = silence_stage()
    report = scripted.bundle.interruption
    stalled = Evidence(
        kind=SignalKind.JOB_LOG,
        text="no output and no checkpoint activity for 600 s",
        rule="progress.stalled",
        role="root",
        fault_class=FaultClass.JOB_HANG,
    )
    follower = report.model_copy(update={"source": "log_tail", "evidence": [stalled]})
    async with worker(run, scripted):
        handle = await run.start(report)
        while await handle.query(PHASE_QUERY) != "awaiting_second_source":
            await asyncio.sleep(0.05)
        await handle.signal(REPORT_SIGNAL, follower)
        async with skipping_time(run.env):
            outcome = await handle.result()
    [request] = scripted.inputs[Activity.ASSESS]
    assert request.reported == [SILENCE, stalled]
    assert outcome.outcome == "recovered"


async def test_a_lost_node_still_not_responding_after_the_grace_is_drained(run: Run) -> None:
    """The watcher reports node2 not responding (after its own grace); the recovery's read
    after the grace still shows it, while Slurm tears the job down and lists only the node
    still completing: node2 is drained, judged against the job as the report found it
    (found by tests/e2e/test_recovery_on_slurm.py's observe-mode node loss)."""
    scripted = stage(FaultClass.NODE_LOST, culprits=("node2",), state=JobState.RUNNING)
    watcher = scripted.bundle.interruption.model_copy(
        update={"source": "slurm_watcher", "suspect_nodes": ["node2"]}
    )
    lost = [
        NodeInfo(name="node1", state="ALLOCATED"),
        NodeInfo(name="node2", state="ALLOCATED", flags=["NOT_RESPONDING"]),
    ]
    scripted.bundle = scripted.bundle.model_copy(update={"interruption": watcher, "nodes": lost})
    completing = scripted.bundle.job.model_copy(
        update={"state": JobState.COMPLETING, "nodes": ["node1"]}
    )
    scripted.readings = [scripted.bundle.model_copy(update={"job": completing})]
    outcome = await recover(run, scripted)
    [request] = scripted.inputs[Activity.ASSESS]
    assert request.bundle.job.nodes == ["node1", "node2"]
    assert request.bundle.lasting_unavailable == ["node2"]
    assert outcome.drained_nodes == ["node2"], outcome.notes
