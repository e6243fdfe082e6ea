"""``python -m resurrect.sensors.node_agent ...``: the agent's commands without the rest of
resurrect's CLI.

Same commands and exit codes as ``resurrect agent ...`` (run, check, readings), for GPU nodes
where only the agent is wanted.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from resurrect.cli import main as cli_main

VERBOSE_FLAGS = ("-v", "-vv", "--verbose")


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    flags = [arg for arg in given if arg in VERBOSE_FLAGS]
    rest = [arg for arg in given if arg not in VERBOSE_FLAGS]
    return cli_main(
        [*flags, "agent", *rest],
        modules=("resurrect.sensors.node_agent.cli",),
        prog="python -m resurrect.sensors.node_agent",
    )


if __name__ == "__main__":
    sys.exit(main())
