"""``resurrect checkpoint verify|prepare-resume``: the checkpoint commands of the CLI.

Both run in the checkpoint helper as the owner of the tree (as the service's recovery step
does), whoever runs them: nothing in the job's tree is read or written as root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from resurrect.checkpoint.as_owner import CLI_TIMEOUT_S, run_as_tree_owner
from resurrect.contracts import CheckpointVerdict
from resurrect.text_safety import printable

EXIT_OK = 0
EXIT_NO_VALID = 1
EXIT_UNREADABLE = 2


def register(subparsers: Any) -> None:
    """Add the ``checkpoint`` command group to the top-level parser."""
    parser = subparsers.add_parser("checkpoint", help="verify checkpoints and prepare a resume")
    sub = parser.add_subparsers(dest="checkpoint_command", metavar="SUBCOMMAND", required=True)

    verify = sub.add_parser("verify", help="verify every checkpoint under ROOT")
    _common(verify)
    verify.set_defaults(handler=_verify)

    prepare = sub.add_parser(
        "prepare-resume",
        help="quarantine damaged newest checkpoints and point the job at the newest intact one",
    )
    _common(prepare)
    prepare.add_argument(
        "--observe", action="store_true", help="decide and report only; change nothing"
    )
    prepare.set_defaults(handler=_prepare)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", type=Path, help="the job's checkpoint directory")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument("--level", choices=("quick", "full"), default="quick")
    parser.add_argument("--progress", action="store_true", help="progress lines on stderr")
    parser.add_argument(
        "--timeout",
        type=float,
        default=CLI_TIMEOUT_S,
        help="stop after this many seconds (default %(default)g)",
    )


def _progress(args: argparse.Namespace) -> Any:
    if not args.progress:
        return None
    return lambda line: print(line, file=sys.stderr, flush=True)


def _verify(args: argparse.Namespace) -> int:
    verdict = run_as_tree_owner(
        "verify", args.root, level=args.level, progress=_progress(args), timeout_s=args.timeout
    )
    return _emit(verdict, as_json=args.json)


def _prepare(args: argparse.Namespace) -> int:
    verdict = run_as_tree_owner(
        "prepare",
        args.root,
        level=args.level,
        act=not args.observe,
        progress=_progress(args),
        timeout_s=args.timeout,
    )
    return _emit(verdict, as_json=args.json)


def _emit(verdict: CheckpointVerdict, *, as_json: bool) -> int:
    if as_json:
        print(verdict.model_dump_json())
    else:
        print(printable(f"root: {verdict.root}"))  # the tree's names are the job's
        for cand in verdict.candidates:
            mark = ("OK " if cand.judged else "?? ") if cand.valid else "BAD"
            print(printable(f"  {mark} step={cand.step} {cand.path}: {cand.reason}"))
        print(printable(f"resume from: {verdict.latest_valid or '(none)'}"))
        for moved in verdict.quarantined:
            print(printable(f"quarantined: {moved}"))
        if verdict.note:
            print(printable(f"note: {verdict.note}"))
    if not verdict.verified:
        return EXIT_UNREADABLE
    return EXIT_OK if verdict.latest_valid else EXIT_NO_VALID
