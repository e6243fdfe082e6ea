"""``resurrect agent``: run the node agent, check the node once, or show every reading.

* ``resurrect agent run`` (also plain ``resurrect agent``): watch until SIGTERM, report to
  Temporal (``--print``: to stdout instead). The systemd unit runs this.
* ``resurrect agent check [--json]``: one verdict; exit 0 healthy or no GPUs, 1 unhealthy.
* ``resurrect agent readings [--json] [--watch S]``: every reading and the rule it matched,
  then optionally S seconds of watching (what ``deploy/gpu-smoke.sh`` runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from resurrect.command_line import exit_now
from resurrect.config import AgentSettings
from resurrect.errors import ConfigError
from resurrect.rules.engine import LineScanner
from resurrect.sensors.node_agent.agent import NodeAgent
from resurrect.sensors.node_agent.classify import classify
from resurrect.sensors.node_agent.fence import Lease, PidHandles, SelfFence
from resurrect.sensors.node_agent.kernel_log import KernelLogSource
from resurrect.sensors.node_agent.models import NodeVerdict
from resurrect.sensors.node_agent.nvml_api import load_pynvml
from resurrect.sensors.node_agent.nvml_source import NvmlSource
from resurrect.sensors.node_agent.reporters import AgentReporter, PrintReporter, TemporalReporter
from resurrect.sensors.node_agent.verdict import format_verdict, run_check

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add ``agent`` and its subcommands to the ``resurrect`` command."""
    agent = subparsers.add_parser("agent", help="the GPU and node health agent (runs on GPU nodes)")
    agent.set_defaults(handler=_run)
    _common(agent)
    _run_options(agent)
    sub = agent.add_subparsers(dest="agent_command", metavar="ACTION")

    run = sub.add_parser("run", help="watch the node and report to the control plane")
    _common(run)
    _run_options(run)
    run.set_defaults(handler=_run)

    check = sub.add_parser(
        "check",
        help="one-shot node health verdict (exit 0 healthy or no GPUs, 1 unhealthy)",
        description=(
            "Read every GPU once and judge it with the rule packs. Exit codes: 0 healthy "
            "(or no GPUs / no NVML here), 1 unhealthy, 2 configuration error."
        ),
    )
    _common(check)
    check.add_argument("--json", action="store_true", help="print the verdict as JSON")
    check.add_argument(
        "--drain",
        action="store_true",
        help="when unhealthy, drain this node in Slurm (reason 'resurrect: agent check: ...'): "
        "what a Slurm HealthCheckProgram is expected to do itself",
    )
    check.add_argument("--scontrol", default="scontrol", help="the scontrol to drain with")
    check.set_defaults(handler=_check)

    readings = sub.add_parser("readings", help="print every reading and what the rules make of it")
    _common(readings)
    readings.add_argument("--json", action="store_true", help="one JSON object per reading")
    readings.add_argument(
        "--watch",
        type=float,
        default=0.0,
        metavar="S",
        help="then watch S seconds (polls, Xid events, kernel log) printing findings",
    )
    readings.add_argument(
        "--no-kernel-log", action="store_true", help="do not follow the kernel log"
    )
    readings.set_defaults(handler=_readings)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="resurrect configuration file")
    parser.add_argument("--node", default=None, help="node name (default: short host name)")


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="print findings and heartbeats instead of reporting to Temporal",
    )
    parser.add_argument("--interval", type=float, default=None, help="poll interval (s)")
    parser.add_argument("--no-kernel-log", action="store_true", help="do not follow the kernel log")


def _settings(args: argparse.Namespace) -> tuple[AgentSettings, Any]:
    from resurrect.config import load_config

    config = load_config(args.config)  # validates the agent: section too
    data = config.agent.model_dump()
    if args.node:
        data["node_name"] = args.node
    if getattr(args, "interval", None):
        data["interval_s"] = args.interval
    if getattr(args, "no_kernel_log", False):
        data["kernel_log"] = False
    try:
        return AgentSettings.model_validate(data), config
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"agent.{field}: {first['msg']}") from exc


def _engine(config: Any) -> LineScanner:
    from resurrect.rules.engine import load_engine

    return load_engine(list(config.rules.extra_packs))


def _kernel_source(settings: AgentSettings) -> KernelLogSource | None:
    if not settings.kernel_log:
        return None
    return KernelLogSource(kmsg_path=settings.kmsg_path, journal_argv=settings.journal_argv)


def _agent(settings: AgentSettings, engine: LineScanner, reporter: AgentReporter) -> NodeAgent:
    """An agent on this node's NVML and (when enabled) kernel log."""
    return NodeAgent(
        settings,
        nvml=load_pynvml(),
        engine=engine,
        reporter=reporter,
        kernel_log=_kernel_source(settings),
    )


