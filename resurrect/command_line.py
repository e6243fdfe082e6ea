"""What the subcommand modules share (each area's ``cli`` module, ``resurrect/cli.py``
wires them): the ``-c/--config`` option and leaving the process at once."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    """``-c/--config FILE``, the configuration option every command that reads it takes."""
    parser.add_argument(
        "-c",
        "--config",
        type=Path,
        default=None,
        help="YAML configuration (default: $RESURRECT_CONFIG, else built-in defaults)",
    )


def exit_now(code: int) -> NoReturn:
    """Leave the process with ``code``, output flushed, skipping interpreter teardown:
    temporalio can crash at interpreter exit after a clean run (sdk-python#300)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
