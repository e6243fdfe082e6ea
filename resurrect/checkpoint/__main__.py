"""``python -m resurrect.checkpoint verify|prepare-resume ROOT``: the checkpoint commands alone.

The same commands as ``resurrect checkpoint ...``, without loading the rest of the CLI (for
use on compute nodes or in job epilogues).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from resurrect.cli import main as cli_main


def main(argv: Sequence[str] | None = None) -> int:
    """Run a ``checkpoint`` command (the word ``checkpoint`` itself is optional)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "checkpoint":
        args.insert(0, "checkpoint")
    return cli_main(
        args, modules=("resurrect.checkpoint.cli",), prog="python -m resurrect.checkpoint"
    )


if __name__ == "__main__":
    sys.exit(main())
