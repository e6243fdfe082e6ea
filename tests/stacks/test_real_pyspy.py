"""Against the real thing: a 2-rank torch.distributed gloo job, one rank SIGSTOPped, its
peer blocked in all_reduce; ``resurrect stacks dump`` finds the ranks as the kernel places
them (torchrun run as a task of a stand-in step daemon, tests/support/step_daemon.py; Slurm's
word on the job's owner stood in by root's uid), reads them with py-spy and names the
stopped rank."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.requirements import missing
from support.step_daemon import step_daemon

from resurrect.cli import main
from resurrect.stacks import collect
from resurrect.stacks.processes import job_rank_processes, this_node
from resurrect.stacks.pyspy import pyspy_binary

pytestmark = pytest.mark.torch

PROGRAM = """
import datetime, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
t = torch.ones(4)
step = 0
while True:
    step += 1
    dist.all_reduce(t)
    if step == 5:
        print("ready", flush=True)
    time.sleep(0.05)
"""


@pytest.fixture
def gloo_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if importlib.util.find_spec("torch") is None:
        missing("torch is not installed")
    if pyspy_binary() is None:
        missing("py-spy is not installed")
    job_id = str(900_000_000 + os.getpid())
    script = tmp_path / "loop.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env |= {"SLURM_JOB_ID": job_id, "SLURMD_NODENAME": "testnode"}
    monkeypatch.setattr(collect, "job_owner_uid", lambda job: os.getuid())
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            str(script)]  # fmt: skip
    with step_daemon(
        job_id, argv, env=env, workdir=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as launcher:
        assert launcher.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if b"ready" in launcher.stdout.readline():
                break
        yield job_id


def test_the_stopped_rank_is_named_and_its_peer_waits_in_all_reduce(
    gloo_job: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ranks = {p.rank: p for p in job_rank_processes(gloo_job, owner_uid=os.getuid())}
    # the node is where the probe runs (this machine), not the environment's SLURMD_NODENAME
    assert sorted(ranks) == [0, 1] and ranks[1].node == this_node()
    os.kill(ranks[1].pid, signal.SIGSTOP)
    time.sleep(1.0)  # rank 0 is now blocked in the next all_reduce
    assert main(["stacks", "dump", "--job", gloo_job, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["victims"] == [0]
    assert report["culprits"] == [{"rank": 1, "node": this_node()}]
    by_rank = {r["rank"]: r for r in report["ranks"]}
    assert by_rank[1]["state"] == "T" and by_rank[1]["place"] == "stopped"
    assert "all_reduce" in by_rank[0]["stack"]
    # a gloo job has no NCCL RAS service to ask, and the report says so
    assert report["nccl_ras"]["available"] is False and report["nccl_ras"]["reason"]
