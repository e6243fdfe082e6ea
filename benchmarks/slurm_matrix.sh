#!/usr/bin/env bash
# slurm_matrix.sh - the live (slurm-marked) tests and the node-loss demo on each Slurm version,
# one after the other, and a table: version, tests passed/failed, the demo's time to detect
# the lost node (fault -> recovery workflow started) and to recover (-> job running again).
# Also one JSON line per version, its demo times as a ratio to 22.05's of the same run.
# Run as root from a checkout with .venv (deploy/install.sh).
#   benchmarks/slurm_matrix.sh [--versions "22.05 24.11 26.05"] [--all] [--no-demo] [PYTEST ARGS]
#   --all       every slurm-marked test (long: the whole live suite, ~15+ min a version);
#               default: tests/scheduler and tests/e2e/test_recovery_on_slurm.py
#   --no-demo   skip the demo
# Logs: $MATRIX_DIR (default /tmp/resurrect-slurm-matrix)/<version>-{tests,demo}.log
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || PY=/work/main/.venv/bin/python
VERSIONS="22.05 24.11 26.05"
SUITE=(tests/scheduler tests/e2e/test_recovery_on_slurm.py)
DEMO=1
while [ $# -gt 0 ]; do
  case $1 in
    --versions) VERSIONS=$2; shift 2 ;;
    --all) SUITE=(tests); shift ;;
    --no-demo) DEMO=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
OUT=${MATRIX_DIR:-/tmp/resurrect-slurm-matrix}
mkdir -p "$OUT"
export PYTHONPATH=$ROOT PYTHONUNBUFFERED=1 RESURRECT_REQUIRE_SLURM=1

# field NAME FILE : a number from the demo's JSON (its last line), or "-"
field() { tail -1 "$2" | "$PY" -c "import json,sys
try: print(json.loads(sys.stdin.read()).get('$1', '-'))
except ValueError: print('-')"; }

declare -A PASSED FAILED DETECT RECOVER
for v in $VERSIONS; do
  export RESURRECT_SLURM_VERSION=$v
  deploy/local-slurm/userland.sh "$v" >/dev/null 2>&1 || true  # 22.05: the host's (refused here)
  echo "== Slurm $v: pytest -m slurm ${SUITE[*]} $*" >&2
  "$PY" -m pytest -q -p no:cacheprovider -m slurm "${SUITE[@]}" "$@" >"$OUT/$v-tests.log" 2>&1 || true
  summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|[0-9]+ passed|[0-9]+ failed' "$OUT/$v-tests.log" | tail -1)
  PASSED[$v]=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  FAILED[$v]=$(( $(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+' || echo 0) + $(grep -oE '[0-9]+ error' <<<"$summary" | grep -oE '[0-9]+' || echo 0) ))
  echo "   $summary" >&2
  DETECT[$v]=- RECOVER[$v]=-
  if [ "$DEMO" = 1 ]; then
    echo "== Slurm $v: resurrect demo --scenario node-loss" >&2
    "$PY" -c 'import sys; from resurrect.cli import main; sys.exit(main())' \
      demo --scenario node-loss --json --no-keep-ui \
      --state-dir "/tmp/resurrect-matrix-demo-$v" >"$OUT/$v-demo.log" 2>&1 || true
    DETECT[$v]=$(field time_to_detect_s "$OUT/$v-demo.log")
    RECOVER[$v]=$(field time_to_recover_s "$OUT/$v-demo.log")
  fi
done

printf '\n| Slurm | live tests passed | failed | demo: detect (s) | demo: recover (s) |\n|---|---|---|---|---|\n'
for v in $VERSIONS; do
  printf '| %s | %s | %s | %s | %s |\n' "$v" "${PASSED[$v]}" "${FAILED[$v]}" "${DETECT[$v]}" "${RECOVER[$v]}"
done
base=${VERSIONS%% *}
for v in $VERSIONS; do
  "$PY" - "$v" "$base" "${PASSED[$v]}" "${FAILED[$v]}" "${DETECT[$v]}" "${RECOVER[$v]}" "${DETECT[$base]}" "${RECOVER[$base]}" <<'PYEOF'
import json, sys
v, base, passed, failed, det, rec, bdet, brec = sys.argv[1:]
def num(x):
    try:
        return float(x)
    except ValueError:
        return None
def ratio(a, b):
    a, b = num(a), num(b)
    return round(a / b, 2) if a is not None and b else None
print(json.dumps({"benchmark": "slurm_matrix", "slurm": v, "tests_passed": int(passed),
                  "tests_failed": int(failed), "time_to_detect_s": num(det),
                  "time_to_recover_s": num(rec), "baseline": f"slurm {base}, same run",
                  "detect_ratio": ratio(det, bdet), "recover_ratio": ratio(rec, brec)}))
PYEOF
done
