#!/usr/bin/env bash
# check-code.sh - the static checks: ruff (lint and format), mypy (strict) and lint-imports
# (the layers, [tool.importlinter] in pyproject.toml). Needs the venv deploy/install.sh
# makes (.venv); run by deploy/run-tests.sh before the tests.
# mypy and lint-imports read the package as it installs: workflows/, activities/, workers/
# and sensors/ are resurrect.<name> only in an installed tree (setup.py), so the wheel's
# files are put into build/check-tree first, and mypy's paths are given back as the
# repository's.
# Exits non-zero when a check fails.
#   --help   this text
set -euo pipefail
case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${RESURRECT_CHECK_PYTHON:-$ROOT/.venv/bin/python}  # another venv's interpreter, e.g. a worktree's
TREE=$ROOT/build/check-tree
echo "== ruff"
"$PY" -m ruff check .
"$PY" -m ruff format --check .
# setuptools' build/lib keeps modules a change moved or deleted: start it afresh too.
rm -rf "$TREE" "$ROOT/build/lib"
"$PY" -m pip install -q --no-deps --no-build-isolation --no-index --no-compile --target "$TREE" . \
  2>&1 | grep -v -e '^WARNING: Location' -e 'is ignored' >&2 || true
[ -f "$TREE/resurrect/workflows/__init__.py" ] || { echo "check-code: building $TREE failed" >&2; exit 1; }
echo "== mypy"
status=0
(cd "$TREE" && "$PY" -m mypy --config-file "$ROOT/pyproject.toml" --cache-dir "$ROOT/.mypy_cache" resurrect) \
  | sed -E 's#^resurrect/(workflows|activities|workers|sensors)/#\1/#' || status=$?
[ "$status" -eq 0 ] || exit "$status"
echo "== lint-imports"
cd "$TREE" && PYTHONPATH=$TREE exec "$(dirname "$PY")/lint-imports" --no-cache "$ROOT/pyproject.toml"
