"""The ``resurrect`` console command.

Each area of resurrect contributes its own subcommands through a ``register(subparsers)``
function in its ``cli`` module; this file only wires them together. A subcommand handler
takes the parsed ``argparse.Namespace`` and returns the process exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from resurrect import __version__
from resurrect.errors import ResurrectError
from resurrect.text_safety import printable

# Modules that provide ``register(subparsers)``.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "resurrect.rules.cli",
    "resurrect.checkpoint.cli",
    "resurrect.service_cli",
    "resurrect.demo.cli",
    "resurrect.sensors.node_agent.cli",
    "resurrect.plans.cli",
    "resurrect.stacks.cli",
    "resurrect.goodput.cli",
    "resurrect.operator.cli",
    "resurrect.sensors.liveness.cli",
    "resurrect.temporal.cli",
)

Handler = Callable[[argparse.Namespace], int]


def build_parser(
    modules: Sequence[str] = SUBCOMMAND_MODULES, prog: str = "resurrect"
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Detect, attribute and recover interrupted training jobs.",
    )
    parser.add_argument("--version", action="version", version=f"resurrect {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    modules: Sequence[str] = SUBCOMMAND_MODULES,
    prog: str = "resurrect",
) -> int:
    """Run one command. ``modules`` narrows the commands loaded (light entry points such as
    ``python -m resurrect.sensors.node_agent`` load only their own)."""
    parser = build_parser(modules, prog)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG
        if args.verbose > 1
        else logging.INFO
        if args.verbose
        else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return handler(args)
    except ResurrectError as exc:
        print(f"resurrect: error: {printable(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
