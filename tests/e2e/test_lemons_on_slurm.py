"""Lemon nodes on the real local Slurm cluster and the real Temporal server: two jobs lose
the same node (slurmd killed); the node is listed by ``resurrect nodes --lemons`` with both
incidents, and the ``drain`` policy keeps it out, flagged."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.recovery import LONG_THEN_SHORT, OPT_IN, eventually, outcome_of
from support.service import ServiceConfigFor, running_service
from temporalio.client import Client

from resurrect.config import ResurrectConfig
from resurrect.contracts import JobState
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm
from resurrect.operator.repair_client import node_state

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

REPO = Path(__file__).resolve().parents[2]


async def lemons_cli(config: ResurrectConfig, tmp_path: Path) -> list[dict[str, Any]]:
    """``resurrect nodes --lemons --json`` as an operator runs it (a separate process)."""
    config_file = tmp_path / "cli.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    argv = [sys.executable, "-m", "resurrect.cli", "nodes", "-c", str(config_file)]
    shown = await asyncio.to_thread(
        subprocess.run,
        [*argv, "--lemons", "--json"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    rows: list[dict[str, Any]] = json.loads(shown.stdout)
    return rows


async def test_two_jobs_losing_one_node_make_it_a_listed_lemon_kept_out(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
    tmp_path: Path,
) -> None:
    config = cluster_config(
        isolation={"max_drain_fraction": 0.5, "health_check_argv": cluster.health_check_argv},
        repair={
            "enabled": True,
            "cool_down_s": 2,
            "recheck_interval_s": 5,
            "max_checks": 30,
            "probation_s": 0,
        },
        lemons={"lemon_score": 1.5, "drain_incidents": 2},
        policy={"default": {"enabled": False, "lemon_action": "drain"}},
    )
    scheduler = cluster.scheduler()
    victim: str | None = None
    async with running_service(config, temporal_client, scheduler):
        for round_ in (1, 2):
            # --no-requeue: slurmctld does not requeue it first; this test is about the node
            pinned = [f"--nodelist={victim}"] if victim else []
            job_id = cluster.submit(
                LONG_THEN_SHORT, comment=OPT_IN, nodes=1, requeue=False, extra_args=pinned
            )
            job = await eventually(
                lambda job_id=job_id: scheduler.get_job(job_id),
                lambda j: j.state is JobState.RUNNING and len(j.nodes) == 1,
                60,
                f"job {job_id} running",
            )
            victim = job.nodes[0]
            cluster.kill_node(victim)
            workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
            outcome = await outcome_of(temporal_client, workflow_id)
            cluster.start_node(victim)
            if round_ == 1:
                assert not any(" is a lemon" in n for n in outcome.notes), outcome.notes

                async def returned(node: str = victim) -> Any:
                    state = await node_state(temporal_client, cluster.cluster_name, node)
                    return state if state is not None and state.returns == 1 else None

                await eventually(returned, bool, 90, f"{victim} back in service")  # type: ignore[arg-type]
        assert any(n.startswith(f"{victim} is a lemon") for n in outcome.notes), outcome.notes

        async def flagged() -> Any:
            state = await node_state(temporal_client, cluster.cluster_name, victim)
            return state if state is not None and state.flagged else None

        await eventually(flagged, bool, 60, f"{victim} flagged as a lemon")  # type: ignore[arg-type]
        rows = await lemons_cli(config, tmp_path)
    (row,) = rows
    assert row["node"] == victim and row["lemon"] and row["drain_due"]
    assert [(s["incident"]["kind"], s["incident"]["tier"]) for s in row["incidents"]] == [
        ("node_lost", "independent"),
        ("node_lost", "independent"),
    ]
    assert "DRAIN" in cluster.node(victim)["State"]
