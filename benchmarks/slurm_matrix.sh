#!/usr/bin/env bash
# slurm_matrix.sh - the whole live suite (every slurm-marked test) and every demo scenario on
# each Slurm version, one version after the other, and the table of docs/performance.md:
# version, live tests passed/failed, and for each demo scenario whether it recovered (the
# demo's `recovered`) with its times to detect (fault -> recovery workflow started) and to
# recover (-> job running again).
# Also one JSON line per version and scenario, its times as a ratio to the first version's
# of the same run.
# Run as root from a checkout with .venv (deploy/install.sh); long: ~20-30 min a version on
# 2 busy cores.
#   benchmarks/slurm_matrix.sh [--versions "22.05 24.11 26.05"] [--quick] [--no-tests]
#                              [--scenarios "node-loss hang"] [--no-demo] [PYTEST ARGS]
#   --quick      only tests/scheduler and tests/e2e/test_recovery_on_slurm.py
#   --no-tests   only the demos;  --no-demo: only the tests
#   --scenarios  the demo scenarios to run (default: every one `resurrect demo` offers)
# Logs: $MATRIX_DIR (default /tmp/resurrect-slurm-matrix)/<version>-tests.log,
#       <version>-demo-<scenario>.log
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || PY=/work/main/.venv/bin/python
VERSIONS="22.05 24.11 26.05"
SUITE=(tests)
TESTS=1 DEMO=1 SCENARIOS=""
while [ $# -gt 0 ]; do
  case $1 in
    --versions) VERSIONS=$2; shift 2 ;;
    --quick) SUITE=(tests/scheduler tests/e2e/test_recovery_on_slurm.py); shift ;;
    --all) shift ;;  # the default (kept for older callers)
    --no-tests) TESTS=0; shift ;;
    --no-demo) DEMO=0; shift ;;
    --scenarios) SCENARIOS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
OUT=${MATRIX_DIR:-/tmp/resurrect-slurm-matrix}
mkdir -p "$OUT"
export PYTHONPATH=$ROOT PYTHONUNBUFFERED=1 RESURRECT_REQUIRE_SLURM=1
resurrect() { "$PY" -c 'import sys; from resurrect.cli import main; sys.exit(main())' "$@"; }
if [ -z "$SCENARIOS" ]; then  # the choices of `resurrect demo --scenario {a,b,...}`
  SCENARIOS=$(resurrect demo --help | tr -d '\n' | grep -oE -- '--scenario \{[^}]*\}' | head -1 \
    | sed -e 's/.*{//' -e 's/}//' -e 's/,/ /g')
fi

# field NAME FILE : a value from the demo's JSON (its last line), or "-"
field() { tail -1 "$2" | "$PY" -c "import json,sys
try: print(json.loads(sys.stdin.read()).get('$1', '-'))
except ValueError: print('-')"; }

declare -A PASSED FAILED DETECT RECOVER OK
for v in $VERSIONS; do
  export RESURRECT_SLURM_VERSION=$v
  deploy/local-slurm/userland.sh "$v" >/dev/null 2>&1 || true  # 22.05: the host's (refused here)
  PASSED[$v]=- FAILED[$v]=-
  if [ "$TESTS" = 1 ]; then
    echo "== Slurm $v: pytest -m slurm ${SUITE[*]} $*" >&2
    "$PY" -m pytest -q -p no:cacheprovider -rfE -m slurm "${SUITE[@]}" "$@" \
      >"$OUT/$v-tests.log" 2>&1 || true
    summary=$(grep -E '[0-9]+ (passed|failed|error)' "$OUT/$v-tests.log" | tail -1)
    count() { grep -oE "[0-9]+ $1" <<<"$summary" | grep -oE '[0-9]+' || echo 0; }
    PASSED[$v]=$(count passed)
    FAILED[$v]=$(( $(count failed) + $(count error) ))
    echo "   $summary" >&2
  fi
  for s in $SCENARIOS; do
    key="$v/$s"
    DETECT[$key]=- RECOVER[$key]=- OK[$key]=-
    [ "$DEMO" = 1 ] || continue
    echo "== Slurm $v: resurrect demo --scenario $s" >&2
    log="$OUT/$v-demo-$s.log"
    # ok: the demo's own verdict `recovered` (its exit status also wants the job completed,
    # which the straggler scenario never waits for: it cancels the long job once restarted)
    resurrect demo --scenario "$s" --json --no-keep-ui \
      --state-dir "/tmp/resurrect-matrix-demo-$v" >"$log" 2>&1 || true
    [ "$(field recovered "$log")" = True ] && OK[$key]=yes || OK[$key]=NO
    DETECT[$key]=$(field time_to_detect_s "$log")
    RECOVER[$key]=$(field time_to_recover_s "$log")
    echo "   recovered: ${OK[$key]}, detect ${DETECT[$key]} s, recover ${RECOVER[$key]} s" >&2
  done
done

header="| Slurm | live tests passed | failed |"
rule="|---|---|---|"
for s in $SCENARIOS; do header+=" demo $s: ok, detect / recover (s) |"; rule+="---|"; done
printf '\n%s\n%s\n' "$header" "$rule"
for v in $VERSIONS; do
  row="| $v | ${PASSED[$v]} | ${FAILED[$v]} |"
  for s in $SCENARIOS; do row+=" ${OK[$v/$s]}, ${DETECT[$v/$s]} / ${RECOVER[$v/$s]} |"; done
  echo "$row"
done
base=${VERSIONS%% *}
for v in $VERSIONS; do
  for s in $SCENARIOS; do
    "$PY" - "$v" "$base" "$s" "${PASSED[$v]}" "${FAILED[$v]}" "${OK[$v/$s]}" \
      "${DETECT[$v/$s]}" "${RECOVER[$v/$s]}" "${DETECT[$base/$s]}" "${RECOVER[$base/$s]}" <<'PYEOF'
import json, sys
v, base, scenario, passed, failed, ok, det, rec, bdet, brec = sys.argv[1:]
def num(x):
    try:
        return float(x)
    except ValueError:
        return None
def ratio(a, b):
    a, b = num(a), num(b)
    return round(a / b, 2) if a is not None and b else None
print(json.dumps({"benchmark": "slurm_matrix", "slurm": v, "scenario": scenario,
                  "tests_passed": num(passed), "tests_failed": num(failed),
                  "demo_recovered": ok == "yes", "time_to_detect_s": num(det),
                  "time_to_recover_s": num(rec), "baseline": f"slurm {base}, same run",
                  "detect_ratio": ratio(det, bdet), "recover_ratio": ratio(rec, brec)}))
PYEOF
  done
done
