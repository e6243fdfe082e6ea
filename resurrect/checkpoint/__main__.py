"""``python -m resurrect.checkpoint verify|prepare-resume ROOT``: the checkpoint commands alone.

The same commands as ``resurrect checkpoint ...``, without loading the rest of the CLI (for
use on compute nodes or in job epilogues).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from resurrect.checkpoint.cli import register


def build_parser() -> argparse.ArgumentParser:
    """A parser whose only command group is ``checkpoint``'s subcommands."""
    parser = argparse.ArgumentParser(prog="python -m resurrect.checkpoint")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``checkpoint`` arguments (the word ``checkpoint`` itself is optional)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or args_list[0] != "checkpoint":
        args_list.insert(0, "checkpoint")
    args = build_parser().parse_args(args_list)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
