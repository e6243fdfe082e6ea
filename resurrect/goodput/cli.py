"""``resurrect goodput``: what every interruption cost, per job and for the cluster."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from resurrect.command_line import add_config_arg
from resurrect.config import load_config
from resurrect.errors import ConfigError
from resurrect.goodput.render import notes, parse_duration, table
from resurrect.goodput.report import GoodputReport, goodput_report
from resurrect.numbers import is_ascii_digits
from resurrect.policy import job_policy
from resurrect.text_safety import printable, printable_lines

ADVICE_WINDOW = "30d"  # the rates need incidents: a month unless --since says otherwise


def _report(args: argparse.Namespace) -> GoodputReport:
    from resurrect.service import scheduler_from_config, temporal_for

    config = load_config(args.config)
    config.temporal.embedded = False  # inspect a running service, never start one
    if args.job is not None and not is_ascii_digits(args.job.replace("_", "")):
        raise ConfigError("--job takes a Slurm job id (digits, or ARRAY_TASK)")
    now = datetime.now(UTC)
    window = args.since or (ADVICE_WINDOW if args.advise else None)
    since = now - parse_duration(window) if window else None

    async def main() -> GoodputReport:
        async with temporal_for(config) as client:
            scheduler = None if args.no_scheduler else scheduler_from_config(config)
            return await goodput_report(
                client,
                scheduler,
                config.cluster.name,
                now=now,
                job_id=None if args.advise else args.job,  # rates need every job
                since=since,
                opted_in=lambda job: job_policy(job, config) is not None,
            )

    return asyncio.run(main())


def _advise(args: argparse.Namespace) -> int:
    from resurrect.goodput.advice import advice_lines, advice_report

    config = load_config(args.config)
    min_incidents = config.telemetry.advice_min_incidents
    advice = advice_report(_report(args), args.job, min_incidents=min_incidents)
    if args.json:
        print(json.dumps(advice.model_dump(mode="json"), indent=2))
        return 0
    for line in advice_lines(advice):
        print(printable(line))
    return 0


def _goodput(args: argparse.Namespace) -> int:
    if args.advise:
        return _advise(args)
    if args.plot is not None and args.plot.suffix.lower() not in (".png", ".svg"):
        raise ConfigError("--plot writes FILE.png or FILE.svg")
    report = _report(args)
    if args.plot is not None:
        from resurrect.goodput.plot import plot_timelines

        plot_timelines(report.jobs, args.plot)
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
        return 0
    if not report.jobs:
        print("no recoveries in this window")
        return 0
    print(printable_lines(table(report.jobs, report.cluster)))
    for line in notes(report.jobs):
        print(printable(line))
    if args.plot is not None:
        print(f"timeline written to {args.plot}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "goodput",
        help="what interruptions cost: productive vs lost time per job and for the cluster",
    )
    add_config_arg(parser)
    parser.add_argument(
        "--job",
        help="only this job id (default: every job with a recovery in the window and"
        " every opted-in job the scheduler still lists)",
    )
    parser.add_argument(
        "--since", help="only recoveries started this long ago or later (90s, 30m, 24h, 7d)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--advise",
        action="store_true",
        help="advise each job's checkpoint interval from its save time, the cluster's"
        f" interruption rate and recovery time (window: --since, default {ADVICE_WINDOW})",
    )
    parser.add_argument(
        "--plot", type=Path, metavar="FILE", help="draw each job's timeline to FILE.png/.svg"
    )
    parser.add_argument(
        "--no-scheduler",
        action="store_true",
        help="do not ask the scheduler (accounts from Temporal histories only)",
    )
    parser.set_defaults(handler=_goodput)
    from resurrect.goodput.simulate import cli as simulate_cli

    simulate_cli.register(sub)
