"""``resurrect simulate``: the recorded period, the what-if knobs, and no automation."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from resurrect.command_line import add_config_arg
from resurrect.config import load_config
from resurrect.errors import ConfigError, SchedulerError
from resurrect.goodput.render import parse_duration
from resurrect.goodput.report import GoodputReport, goodput_report
from resurrect.goodput.simulate.measure import inputs_from_report
from resurrect.goodput.simulate.model import SimInputs, WhatIf
from resurrect.goodput.simulate.render import plot, table
from resurrect.goodput.simulate.run import DEFAULT_REPLICATIONS, simulate
from resurrect.operator.budget import limits_for
from resurrect.policy import job_policy
from resurrect.text_safety import printable_lines


def _inputs(args: argparse.Namespace) -> SimInputs:
    from resurrect.service import scheduler_from_config, temporal_for

    config = load_config(args.config)
    config.temporal.embedded = False  # inspect a running service, never start one
    now = datetime.now(UTC)
    since = now - parse_duration(args.since)

    async def main() -> tuple[GoodputReport, int | None]:
        scheduler = None if args.no_scheduler else scheduler_from_config(config)
        nodes: int | None = None
        if scheduler is not None:
            try:
                nodes = len(await scheduler.list_nodes())
            except SchedulerError:
                nodes = None
        async with temporal_for(config) as client:
            report = await goodput_report(
                client,
                scheduler,
                config.cluster.name,
                now=now,
                since=since,
                opted_in=lambda job: job_policy(job, config) is not None,
            )
        return report, nodes

    report, nodes = asyncio.run(main())
    cluster_nodes = args.nodes or nodes
    budget = limits_for(config.isolation, cluster_nodes or 1, {}).cluster
    return inputs_from_report(
        report,
        cluster_nodes=cluster_nodes,
        gpus_per_node=args.gpus_per_node,
        drain_budget=budget,
        drain_window_s=config.isolation.window_s,
        replay=args.replay,
    )


def _simulate(args: argparse.Namespace) -> int:
    if args.plot is not None and args.plot.suffix.lower() not in (".png", ".svg"):
        raise ConfigError("--plot writes FILE.png or FILE.svg")
    knobs = WhatIf.parse(args.what_if)
    result = simulate(_inputs(args), knobs, seed=args.seed, replications=args.replications)
    if args.plot is not None:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=2))
        return 0
    print(printable_lines(table(result)))
    if args.plot is not None:
        print(f"chart written to {args.plot}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "simulate",
        help="what if: goodput, lost GPU-hours and time to train under other settings",
    )
    add_config_arg(parser)
    parser.add_argument("--since", default="30d", help="the recorded period (default 30d)")
    parser.add_argument(
        "--what-if",
        metavar="K=V,...",
        help="detect_s, checkpoint_interval_s, drain_budget, spares, manual_response_s",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--plot", type=Path, metavar="FILE", help="chart to FILE.png/.svg")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--replications",
        type=int,
        default=DEFAULT_REPLICATIONS,
        help=f"runs averaged per scenario (default {DEFAULT_REPLICATIONS})",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="replay the period's own interruptions instead of drawing them (a check)",
    )
    parser.add_argument("--nodes", type=int, help="cluster size (default: the scheduler's)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="default 8")
    parser.add_argument(
        "--no-scheduler",
        action="store_true",
        help="do not ask the scheduler (accounts from Temporal histories only)",
    )
    parser.set_defaults(handler=_simulate)
