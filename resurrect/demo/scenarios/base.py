"""What a demo scenario is, and the story most of them share: one fault, one recovery.

A :class:`Scenario` says how the demo sets up for its fault (the operator's policy, the
job's comment and environment, node agents), and plays the fault once the job runs
(:meth:`Scenario.play`), returning the result the demo prints. :class:`OneFault` is the
story of the scenarios with a single fault: inject it (:meth:`OneFault.inject`), wait for
the recovery, follow the job back to running and to the end of training, and verify that
its final parameters equal an uninterrupted run's.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from resurrect.contracts import JobState, RecoveryOutcome
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.stage import DemoSettings, Stage
from resurrect.demo.verify import culprit, final_sha, job_cost, uninterrupted_sha
from resurrect.goodput.accounting import lost_by_part

DETECT_TIMEOUT_S = 120.0
ENDED = (JobState.RUNNING, JobState.PENDING, JobState.COMPLETING)


@dataclass(frozen=True)
class Fault:
    """What a scenario injected: when (epoch seconds), on which node, and what it touched."""

    at: float
    node: str
    stopped_rank: int | None = None
    damaged_checkpoint: str | None = None
    # ends a fault that lasts (a slowed rank) once the recovery has started
    end: Callable[[], Awaitable[None]] | None = None


class Scenario(ABC):
    """One fault the demo injects: how it sets up, how it plays, what counts as success."""

    name: ClassVar[str]
    # what the fault is and what resurrect should do, for --help and the docs
    summary: ClassVar[str]
    # node agents with simulated GPUs run on every node (a second source for GPU faults)
    node_agents: ClassVar[bool] = False
    # "local": every node on this host's network; "netns": each node its own host in
    # namespaces (deploy/local-slurm/hosts.sh), its agent a process on it, fencing on
    hosts: ClassVar[str] = "local"
    # the job's first attempt holds after the checkpoint the fault waits for until the fault
    # is injected (a fault injected from outside the job, which waits for nothing the job
    # prints: without the hold a slow demo could find the job already trained to its end)
    holds_for_fault: ClassVar[bool] = False

    def operator_policy(self, settings: DemoSettings) -> dict[str, Any]:
        """The operator's default job policy (config ``policy.default``) beyond opt-in."""
        return {}

    def comment(self, settings: DemoSettings) -> dict[str, Any]:
        """The job's ``resurrect`` comment section (the checkpoint dir is added)."""
        return {"max_restarts": 2}

    def job_env(self, settings: DemoSettings) -> dict[str, str]:
        """Environment variables for the training job (its fault injection switches)."""
        return {}

    def train_steps(self, settings: DemoSettings) -> int:
        """How many steps the job trains."""
        return settings.train_steps

    def cluster_nodes(self, settings: DemoSettings) -> int:
        """How many nodes the local cluster has."""
        return settings.nodes

    def checkpoint_before_fault(self, settings: DemoSettings) -> int | None:
        """The checkpoint step the job must have written before the fault (None: wait for
        none, the job injects its own fault)."""
        s = settings
        return max(s.ckpt_every, (s.fault_after_step // s.ckpt_every) * s.ckpt_every)

    @abstractmethod
    async def play(self, stage: Stage, victim: str) -> dict[str, Any]:
        """Inject the fault (``victim``: the node it targets), follow what resurrect does,
        and return the result."""

    @abstractmethod
    def succeeded(self, result: dict[str, Any]) -> bool:
        """Whether ``result`` shows what the scenario expects of resurrect."""


class OneFault(Scenario):
    """A scenario with one fault and one recovery that brings the job back to the end."""

    # the job runs again away from the injected node (a hang or a straggler without
    # hardware evidence restarts in place)
    moves_away: ClassVar[bool] = True
    # the job trains to the end after the recovery (False: the demo cancels it)
    runs_to_end: ClassVar[bool] = True

    @abstractmethod
    async def inject(self, stage: Stage, victim: str) -> Fault:
        """Inject the fault targeting ``victim``."""

    def succeeded(self, result: dict[str, Any]) -> bool:
        """Recovered, and trained to the end where the scenario lets the job run on."""
        return bool(
            result.get("recovered") and (result.get("job_completed") or not self.runs_to_end)
        )

    async def play(self, stage: Stage, victim: str) -> dict[str, Any]:
        s, say = stage.settings, stage.say
        workflow_id = recovery_workflow_id(stage.cluster.cluster_name, stage.job_id, 0)
        fault = await self.inject(stage, victim)
        stage.release_hold()  # the job held after the checkpoint the fault waited for
        try:
            t_detect = await stage.wait_workflow_started(workflow_id, timeout=DETECT_TIMEOUT_S)
        finally:
            if fault.end is not None:
                await fault.end()
        say(f"recovery {workflow_id} started {t_detect - fault.at:.1f} s after the fault")
        say(f"watch it: {stage.workflow_url(workflow_id)}")
        running = await stage.wait_job(
            lambda j: (
                j.state is JobState.RUNNING
                and j.restart_count > 0
                and not (self.moves_away and victim in j.nodes)
            ),
            s.timeout_s,
            "the job to run again on healthy nodes",
        )
        t_running = time.time()
        say(
            f"job {stage.job_id} running again on {', '.join(running.nodes)}"
            f" (restart {running.restart_count})"
        )
        handle = stage.client.get_workflow_handle(workflow_id, result_type=RecoveryOutcome)
        outcome: RecoveryOutcome = await asyncio.wait_for(handle.result(), timeout=s.timeout_s)
        say_outcome(stage, outcome)
        if not self.runs_to_end:  # the point is made; the long job need not finish
            await asyncio.to_thread(stage.cluster.run, ["scancel", stage.job_id], check=False)
        final = await stage.wait_job(
            lambda j: j.state not in ENDED, s.timeout_s, "training to finish"
        )
        completed = final.state is JobState.COMPLETED
        say(f"job {stage.job_id} finished: {final.state.value}")
        cost = await job_cost(stage)
        sha = final_sha(stage)
        reference = None
        if s.reference_run and completed:
            reference = await uninterrupted_sha(stage)
            say(
                "final parameters "
                + ("EQUAL to" if sha == reference else "DIFFERENT from")
                + " the uninterrupted run's"
            )
        checkpoint = outcome.checkpoint
        culprit_rank, culprit_node = culprit(outcome)
        return {
            "scenario": self.name,
            "scheduler": stage.settings.scheduler,
            "action": outcome.action.value,
            "culprit_rank": culprit_rank,
            "culprit_node": culprit_node,
            "stopped_rank": fault.stopped_rank,
            "recovery_notes": outcome.notes,
            "recovered": outcome.recovered,
            "fault_class": outcome.fault_class.value,
            "injected_node": victim,
            "drained_nodes": outcome.drained_nodes,
            "time_to_detect_s": round(t_detect - fault.at, 2),
            "time_to_recover_s": round(t_running - t_detect, 2),
            "job_completed": completed,
            "workflow_id": workflow_id,
            "job_id": stage.job_id,
            "job_restarts": final.restart_count,
            "resumed_from_step": checkpoint.resume_step if checkpoint else None,
            "damaged_checkpoint": fault.damaged_checkpoint,
            "checkpoint_note": checkpoint.note if checkpoint else None,
            "final_params_sha256": sha,
            "uninterrupted_params_sha256": reference,
            "params_equal_uninterrupted": (sha == reference) if reference else None,
            "goodput": cost.goodput,
            "ettr": cost.ettr,
            "lost_s": lost_by_part(cost),
        }


def say_outcome(stage: Stage, outcome: RecoveryOutcome) -> None:
    """Show how a recovery ended, with its notes."""
    stage.say(
        f"recovery outcome: {outcome.outcome}; fault {outcome.fault_class.value};"
        f" drained {outcome.drained_nodes}"
    )
    for note in outcome.notes:
        stage.say(f"  note: {note}")
