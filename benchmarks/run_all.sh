#!/usr/bin/env bash
# run_all.sh - every benchmark, one JSON line each, each against a baseline measured in the
# same run (grep, cat/sha256sum, an idle interpreter). Takes about 4 minutes on 2 cores and
# needs ~9 GB of free space in $TMPDIR for the checkpoint benchmark.
#   benchmarks/run_all.sh [--quick]    (--quick: smaller inputs, for a smoke run)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
if [ "${1:-}" = "--quick" ]; then
  scan=(--lines 200000); ckpt=(--size-gb 0.5); agent=(--duration 10)
  follow=(--window 120); fuzz=(--inputs 10000); budget=(--recoveries 50)
else
  scan=(); ckpt=(--size-gb 4); agent=(--duration 60); follow=(); fuzz=(); budget=()
fi
echo "== scan_throughput (rule engine vs grep -P)" >&2
"$PY" benchmarks/scan_throughput.py --json "${scan[@]}"
echo "== checkpoint_verify (quick/full vs cat, sha256sum)" >&2
"$PY" benchmarks/checkpoint_verify.py --json "${ckpt[@]}"
echo "== agent_overhead (8 fake GPUs vs an idle interpreter)" >&2
"$PY" benchmarks/agent_overhead.py --json "${agent[@]}"
echo "== follower_scan (hang check on a 50,000-entry checkpoint dir vs the former full rescan)" >&2
"$PY" benchmarks/follower_scan.py --json "${follow[@]}"
echo "== fuzz_untrusted_input (>= 100,000 hostile inputs through the service loops)" >&2
"$PY" benchmarks/fuzz_untrusted_input.py --json "${fuzz[@]}"
echo "== drain_budget (burst of reserve_drain updates vs queries of the same workflow)" >&2
"$PY" benchmarks/drain_budget.py --json "${budget[@]}"
