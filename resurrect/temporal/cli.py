"""``resurrect temporal``: what a Temporal namespace needs before resurrect serves it."""

from __future__ import annotations

import argparse
import asyncio

from resurrect.command_line import add_config_arg
from resurrect.config import load_config


def _register_search_attributes(args: argparse.Namespace) -> int:
    from resurrect.service import temporal_for
    from resurrect.temporal.registration import (
        cli_commands,
        register_search_attributes,
        unregistered_search_attributes,
    )

    config = load_config(args.config)
    config.temporal.embedded = False  # a running server's namespace, never a new one

    async def main() -> int:
        async with temporal_for(config) as client:
            if args.print:
                missing = await unregistered_search_attributes(client)
                for line in cli_commands(missing, client.namespace):
                    print(line)
                return 0
            added = await register_search_attributes(client)
            for name, kind in added.items():
                print(f"registered {name} ({kind}) in namespace {client.namespace}")
            if not added:
                print(f"namespace {client.namespace} has every search attribute resurrect sets")
            return 0

    return asyncio.run(main())


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("temporal", help="prepare a Temporal namespace for resurrect")
    commands = parser.add_subparsers(dest="temporal_command", metavar="COMMAND", required=True)
    attributes = commands.add_parser(
        "register-search-attributes",
        help="register the search attributes resurrect's workflows set (a worker does not"
        " start while one is missing)",
    )
    add_config_arg(attributes)
    attributes.add_argument(
        "--print",
        action="store_true",
        help="register nothing: print the Temporal CLI commands for those missing",
    )
    attributes.set_defaults(handler=_register_search_attributes)
