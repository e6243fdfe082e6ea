"""``resurrect demo``: run the main job on this machine and show the recovery."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from resurrect.demo.scenario import SCENARIOS, Demo, DemoError, DemoSettings


def _demo(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        print(
            "resurrect demo: must run as root - it starts munged, slurmctld and slurmd "
            "(jobs themselves run as the unprivileged user resurrect-demo)",
            file=sys.stderr,
        )
        return 2
    settings = DemoSettings(
        scenario=args.scenario,
        state_dir=args.state_dir,
        ui_port=args.ui_port,
        train_steps=args.steps,
        scheduler=args.scheduler,
    )
    start = time.monotonic()

    def say(message: str) -> None:
        print(f"[demo {time.monotonic() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    try:
        demo = Demo(settings, say)
    except DemoError as exc:
        print(f"resurrect demo: {exc}", file=sys.stderr)
        return 2

    async def main() -> dict[str, object]:
        try:
            result = await demo.run()
            if not args.json and args.keep_ui and sys.stdin.isatty() and demo.server is not None:
                say(
                    f"done. The Temporal UI stays up at {demo.server.ui_url}"
                    " - press Enter to stop everything"
                )
                await asyncio.to_thread(sys.stdin.readline)
            return result
        finally:
            say("stopping everything the demo started")
            await demo.close()

    rc = 0
    try:
        result = asyncio.run(main())
    except DemoError as exc:
        result = {"recovered": False, "error": str(exc)}
        rc = 1
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(json.dumps(result, indent=2, sort_keys=True))
    if rc == 0 and not demo.succeeded(result):
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # temporalio can crash at interpreter exit (sdk-python#300)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="local Slurm cluster + resurrect + a training job + an injected fault, end to end",
    )
    demo.add_argument(
        "--scenario",
        choices=list(SCENARIOS),
        default="node-loss",
        help="; ".join(f"{name}: {scenario.summary}" for name, scenario in SCENARIOS.items()),
    )
    demo.add_argument(
        "--json", action="store_true", help="non-interactive; last line is one JSON object"
    )
    demo.add_argument("--state-dir", type=Path, default=Path("/tmp/resurrect-demo"))
    demo.add_argument("--ui-port", type=int, default=8233)
    demo.add_argument("--steps", type=int, default=120, help="training steps of the job")
    demo.add_argument(
        "--scheduler",
        choices=("cli", "slurmrestd"),
        default="cli",
        help="resurrect's scheduler backend: Slurm's commands, or slurmrestd (24.11+, "
        "started with the cluster)",
    )
    demo.add_argument(
        "--no-keep-ui",
        dest="keep_ui",
        action="store_false",
        help="do not wait for Enter before stopping the Temporal UI",
    )
    demo.set_defaults(handler=_demo)
