"""Subcommands that run or inspect the service: serve, worker, watch, recoveries, config."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from resurrect.command_line import add_config_arg, exit_now
from resurrect.config import load_config
from resurrect.numbers import is_ascii_digits
from resurrect.service import ServiceParts, run_service, stop_on_signals, temporal_for
from resurrect.telemetry.setup import start_telemetry


def _run_parts(args: argparse.Namespace, parts: ServiceParts, process: str) -> int:
    config = load_config(args.config)
    if getattr(args, "mode", None):
        config.mode = args.mode
    # before the first Temporal client: the SDK's metrics runtime is process-wide
    telemetry = start_telemetry(config.telemetry, process)

    async def main() -> None:
        stop = asyncio.Event()
        stop_on_signals(stop)
        await run_service(config, parts, stop)

    asyncio.run(main())
    telemetry.close()
    exit_now(0)


def _serve(args: argparse.Namespace) -> int:
    return _run_parts(args, ServiceParts(worker=True, watcher=True, follow_logs=True), "serve")


def _worker(args: argparse.Namespace) -> int:
    return _run_parts(args, ServiceParts(worker=True, watcher=False, follow_logs=False), "worker")


def _watch(args: argparse.Namespace) -> int:
    return _run_parts(
        args, ServiceParts(worker=False, watcher=True, follow_logs=not args.no_logs), "watch"
    )


def _recoveries(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    config.temporal.embedded = False  # inspect a running service, never start one

    async def main() -> list[dict[str, Any]]:
        async with temporal_for(config) as client:
            query = "WorkflowType = 'RecoveryWorkflow'"
            if args.job:
                if not is_ascii_digits(args.job):
                    raise SystemExit("--job takes a numeric job id")
                query += f" AND ResurrectJobId = '{args.job}'"
            rows = []
            async for execution in client.list_workflows(query, limit=args.limit):
                attrs = {k.name: v for k, v in execution.typed_search_attributes}
                rows.append(
                    {
                        "workflow_id": execution.id,
                        "status": execution.status.name if execution.status else None,
                        "start_time": execution.start_time.isoformat(),
                        "job_id": attrs.get("ResurrectJobId"),
                        "fault_class": attrs.get("ResurrectFaultClass"),
                        "phase": attrs.get("ResurrectPhase"),
                        "outcome": attrs.get("ResurrectOutcome"),
                        "nodes": list(attrs.get("ResurrectNodes") or []),
                    }
                )
            return rows

    rows = asyncio.run(main())
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(
                f"{row['workflow_id']:<40} {row['status'] or '':<11}"
                f" {row['fault_class'] or '-':<20}"
                f" {row['phase'] or '-':<22} {row['outcome'] or '-'}"
            )
    return 0


def _config_check(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.show:
        print(json.dumps(config.model_dump(mode="json"), indent=2))
    else:
        print(f"configuration OK (mode {config.mode}, cluster {config.cluster.name})")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve", help="run everything: embedded Temporal, worker, watcher, log follower"
    )
    add_config_arg(serve)
    serve.add_argument("--mode", choices=["observe", "act"], help="override the configured mode")
    serve.set_defaults(handler=_serve)

    worker = sub.add_parser(
        "worker", help="run the worker hosting recovery workflows and activities"
    )
    add_config_arg(worker)
    worker.add_argument("--mode", choices=["observe", "act"], help="override the configured mode")
    worker.set_defaults(handler=_worker)

    watch = sub.add_parser("watch", help="run the Slurm watcher and the job-log follower")
    add_config_arg(watch)
    watch.add_argument("--no-logs", action="store_true", help="do not follow job output")
    watch.set_defaults(handler=_watch)

    recoveries = sub.add_parser("recoveries", help="list recoveries (from Temporal visibility)")
    add_config_arg(recoveries)
    recoveries.add_argument("--job", help="only this job id")
    recoveries.add_argument("--limit", type=int, default=50)
    recoveries.add_argument("--json", action="store_true")
    recoveries.set_defaults(handler=_recoveries)

    config = sub.add_parser("config", help="validate the configuration (and show it)")
    add_config_arg(config)
    config.add_argument("--show", action="store_true", help="print the effective configuration")
    config.set_defaults(handler=_config_check)
