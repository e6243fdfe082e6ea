#!/usr/bin/env bash
# run_all.sh - every benchmark, one JSON line each, each against a baseline measured in the
# same run (grep, cat/sha256sum, an idle interpreter, the former code paths). Takes about
# 9 minutes on 2 cores and needs ~9 GB of free space in $TMPDIR for the checkpoint benchmark.
#   benchmarks/run_all.sh [--quick]    (--quick: smaller inputs, for a smoke run)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
if [ "${1:-}" = "--quick" ]; then
  scan=(--lines 200000); ckpt=(--size-gb 0.5); agent=(--duration 10)
  follow=(--window 120); fuzz=(--inputs 10000); progress=(--lines 50000)
  telemetry=(--recoveries 10 --rounds 1); watch=(--jobs 10000 --nodes 2000 --running 400)
  live=(--nodes 2000 --duration 20); fcost=(--jobs 300 --duration 5); burst=(--jobs 50)
  budget=(--recoveries 50)
else
  scan=(); ckpt=(--size-gb 4); agent=(--duration 60); follow=(); fuzz=(); progress=()
  telemetry=(--recoveries 30 --rounds 3); watch=(); live=(); fcost=(); burst=(); budget=()
fi
echo "== scan_throughput (rule engine vs grep -P)" >&2
"$PY" benchmarks/scan_throughput.py --json "${scan[@]}"
echo "== checkpoint_verify (quick/full vs cat, sha256sum)" >&2
"$PY" benchmarks/checkpoint_verify.py --json "${ckpt[@]}"
echo "== attribution_accuracy (real-log corpus vs the majority-class baseline)" >&2
"$PY" benchmarks/attribution_accuracy.py --json
echo "== agent_overhead (8 fake GPUs vs an idle interpreter)" >&2
"$PY" benchmarks/agent_overhead.py --json "${agent[@]}"
echo "== follower_scan (hang check on a 50,000-entry checkpoint dir vs the former full rescan)" >&2
"$PY" benchmarks/follower_scan.py --json "${follow[@]}"
echo "== fuzz_untrusted_input (>= 100,000 hostile inputs through the service loops)" >&2
"$PY" benchmarks/fuzz_untrusted_input.py --json "${fuzz[@]}"
echo "== progress_parse (progress rules vs the failure-rule scan of the same lines)" >&2
"$PY" benchmarks/progress_parse.py --json "${progress[@]}"
echo "== telemetry_overhead (a burst of recoveries, metrics+tracing on vs off)" >&2
"$PY" benchmarks/telemetry_overhead.py --json "${telemetry[@]}"
echo "== watcher_cost (50,000 jobs / 10,000 nodes: filtered compact reads vs full JSON)" >&2
"$PY" benchmarks/watcher_cost.py --json "${watch[@]}"
echo "== liveness_cost (10,000 agents heartbeating the collector vs a Temporal signal each)" >&2
"$PY" benchmarks/liveness_cost.py --json "${live[@]}"
echo "== follower_cost (1,000 followed jobs: adaptive looks on open files vs every file every 0.25 s)" >&2
"$PY" benchmarks/follower_cost.py --json "${fcost[@]}"
echo "== burst (simultaneous node losses, 3 reports each: the lean recovery vs the former one)" >&2
"$PY" benchmarks/burst.py --json "${burst[@]}"
echo "== drain_budget (burst of reserve_drain updates vs queries of the same workflow)" >&2
"$PY" benchmarks/drain_budget.py --json "${budget[@]}"
