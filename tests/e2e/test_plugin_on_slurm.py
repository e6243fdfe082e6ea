"""The example plugin, installed into the test environment, inside a real recovery."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from support.recovery import (
    LONG_THEN_SHORT,
    OPT_IN,
    outcome_of,
    running_on_two_nodes,
)
from support.service import ServiceConfigFor, running_service
from temporalio.client import Client

from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm
from resurrect.steps.plugins import discover

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]


@pytest.fixture
def webhook() -> Iterator[tuple[list[dict[str, object]], str]]:
    received: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield received, f"http://127.0.0.1:{server.server_port}/incident"
    server.shutdown()


def test_example_plugin_is_installed_and_discovered() -> None:
    loaded = discover(["example"])
    assert [p.name for p in loaded.plugins] == ["example"], loaded.errors


async def test_plugin_steps_run_inside_a_real_recovery(
    cluster: LocalSlurm,
    cluster_config: ServiceConfigFor,
    temporal_client: Client,
    tmp_path: Path,
    webhook,  # type: ignore[no-untyped-def]
) -> None:
    received, url = webhook
    plans = tmp_path / "site-plans.yaml"
    plans.write_text(
        f"""
plans:
  - name: notify-on-drain
    when: {{actions: [drain_and_restart]}}
    steps:
      - activity: recovery.drain_nodes
      - use: restart-from-checkpoint
      - activity: example.webhook
        params: {{url: "{url}"}}
        retry: {{max_attempts: 3, initial_interval_s: 1}}
"""
    )
    config = cluster_config(plugins={"enabled": ["example"]}, plans={"paths": [str(plans)]})
    scheduler = cluster.scheduler()
    async with running_service(config, temporal_client, scheduler):
        job_id = cluster.submit(LONG_THEN_SHORT, comment=OPT_IN, nodes=2)
        before = await running_on_two_nodes(scheduler, job_id)
        victim = before.nodes[0]
        cluster.kill_node(victim)
        workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
        outcome = await outcome_of(temporal_client, workflow_id)
    assert outcome.recovered and outcome.drained_nodes == [victim], outcome.notes
    history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled[-1] == "example.webhook", scheduled
    deadline = time.monotonic() + 10
    while not received and time.monotonic() < deadline:
        time.sleep(0.1)
    assert received[0]["job_id"] == job_id and received[0]["drained_nodes"] == [victim]
