"""A process's telemetry as `resurrect serve` starts it: its Prometheus endpoint, the Temporal
SDK's own endpoint, and a taken port that only turns the endpoint off (in a fresh process:
OpenTelemetry's providers are set once per process)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from resurrect.temporal.server import free_port

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys, urllib.request
from resurrect.config import TelemetrySettings
from resurrect.telemetry import metrics as m
from resurrect.telemetry.setup import start_telemetry
settings = TelemetrySettings.model_validate(json.loads(sys.argv[1]))
handle = start_telemetry(settings, "serve")
m.RECOVERIES.add(1, {"cluster": "c", "fault_class": "node.lost", "outcome": "recovered", "mode": "act"})
def get(url):
    return urllib.request.urlopen(url, timeout=5).read().decode() if url else ""
ours = get(handle.prometheus_url)
sdk_served = handle.temporal_sdk_url is not None and get(handle.temporal_sdk_url) is not None
print(json.dumps({"url": handle.prometheus_url, "sdk_url": handle.temporal_sdk_url,
                  "tracing": handle.tracing, "ours": ours, "sdk_served": sdk_served}))
handle.close()
"""


def run_child(
    code: str, settings: dict[str, object], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (its telemetry is process-wide) with ``settings``
    as its argument; it must succeed."""
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(settings)],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc


def run(settings: dict[str, object]) -> dict[str, object]:
    """What CHILD saw: its last line, and its log as ``log``."""
    proc = run_child(CHILD, settings)
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["log"] = proc.stderr
    return result


def test_serve_exports_its_metrics_and_the_temporal_sdk_on_its_own_port() -> None:
    port, sdk = free_port(), free_port()
    result = run({"serve_port": port, "temporal_sdk_metrics": "port", "temporal_sdk_port": sdk})
    assert result["url"] == f"http://127.0.0.1:{port}/metrics"
    assert result["sdk_url"] == f"http://127.0.0.1:{sdk}/metrics"
    assert result["tracing"] is True and result["sdk_served"] is True
    assert 'resurrect_recoveries_total{cluster="c",fault_class="node.lost"' in str(result["ours"])


def test_a_taken_port_turns_the_endpoint_off_and_nothing_else() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run({"serve_port": port, "temporal_sdk_metrics": "off"})
    assert result["url"] is None and result["sdk_url"] is None
    assert "metrics endpoint off" in str(result["log"])


def test_disabled_telemetry_starts_nothing() -> None:
    result = run({"enabled": False, "serve_port": free_port()})
    assert result == {**result, "url": None, "sdk_url": None, "tracing": False}


OTLP_CHILD = """
import json, sys
from opentelemetry import trace
from resurrect.config import TelemetrySettings
from resurrect.telemetry import metrics as m
from resurrect.telemetry.setup import start_telemetry
settings = TelemetrySettings.model_validate(json.loads(sys.argv[1]))
handle = start_telemetry(settings, "watch")
with trace.get_tracer("t").start_as_current_span("report node.lost"):
    m.REPORTS.add(1, {"source": "test"})
handle.close()  # flushes spans and metrics
"""


def test_otlp_sends_spans_and_metrics_with_the_configured_headers() -> None:
    received: list[tuple[str, str | None, int]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received.append((self.path, self.headers.get("Authorization"), len(body)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings = {
            "watch_port": None,
            "otlp": {
                "endpoint": f"http://127.0.0.1:{server.server_address[1]}/",
                "headers": {"Authorization": "Bearer s3cret"},
            },
        }
        run_child(OTLP_CHILD, settings)
    finally:
        server.shutdown()
    paths = {(path, auth) for path, auth, size in received if size > 0}
    assert ("/v1/traces", "Bearer s3cret") in paths, received
    assert ("/v1/metrics", "Bearer s3cret") in paths, received


SDK_CHILD = """
import asyncio, json, sys, tempfile, time, urllib.request
from pathlib import Path
from resurrect.config import TelemetrySettings
from resurrect.telemetry.setup import start_telemetry
from resurrect.temporal.server import EmbeddedTemporal, free_port
from temporalio.client import Client
settings = TelemetrySettings.model_validate(json.loads(sys.argv[1]))
handle = start_telemetry(settings, "worker")
server = EmbeddedTemporal(state_dir=Path(tempfile.mkdtemp()), port=free_port(), ui_port=None)
server.start()
try:
    async def main():
        client = await Client.connect(server.address)
        for _ in range(60):  # a loaded machine: the frontend may need a moment to be healthy
            try:
                await client.count_workflows()
                return
            except Exception:
                await asyncio.sleep(0.5)
        await client.count_workflows()
    asyncio.run(main())
    deadline = time.monotonic() + 20  # the forwarder drains every second (slower under load)
    while True:
        text = urllib.request.urlopen(handle.prometheus_url, timeout=5).read().decode()
        if "temporal_request_total{" in text or time.monotonic() > deadline:
            break
        time.sleep(0.5)
finally:
    server.stop()
print(json.dumps({"sdk_url": handle.temporal_sdk_url, "url": handle.prometheus_url,
                  "text": text}))
handle.close()
"""


def test_the_temporal_sdks_metrics_are_forwarded_to_the_same_endpoint() -> None:
    port = free_port()
    proc = run_child(SDK_CHILD, {"worker_port": port}, timeout=120)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sdk_url"] == result["url"] == f"http://127.0.0.1:{port}/metrics"
    sdk_lines = [line for line in result["text"].splitlines() if line.startswith("temporal_")]
    assert any(line.startswith("temporal_request_total{") for line in sdk_lines), sdk_lines
