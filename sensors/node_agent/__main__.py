"""``python -m sensors.node_agent ...``: the agent's commands without the rest of resurrect's CLI.

Same commands and exit codes as ``resurrect agent ...`` (run, check, readings).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from resurrect.errors import ResurrectError
from sensors.node_agent.cli import register


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sensors.node_agent")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    register(parser.add_subparsers(dest="command"))
    given = list(sys.argv[1:] if argv is None else argv)
    flags = [arg for arg in given if arg in ("-v", "-vv", "--verbose")]
    rest = [arg for arg in given if arg not in flags]
    args = parser.parse_args([*flags, "agent", *rest])
    logging.basicConfig(
        level=logging.DEBUG
        if args.verbose > 1
        else logging.INFO
        if args.verbose
        else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args))
    except ResurrectError as exc:
        print(f"resurrect: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
