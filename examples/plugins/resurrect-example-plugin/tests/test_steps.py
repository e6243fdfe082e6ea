from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from resurrect_example_plugin import PLUGIN
from resurrect_example_plugin.steps import return_if_healthy, webhook
from temporalio.exceptions import ApplicationError

from resurrect.sdk import FakeScheduler, RecoveryState, make_step_input, run_step


class Hook:
    def __init__(self, status: int) -> None:
        self.status = status
        self.bodies: list[dict[str, object]] = []


@pytest.fixture
def hook() -> Iterator[tuple[Hook, str]]:
    state = Hook(200)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            state.bodies.append(json.loads(self.rfile.read(length)))
            self.send_response(state.status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_port}/hook"
    server.shutdown()


def test_plugin_exports_its_steps() -> None:
    assert PLUGIN.name == "example"
    assert {fn.__name__ for fn in PLUGIN.steps} == {"webhook", "return_if_healthy"}
    assert all(path.exists() for path in PLUGIN.plans)


async def test_webhook_posts_the_incident(hook: tuple[Hook, str]) -> None:
    state, url = hook
    result = await run_step(webhook, {"url": url})
    assert result.ok and result.data["status"] == 200
    assert state.bodies[0]["job_id"] == "42" and state.bodies[0]["fault_class"] == "gpu.hardware"


async def test_webhook_4xx_is_permanent(hook: tuple[Hook, str]) -> None:
    state, url = hook
    state.status = 404
    with pytest.raises(ApplicationError) as err:
        await run_step(webhook, {"url": url})
    cause = err.value
    assert isinstance(cause, ApplicationError) and cause.non_retryable


async def test_webhook_rejects_bad_params() -> None:
    with pytest.raises(ApplicationError, match="invalid params"):
        await run_step(webhook, {"url": "file:///etc/passwd"})


async def test_return_if_healthy_resumes_only_nodes_that_pass() -> None:
    scheduler = FakeScheduler.with_nodes(3, cluster_name="test")
    await scheduler.drain_node("node2", "resurrect: gpu.hardware")
    await scheduler.drain_node("node3", "resurrect: gpu.hardware")
    check = [
        sys.executable,
        "-c",
        "import sys; sys.exit(0 if sys.argv[1] == 'node2' else 1)",
        "{node}",
    ]
    step_input = make_step_input(
        "example.return_if_healthy",
        {"check_argv": check},
        state=RecoveryState(drained_nodes=["node2", "node3"]),
    )
    result = await run_step(return_if_healthy, scheduler=scheduler, step_input=step_input)
    assert result.data["returned"] == ["node2"]
    assert not scheduler.nodes["node2"].drained and scheduler.nodes["node3"].drained


async def test_return_if_healthy_in_observe_mode_changes_nothing() -> None:
    scheduler = FakeScheduler.with_nodes(2, cluster_name="test")
    await scheduler.drain_node("node2", "resurrect: gpu.hardware")
    step_input = make_step_input(
        "example.return_if_healthy",
        {"check_argv": ["true"]},
        observe=True,
        state=RecoveryState(drained_nodes=["node2"]),
    )
    result = await run_step(return_if_healthy, scheduler=scheduler, step_input=step_input)
    assert result.would_have == ["would return node2 to service (health check passed)"]
    assert scheduler.nodes["node2"].drained
