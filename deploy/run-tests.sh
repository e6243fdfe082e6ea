#!/usr/bin/env bash
# run-tests.sh - the whole test suite, from a fresh machine: installs what the tests need
# (deploy/install.sh), then runs lint, type checks and pytest. The tests start their own
# real daemons (a local Slurm cluster, the Temporal dev server) on free ports.
# Extra arguments go to pytest, e.g. deploy/run-tests.sh -k workflow -x
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
deploy/install.sh
export RESURRECT_REQUIRE_SLURM=1   # the real-cluster tests fail (not skip) if Slurm is missing
export PYTHONUNBUFFERED=1
echo "== ruff"; .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "== mypy"; .venv/bin/mypy resurrect  # resurrect/{workflows,activities,workers,sensors} link the top-level folders
echo "== pytest"; exec .venv/bin/python -m pytest --durations=30 "$@"  # the slowest tests are listed at the end
