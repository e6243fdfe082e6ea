#!/usr/bin/env bash
# run-tests.sh - the whole test suite, from a fresh machine: installs what the tests need
# (deploy/install.sh), then runs lint, type checks and pytest. The tests start their own
# real daemons (a local Slurm cluster, the Temporal dev server) on free ports.
# Extra arguments go to pytest, e.g. deploy/run-tests.sh -k workflow -x
# (RESURRECT_TEST_PROCS=1: one process, e.g. to read a test's output in order)
#   --slurm VER   run the live tests against Slurm VER (22.05: the host's on Debian 12;
#                 24.11, 26.05: a Debian userland, built once by deploy/local-slurm/userland.sh)
#                 e.g. deploy/run-tests.sh --slurm 26.05 -m slurm tests/scheduler
#   --help        (first, or after --slurm VER) this text; pytest's own: --help later on
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
. deploy/slurm-version-arg.sh  # a first --slurm VER
case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
deploy/install.sh
export RESURRECT_REQUIRE_SLURM=1   # the real-cluster tests fail (not skip) if Slurm is missing
export PYTHONUNBUFFERED=1
# ruff, mypy, lint-imports (RESURRECT_SKIP_CODE_CHECKS=1: already run on this tree, as
# .ci/run's second pytest step does after its first)
[ "${RESURRECT_SKIP_CODE_CHECKS:-0}" = 1 ] || deploy/check-code.sh
# Three processes (RESURRECT_TEST_PROCS), whole files to each, each starting its own cluster.
# The real-daemon tests mostly wait on daemons and timeouts: with two processes the 2 cores
# were 55-70 % busy (17 min of pytest); with three, 12 min, every test passing.
PROCS=${RESURRECT_TEST_PROCS:-3}
XDIST=()
# the files in the order tests/conftest.py puts them (the longest first), not xdist's own
[ "$PROCS" -gt 1 ] && XDIST=(-n "$PROCS" --dist loadfile --no-loadscope-reorder)
echo "== pytest"; exec .venv/bin/python -m pytest "${XDIST[@]}" --durations=30 "$@"  # the slowest tests are listed at the end
