"""What operators see of a real node loss: goodput, Prometheus, Grafana, the Temporal UI.

One node-loss scenario on the real local Slurm cluster and the real Temporal dev server
(module-scoped, shared by every test here), while a real Prometheus server (Debian's
``prometheus``, private config, data dir and port) scrapes resurrect's metrics endpoint. The
job is a shell job printing timestamped progress lines and keeping a step checkpoint, so its
goodput can be measured.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.background import BackgroundService
from support.recovery import OPT_IN, outcome_of
from support.requirements import missing
from support.service import service_config
from support.telemetry import SharedTelemetry, shared_telemetry

from resurrect.contracts import RecoveryOutcome
from resurrect.contracts.workflow_ids import recovery_workflow_id
from resurrect.demo.local_cluster import LocalSlurm
from resurrect.goodput.report import GoodputReport, goodput_report
from resurrect.telemetry import list_views
from resurrect.temporal.server import EmbeddedTemporal, free_port

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "resurrect.json"
PROMETHEUS = shutil.which("prometheus")
CHROMIUM = shutil.which("chromium-headless-shell")

# Attempt 0 trains "forever" (a fault will hit it); a requeued attempt resumes from its
# checkpoint and finishes 12 steps later. Rank 0's lines carry a UTC time: progress signals.
# Every 10 steps a 0.3 s save, then a save line (what the checkpoint advice measures).
PROGRESS_JOB = r"""#!/bin/bash
ts() { date -u +%Y-%m-%dT%H:%M:%S.%3N+00:00; }
ckpt="ckpt-${SLURM_JOB_ID}"
start=0
if [ -f "$ckpt" ]; then
  start=$(cat "$ckpt"); echo "[rank0] resumed from $ckpt at step $start t=$(ts)"
else
  echo "[rank0] no checkpoint: starting from scratch t=$(ts)"