def _self_fence(settings: AgentSettings, config: Any) -> SelfFence:
    """The agent's self-fence (``fencing.enabled``): its jobs looked up through Slurm."""
    from resurrect.policy import job_policy
    from resurrect.scheduler.factory import scheduler_for

    scheduler = scheduler_for(config.cluster)  # it only reads jobs: no hold-mark key
    return SelfFence(
        config.fencing,
        settings.node_name,
        Lease(config.fencing.lease_s),
        look_up=scheduler.get_job,
        opted_in=lambda job: job_policy(job, config) is not None,
        handles=PidHandles(),
    )


def _check(args: argparse.Namespace) -> int:
    settings, config = _settings(args)
    nvml = load_pynvml()
    verdict = run_check(settings.node_name, nvml=nvml, engine=_engine(config))
    if args.json:
        print(verdict.model_dump_json(indent=2))
    else:
        print(format_verdict(verdict))
    if args.drain and verdict.status == "unhealthy":
        drain_node(verdict, scontrol=args.scontrol)
    return verdict.exit_code


def drain_node(verdict: NodeVerdict, *, scontrol: str = "scontrol") -> bool:
    """Drain the checked node with resurrect's reason prefix (so resurrect may resume it)."""
    from resurrect.scheduler.base import DRAIN_REASON_PREFIX

    reason = f"{DRAIN_REASON_PREFIX} agent check: {verdict.message}"[:200]
    argv = [scontrol, "update", f"NodeName={verdict.node}", "State=DRAIN", f"Reason={reason}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"resurrect: could not drain {verdict.node}: {exc}", file=sys.stderr)
        return False
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        print(f"resurrect: could not drain {verdict.node}: {detail}", file=sys.stderr)
        return False
    return True


def _readings(args: argparse.Namespace) -> int:
    settings, config = _settings(args)
    engine = _engine(config)
    nvml = load_pynvml()
    source = NvmlSource(nvml, nvlink_window_s=settings.nvlink_window_s)
    status = source.open()
    print(f"# NVML: {status.reason}; driver {status.driver}; {status.gpu_count} GPUs", flush=True)
    for gpu in source.gpus:
        print(f"# GPU {gpu.index}: {gpu.name} pci={gpu.pci} uuid={gpu.uuid} lost={gpu.lost}")
    for reading in source.poll():
        found = classify(engine, reading, node=settings.node_name)
        rules = [f"{e.rule}[{e.fault_class},{e.role}]" for e in found]
        if args.json:
            record = reading.model_dump(mode="json") | {"rules": rules}
            print(json.dumps(record, sort_keys=True))
        else:
            print(f"{reading.kind.value:10} {reading.text}  -> {', '.join(rules) or 'no rule'}")
    source.close()
    if args.watch > 0:
        print(f"# watching {args.watch:.0f}s (findings and heartbeats as JSON lines)", flush=True)
        watch = settings.model_copy(update={"dedup_window_s": 0.0})
        reporter = PrintReporter(heartbeats=True)
        asyncio.run(_watch(watch, engine, reporter, args.watch))
    return 0


async def _watch(
    settings: AgentSettings, engine: LineScanner, reporter: AgentReporter, seconds: float
) -> None:
    agent = _agent(settings, engine, reporter)
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(seconds, stop.set)
    await agent.run(stop)
    print(
        f"# {agent.polls} polls, {agent.readings_seen} readings, {agent.findings_sent} findings "
        f"({agent.limiter.duplicates} duplicates suppressed)",
        flush=True,
    )


def _run(args: argparse.Namespace) -> int:
    settings, config = _settings(args)
    engine = _engine(config)
    if not args.print_only:
        from resurrect.telemetry.setup import start_telemetry

        start_telemetry(config.telemetry, "agent")  # no endpoint unless telemetry.agent_port
    rc = asyncio.run(_serve(settings, config, engine, print_only=args.print_only))
    if not args.print_only:
        exit_now(rc)
    return rc


async def _serve(
    settings: AgentSettings, config: Any, engine: LineScanner, *, print_only: bool
) -> int:
    reporter: AgentReporter
    client = None
    if print_only:
        reporter = PrintReporter(heartbeats=True)
    else:
        from resurrect.temporal.client import connect

        client = await connect(config.temporal, attempts=5)
        reporter = TemporalReporter(
            client,
            cluster=config.cluster.name,
            task_queue=config.temporal.task_queue,
            settings=settings,
        )
        if settings.collector:
            from resurrect.sensors.node_agent.collector_reporter import collector_reporter

            reporter = collector_reporter(settings, cluster=config.cluster.name, fallback=reporter)
    agent = _agent(settings, engine, reporter)
    if client is not None and config.fencing.enabled:
        agent.fence = _self_fence(settings, config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if client is None:
        await agent.run(stop)
        return 0
    from resurrect.sensors.node_agent.stack_probe import serve_probes

    # the agent answers stack probes of suspected hangs (py-spy as root, on its node)
    probes = serve_probes(client, config.cluster.name, settings.node_name, stop)
    try:
        await asyncio.gather(agent.run(stop), probes)
    finally:
        stop.set()
    return 0
