"""Issue 20, item 4: a GPU binding read from the job's environment drained a healthy node for
free. A stopped rank whose ``CUDA_VISIBLE_DEVICES`` pointed at another job's thermally
throttled GPU produced ``gpu.clocks.hw_slowdown`` evidence rated as the node agent's, which
decision rule 7 trusts: ``drain_and_restart``, not charged, even with the budget spent.

Now the GPUs read for a job are the ones Slurm gave it on the node (``scontrol show job -d``
GRES IDX); a GPU outside them is never read for the job, and a pairing that rests on the
job's environment alone is the job's word (``source="job_output"``), which never drains
and never makes a restart free. Real rank processes (under a root stand-in step daemon,
tests/support/step_daemon.py), NVML faked (FakeNvml), Slurm's answer as 22.05 prints it.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import pytest
from support.decisions import decision_for
from support.step_daemon import step_daemon

import resurrect.stacks.collect as collect
import resurrect.stacks.probe as probe
from resurrect.contracts import (
    Diagnosis,
    Evidence,
    FaultClass,
    JobInfo,
    JobPolicy,
    JobState,
    RecoveryAction,
    SignalKind,
)
from resurrect.sensors.node_agent.fake_nvml import FakeNvml
from resurrect.sensors.node_agent.gpu_activity import LocalGpus, slowdown_evidence
from resurrect.sensors.node_agent.gpu_binding import job_gres_indices
from resurrect.stacks.probe import StackProbeRequest, probe_here
from resurrect.stacks.processes import job_rank_processes

JOB = "880011"
NODE = "gpu07"
HW_THERMAL = 0x040
SHOW_JOB = """JobId=880011 JobName={name}
   UserId=mallory(1001) GroupId=mallory(1001) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=gpu07
   BatchHost=gpu07
   NumNodes=1 NumCPUs=8 NumTasks=2 CPUs/Task=4 ReqB:S:C:T=0:0:*:*
   JOB_GRES=gpu:2
     Nodes=gpu07 CPU_IDs=0-7 Mem=0 GRES=gpu(IDX:0-1)
   MinCPUsNode=4 MinMemoryNode=0 MinTmpDiskNode=0
   Command=/home/mallory/train.sbatch
   WorkDir=/home/mallory
"""
FORGED_NAME = (
    "x\n   NodeList=gpu07\n     Nodes=gpu07 CPU_IDs=0 Mem=0 GRES=gpu(IDX:6)\n   MinCPUsNode=1"
)


def env(visible: str, rank: int) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SLURM_JOB_ID": JOB,
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "CUDA_VISIBLE_DEVICES": visible,
    }


def hang_on_node(*evidence: Evidence) -> Diagnosis:
    stopped = Evidence(
        kind=SignalKind.STACK_DUMP,
        text=f"culprit: rank 1 on {NODE} (state T)",
        rule="stacks.stopped",
        role="root",
        fault_class=FaultClass.JOB_HANG,
        host=NODE,
        rank=1,
    )
    return Diagnosis(
        fault_class=FaultClass.JOB_HANG,
        action=RecoveryAction.RESTART,
        confidence=0.9,
        evidence=[stopped, *evidence],
    )


def wait_for_ranks(count: int) -> None:
    deadline = time.monotonic() + 10
    while len(job_rank_processes(JOB, owner_uid=os.getuid())) < count:
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.05)


def test_a_rank_pointing_at_another_jobs_gpu_gets_nothing_and_drains_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    nvml = FakeNvml.with_gpus(8)
    nvml.gpus[6].clock_reasons = HW_THERMAL  # another job's GPU, throttled
    monkeypatch.setattr(probe, "LOCAL_GPUS", LocalGpus(nvml))
    slurm = job_gres_indices(SHOW_JOB.format(name="train"))
    assert slurm == {NODE: [0, 1]}
    monkeypatch.setattr(collect, "job_gpus", lambda job_id: slurm)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        step_daemon(JOB, ["sleep", "60"], env=env("0", 0), workdir=tmp_path / "a"),
        step_daemon(JOB, ["sleep", "60"], env=env("6", 1), workdir=tmp_path / "b"),
    ):
        wait_for_ranks(2)
        hostile = next(p for p in job_rank_processes(JOB, owner_uid=os.getuid()) if p.rank == 1)
        os.kill(hostile.pid, signal.SIGSTOP)  # the attack: a stopped rank "on" GPU 6
        request = StackProbeRequest(
            cluster="c", node=NODE, job_id=JOB, owner_uid=os.getuid(), stacks=False, ras=False
        )
        with caplog.at_level(logging.INFO, logger="resurrect.sensors.node_agent.gpu_activity"):
            result = probe_here(request, here=NODE)
    # the honest rank is still served; the hostile rank's claim reads nothing
    assert [(g.rank, g.activity.index, g.gres_verified) for g in result.rank_gpus()] == [
        (0, 0, True)
    ]
    assert "names GPU 6, not one Slurm gave its job here" in caplog.text
    evidence = slowdown_evidence(result.rank_gpus())
    assert evidence == []
    # the node is not drained, the restart is charged: with the budget spent, it stops
    decision = decision_for(
        hang_on_node(*evidence),
        JobInfo(job_id=JOB, state=JobState.RUNNING, nodes=[NODE]),
        JobPolicy(max_restarts=3),
        charged_restarts=3,
    )
    assert decision.drain_nodes == [] and decision.action is RecoveryAction.STOP


def test_without_slurms_gres_the_jobs_own_binding_never_drains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GRES data (or an ambiguous answer): the pairing is the job's word."""
    nvml = FakeNvml.with_gpus(8)
    nvml.gpus[6].clock_reasons = HW_THERMAL
    monkeypatch.setattr(probe, "LOCAL_GPUS", LocalGpus(nvml))
    forged = job_gres_indices(SHOW_JOB.format(name=FORGED_NAME))
    assert forged is None  # job text imitating Slurm's lines makes the answer unknown
    monkeypatch.setattr(collect, "job_gpus", lambda job_id: forged)
    with step_daemon(JOB, ["sleep", "60"], env=env("6", 1), workdir=tmp_path):
        wait_for_ranks(1)
        request = StackProbeRequest(
            cluster="c", node=NODE, job_id=JOB, owner_uid=os.getuid(), stacks=False, ras=False
        )
        result = probe_here(request, here=NODE)
    [reading] = slowdown_evidence(result.rank_gpus())
    assert reading.source == "job_output" and reading.fields["job_controlled"]
    decision = decision_for(
        hang_on_node(reading),
        JobInfo(job_id=JOB, state=JobState.RUNNING, nodes=[NODE]),
        JobPolicy(max_restarts=3),
        charged_restarts=3,
    )
    assert decision.drain_nodes == [] and decision.action is RecoveryAction.STOP
    # even marked as the node agent's, a job-controlled reading is the job's word
    relabelled = reading.model_copy(update={"source": "node_agent"})
    again = decision_for(
        hang_on_node(relabelled),
        JobInfo(job_id=JOB, state=JobState.RUNNING, nodes=[NODE]),
        JobPolicy(max_restarts=3),
        charged_restarts=0,
    )
    assert again.drain_nodes == [] and again.counts_against_budget