fi
last=100000; [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && last=$((start + 12))
srun --nodes=2 --ntasks=2 sleep 600 &
sleep 1
for ((step = start + 1; step <= last; step++)); do
  sleep 0.2
  echo "[rank0] step $step t=$(ts)"
  if (( step % 10 == 0 )); then
    sleep 0.3; echo "$step" > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"
    echo "[rank0] checkpoint step_$step t=$(ts)"
  fi
done
kill %1 2>/dev/null; wait 2>/dev/null; true
"""


@dataclass
class NodeLoss:
    cluster: LocalSlurm
    service: BackgroundService
    telemetry: SharedTelemetry
    server: EmbeddedTemporal
    prometheus: str
    job_id: str
    workflow_id: str
    victim: str
    outcome: RecoveryOutcome
    screenshots: Path


def _get(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        data: bytes = response.read()
        return data


def promql(base: str, query: str) -> dict[str, Any]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    doc: dict[str, Any] = json.loads(_get(url))
    return doc


class Prometheus:
    """A private Prometheus server scraping ``target`` every second."""

    def __init__(self, state: Path, target: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = state / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: resurrect\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
        )
        assert PROMETHEUS is not None
        self.log = (state / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={state / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                _get(f"{self.url}/-/ready", timeout=1)
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise AssertionError(f"prometheus not ready: {(state / 'prometheus.log').read_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _steps_printed(path: Path) -> int:
    try:
        return len(re.findall(r"\] step \d+ t=", path.read_text(errors="replace")))
    except OSError:
        return 0


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def node_loss(
    local_slurm: LocalSlurm,
    temporal_server: EmbeddedTemporal,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[NodeLoss]:
    if PROMETHEUS is None:
        missing("prometheus is not installed (deploy/install.sh installs it)")
    cluster = local_slurm
    cluster.reset()
    state = tmp_path_factory.mktemp("observability")
    telemetry = shared_telemetry()
    prometheus = Prometheus(state, f"127.0.0.1:{telemetry.port}")
    config = service_config(
        state,
        cluster.cluster_name,
        cluster.slurm_conf,
        temporal_server.address,
        # one incident is enough here for the checkpoint advice (default: 5)
        telemetry={"goodput_interval_s": 1.0, "advice_min_incidents": 1},
        lemons={"metrics_interval_s": 1.0},  # the dashboard's lemon panel has a live series
    )
    service = BackgroundService(config, temporal_server.address, cluster.scheduler())
    service.start()
    try:
        job_id = cluster.submit(
            PROGRESS_JOB, comment=OPT_IN, nodes=2, extra_args=["--open-mode=append"]
        )
        _wait(lambda: cluster.job(job_id).get("JobState") == "RUNNING", 60, "the job to run")
        _wait(lambda: any(cluster.out_dir.glob(f"*-{job_id}.out")), 30, "the job's output")
        output = next(cluster.out_dir.glob(f"*-{job_id}.out"))
        _wait(lambda: _steps_printed(output) >= 25, 60, "25 steps of progress")
        victim = _last_node(cluster, job_id)
        cluster.kill_node(victim)
        workflow_id = recovery_workflow_id(cluster.cluster_name, job_id, 0)
        assert service.client is not None
        outcome = service.call(outcome_of(service.client, workflow_id))
        _wait(lambda: cluster.job(job_id).get("JobState") == "COMPLETED", 120, "completion")
        yield NodeLoss(
            cluster=cluster,
            service=service,
            telemetry=telemetry,
            server=temporal_server,
            prometheus=prometheus.url,
            job_id=job_id,
            workflow_id=workflow_id,
            victim=victim,
            outcome=outcome,
            screenshots=state,
        )
    finally:
        service.stop()
        prometheus.stop()
        cluster.reset()


def _last_node(cluster: LocalSlurm, job_id: str) -> str:
    nodes = cluster.run(["scontrol", "show", "hostnames", cluster.job(job_id)["NodeList"]])
    return nodes.split()[-1]


def goodput_now(node_loss: NodeLoss) -> GoodputReport:
    """The goodput report of the node-loss job, as `resurrect goodput --job` makes it now."""
    assert node_loss.service.client is not None
    report: GoodputReport = node_loss.service.call(
        goodput_report(
            node_loss.service.client,
            node_loss.service.scheduler,
            node_loss.cluster.cluster_name,
            now=datetime.now(UTC),
            job_id=node_loss.job_id,
        )
    )
    return report


def test_the_real_node_loss_is_accounted_part_by_part(node_loss: NodeLoss) -> None:
    assert node_loss.outcome.recovered, node_loss.outcome.notes
    assert node_loss.service.client is not None
    report = goodput_now(node_loss)
    (job,) = report.jobs
    print("\n" + json.dumps(job.model_dump(mode="json", exclude={"segments"}), indent=1))
    assert job.state == "COMPLETED"
    (recovery,) = job.recoveries
    assert recovery.fault_class == "node.lost" and recovery.outcome == "recovered"
    assert recovery.drained_nodes == [node_loss.victim]
    parts = {name: part.seconds for name, part in job.parts.items()}
    assert sum(parts.values()) == pytest.approx(job.wall_s, abs=0.01)
    for name in ("productive", "startup", "detection", "recovery"):
        assert parts[name] > 0, name
    assert job.parts["detection"].basis == "measured"
    assert job.parts["recovery"].basis == "measured"
    # it resumed from its last checkpoint (a multiple of 10) and redid the steps after it
    assert recovery.recomputed_steps is not None and 0 <= recovery.recomputed_steps < 10 + 25
    assert job.step_time_s == pytest.approx(0.2, abs=0.1)
    assert job.goodput is not None and 0 < job.goodput < 1
    assert job.ettr is not None and job.ettr <= job.goodput


def test_prometheus_scraped_one_node_lost_recovery(node_loss: NodeLoss) -> None:
    query = (
        "sum by (fault_class, outcome) "
        f'(resurrect_recoveries_total{{cluster="{node_loss.cluster.cluster_name}"}})'
    )
    result: list[Any] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not result:
        result = promql(node_loss.prometheus, query)["data"]["result"]
        time.sleep(0.5)
    assert [(r["metric"], r["value"][1]) for r in result] == [
        ({"fault_class": "node.lost", "outcome": "recovered"}, "1")
    ]
    detect = promql(
        node_loss.prometheus,
        "sum(resurrect_time_to_detect_seconds_count"
        f'{{cluster="{node_loss.cluster.cluster_name}"}})',
    )["data"]["result"]
    assert detect and detect[0]["value"][1] == "1"


def _dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in doc["panels"] for t in panel.get("targets", [])]


def test_every_dashboard_query_names_a_live_metric_and_prometheus_accepts_it(
    node_loss: NodeLoss,
) -> None:
    queries = _dashboard_queries()
    assert len(queries) >= 8
    for gauge in (
        b"resurrect_job_goodput_ratio",
        b"resurrect_node_lemon_score",
        b"resurrect_job_advised_checkpoint_interval_seconds",  # set with the goodput gauges
    ):
        _wait(lambda g=gauge: g in _get(node_loss.telemetry.metrics_url), 30, gauge.decode())
    exported = set()
    for line in _get(node_loss.telemetry.metrics_url).decode().splitlines():
        if line.startswith("# TYPE "):
            exported.add(line.split()[2])
    for query in queries:
        names = set(re.findall(r"\bresurrect_[a-z_]+", query))
        assert names, query
        for name in names:
            base = re.sub(r"_(bucket|sum|count|total)$", "", name)
            assert base in exported or name in exported, (name, sorted(exported))
        concrete = re.sub(r"\$__\w+", "1m", query.replace("$cluster", ".*"))
        doc = promql(node_loss.prometheus, concrete)
        assert doc["status"] == "success", (query, doc)


def test_the_temporal_ui_workflow_page_reads_as_a_sentence(node_loss: NodeLoss) -> None:
    if CHROMIUM is None:
        missing("chromium-headless-shell is not installed (deploy/install.sh installs it)")
    (sentence,) = [
        n.removeprefix("summary: ") for n in node_loss.outcome.notes if n.startswith("summary: ")
    ]
    assert sentence.startswith(f"node.lost on {node_loss.victim} (job {node_loss.job_id}): drained")
    assert node_loss.service.client is not None
    handle = node_loss.service.client.get_workflow_handle(node_loss.workflow_id)
    run_id = node_loss.service.call(handle.describe()).run_id
    # the workflow page's "User Metadata" tab: the static summary and the current details
    # (a query the running worker answers)
    url = (
        f"{node_loss.server.ui_url}/namespaces/default/workflows/"
        f"{urllib.parse.quote(node_loss.workflow_id, safe='')}/{run_id}/user-metadata"
    )
    screenshot = node_loss.screenshots / "workflow-page.png"
    argv = [
        CHROMIUM, "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        "--window-size=1400,1000", "--virtual-time-budget=15000",
    ]  # fmt: skip
    shown: dict[str, str] = {}
    for _ in range(3):  # the details come from a query: a slow first answer gets a retry
        dom = subprocess.run(
            [*argv, "--dump-dom", url], capture_output=True, text=True, timeout=90, check=False
        ).stdout
        shown = rendered_metadata(dom)
        if shown.get("current-details") == sentence:
            break
    subprocess.run(
        [*argv, f"--screenshot={screenshot}", url], capture_output=True, timeout=90, check=False
    )
    keep = os.environ.get("RESURRECT_SCREENSHOT_DIR")
    if keep and screenshot.exists():
        shutil.copy(screenshot, Path(keep) / "temporal-ui-workflow.png")
    summary = f"node.lost of job {node_loss.job_id} on {node_loss.victim} (attempt 0)"
    assert shown.get("summary", "").startswith(summary), shown
    assert shown.get("current-details") == sentence, shown


def rendered_metadata(dom: str) -> dict[str, str]:
    """What the UI's user-metadata panes render (each a markdown frame: its text is the
    ``content`` of the frame's address)."""
    found: dict[str, str] = {}
    for tag in re.findall(r"<iframe\b[^>]*>", dom):
        pane = re.search(r'id="user-metadata-([a-z-]+)"', tag)
        src = re.search(r'src="([^"]*)"', tag)
        if pane and src:
            query = urllib.parse.urlparse(html.unescape(src.group(1))).query
            found[pane.group(1)] = urllib.parse.parse_qs(query).get("content", [""])[0]
    return found


def test_the_goodput_command_prints_the_table_json_and_a_timeline(
    node_loss: NodeLoss, tmp_path: Path
) -> None:
    config = node_loss.service.config.model_dump(mode="json")
    config["temporal"]["address"] = node_loss.server.address
    config_file = tmp_path / "resurrect.yaml"
    config_file.write_text(json.dumps(config))
    plot = tmp_path / "goodput.png"
    command = [sys.executable, "-m", "resurrect.cli", "goodput", "-c", str(config_file)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    table = subprocess.run(
        [*command, "--job", node_loss.job_id, "--since", "1h", "--plot", str(plot)],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert table.returncode == 0, table.stderr
    print("\n" + table.stdout)
    header, row = table.stdout.splitlines()[:2]
    assert header.split()[:5] == ["JOB", "STATE", "WALL", "GOODPUT", "ETTR"]
    assert row.split()[:2] == [node_loss.job_id, "COMPLETED"]
    assert f"{node_loss.workflow_id} node.lost -> recovered: lost" in table.stdout
    assert plot.stat().st_size > 10_000
    keep = os.environ.get("RESURRECT_SCREENSHOT_DIR")
    if keep:
        shutil.copy(plot, Path(keep) / "goodput-timeline.png")
    doc = json.loads(
        subprocess.run(
            [*command, "--job", node_loss.job_id, "--json"],
            capture_output=True, text=True, timeout=120, env=env, check=True,
        ).stdout
    )  # fmt: skip
    (job,) = doc["jobs"]
    assert job["job_id"] == node_loss.job_id and doc["cluster"]["recoveries"] == 1
    assert doc["cluster"]["goodput"] == job["goodput"]


def test_the_documented_list_view_queries_find_the_recovery(node_loss: NodeLoss) -> None:
    client = node_loss.service.client
    assert client is not None
    # the cluster and Temporal server are shared with other e2e modules: this job's alone
    mine = (
        f" AND ResurrectCluster = '{node_loss.cluster.cluster_name}'"
        f" AND ResurrectJobId = '{node_loss.job_id}'"
    )
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)

    async def ids(query: str) -> list[str]:
        return [w.id async for w in client.list_workflows(query + mine)]

    docs = (REPO / "docs" / "observability.md").read_text()
    for query in (
        list_views.recoveries_since_by_class(today, "node.lost"),
        list_views.not_recovered(),
        list_views.touched_node(node_loss.victim),
    ):
        assert query.split(" AND ")[-1] in docs, query
    assert node_loss.service.call(
        ids(list_views.recoveries_since_by_class(today, "node.lost"))
    ) == [node_loss.workflow_id]
    assert (
        node_loss.service.call(ids(list_views.recoveries_since_by_class(today, "gpu.hardware")))
        == []
    )
    assert node_loss.service.call(ids(list_views.not_recovered())) == []
    assert node_loss.workflow_id in node_loss.service.call(
        ids(list_views.touched_node(node_loss.victim))
    )


def test_the_simulator_replays_the_real_node_loss_and_advice_says_it_needs_more(
    node_loss: NodeLoss, tmp_path: Path
) -> None:
    from resurrect.goodput.simulate.measure import inputs_from_report
    from resurrect.goodput.simulate.model import WhatIf
    from resurrect.goodput.simulate.run import simulate

    assert node_loss.service.client is not None
    report = goodput_now(node_loss)
    (job,) = report.jobs
    # the recovery's notes carry the job's checkpoint advice (or why there is none)
    assert any(n.startswith("checkpoint advice: ") for n in node_loss.outcome.notes), (
        node_loss.outcome.notes
    )
    result = simulate(inputs_from_report(report, replay=True), WhatIf(detect_s=60))
    recorded = result.scenarios[0]
    assert job.goodput is not None and recorded.goodput_with_saves is not None
    # the report counts saves as productive (its progress lines go on across them)
    assert recorded.goodput_with_saves == pytest.approx(job.goodput, rel=0.05), (recorded, job)
    config = node_loss.service.config.model_dump(mode="json")
    config["temporal"]["address"] = node_loss.server.address
    config_file = tmp_path / "resurrect.yaml"
    config_file.write_text(json.dumps(config))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    base = [sys.executable, "-m", "resurrect.cli"]
    advice = json.loads(
        subprocess.run(
            [*base, "goodput", "-c", str(config_file), "--advise", "--since", "1h", "--json",
             "--job", node_loss.job_id],
            capture_output=True, text=True, timeout=120, env=env, check=True,
        ).stdout
    )  # fmt: skip
    (mine,) = advice["jobs"]
    assert mine["job_id"] == node_loss.job_id and mine["nodes"] == 2
    rate = advice["rates"]["rate"]
    assert rate["incidents"] >= 1 and rate["node_hours"] > 0
    assert rate["low"] < rate["per_node_hour"] < rate["high"]
    # the 0.3 s saves every 10 steps of ~0.2 s, as measured from the job's own lines
    assert mine["save_s"] == pytest.approx(0.3, abs=0.25) and mine["saves_measured"] >= 2
    assert mine["current_interval_s"] == pytest.approx(2.0, abs=1.5)
    assert mine["advised_interval_s"] > 0 and 0 < mine["expected_goodput_advised"] <= 1
    assert mine["note"].startswith("save every "), mine["note"]
    simulated = json.loads(
        subprocess.run(
            [*base, "simulate", "-c", str(config_file), "--since", "1h", "--json",
             "--what-if", "detect_s=1,manual_response_s=600", "--replications", "2"],
            capture_output=True, text=True, timeout=120, env=env, check=True,
        ).stdout
    )  # fmt: skip
    assert [s["scenario"] for s in simulated["scenarios"]] == ["recorded", "what-if", "manual"]
    assert simulated["jobs"] >= 1
    chart = tmp_path / "what-if.png"
    text = subprocess.run(
        [*base, "simulate", "-c", str(config_file), "--since", "1h", "--replay",
         "--plot", str(chart)],
        capture_output=True, text=True, timeout=120, env=env, check=True,
    ).stdout  # fmt: skip
    print("\n" + text)
    assert text.split()[:3] == ["SCENARIO", "GOODPUT", "WITH"] and chart.stat().st_size > 10_000
    lines = subprocess.run(
        [*base, "goodput", "-c", str(config_file), "--advise", "--since", "1h"],
        capture_output=True, text=True, timeout=120, env=env, check=True,
    ).stdout.splitlines()  # fmt: skip
    print("\n".join(lines))
    assert lines[0].startswith("interruption rate: ") and "incidents in" in lines[0]
    assert any(line.startswith(f"job {node_loss.job_id}: save every ") for line in lines), lines
