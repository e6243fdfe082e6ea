"""The ``--slurm VER`` first argument of deploy/demo.sh and deploy/run-tests.sh, read by the
one file both source (deploy/slurm-version-arg.sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What a script sourcing it sees afterwards: the chosen version and the arguments left.
CALLER = '. deploy/slurm-version-arg.sh; echo "${RESURRECT_SLURM_VERSION:-host} $*"'


def sourced(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RESURRECT_SLURM_VERSION"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", CALLER, "demo.sh", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_first_slurm_argument_chooses_the_version_and_is_shifted_off() -> None:
    run = sourced("--slurm", "24.11", "--scenario", "gpu-error")
    assert (run.returncode, run.stdout) == (0, "24.11 --scenario gpu-error\n")


def test_other_arguments_are_left_alone() -> None:
    assert sourced("-k", "slurm", "--slurm", "26.05").stdout == "host -k slurm --slurm 26.05\n"
    assert sourced().stdout == "host \n"


def test_a_slurm_argument_without_a_version_stops_the_script_naming_it() -> None:
    run = sourced("--slurm")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == "demo.sh: --slurm needs a version\n"
