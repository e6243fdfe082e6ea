"""``--help`` answers with usage and does nothing else: every script in deploy/ (run from a
copy, so whatever it would install or start would show up there) and every ``resurrect``
subcommand."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from resurrect.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
# Runnable scripts: executable shell scripts and the maintenance programs (sourced helpers
# such as deploy/local-slurm/lib.sh are not executable).
SCRIPTS = sorted(
    p.relative_to(REPO).as_posix()
    for p in (REPO / "deploy").rglob("*")
    if p.is_file() and (os.access(p, os.X_OK) or p.suffix == ".py")
)


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_deploy_script_prints_its_usage_and_does_nothing_else(
    script: str, tmp_path: Path
) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "deploy", copy / "deploy")
    before = files_under(copy)
    argv = [sys.executable, script] if script.endswith(".py") else [script]
    run = subprocess.run(
        [*argv, "--help"],
        cwd=copy,
        # a script that went on would find no usable Python to install with
        env={"PATH": "/usr/bin:/bin", "RESURRECT_PYTHON": "/bin/false", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    name = Path(script).name
    assert name in run.stdout or "usage" in run.stdout.lower(), run.stdout
    assert len(run.stdout.splitlines()) >= 2
    pycache = {f for f in files_under(copy) - before if "__pycache__" in f}
    assert files_under(copy) - before - pycache == set()


def subcommands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from subcommands(sub, (*path, name))


def test_every_resurrect_subcommand_prints_its_usage_and_runs_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = list(subcommands(build_parser()))
    assert len(paths) > 20  # the command itself and every (nested) subcommand
    for path in paths:
        parser = build_parser()
        with pytest.raises(SystemExit) as leaving:
            parser.parse_args([*path, "--help"])  # never reaches a handler
        assert leaving.value.code == 0, path
        shown = capsys.readouterr().out
        assert shown.startswith(f"usage: resurrect {' '.join(path)}".rstrip()), (path, shown)
