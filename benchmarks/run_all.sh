#!/usr/bin/env bash
# run_all.sh - every benchmark, one JSON line each, each against a baseline measured in the
# same run (grep, cat/sha256sum, an idle interpreter, the former code paths). Takes about
# 13 minutes on 2 cores and needs ~9 GB of free space in $TMPDIR for the checkpoint benchmark.
#   benchmarks/run_all.sh [--quick] [--no-record] [NAME...]
# --quick: smaller inputs, for a smoke run; NAME...: only those benchmarks. The lines also go
# to the performance record, benchmarks/record/<UTC time>-<commit>[-quick].jsonl (each with
# "recorded": when, which commit, the arguments), unless --no-record: commit that file, and
# benchmarks/compare.py compares later runs with it (benchmarks/record_table.py puts it in the
# README's table).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
quick=false
record=true
only=()
for arg in "$@"; do
  case "$arg" in
    --quick) quick=true ;;
    --no-record) record=false ;;
    *) only+=("$arg") ;;
  esac
done
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit+changes"
record_file=/dev/null
if $record; then
  mkdir -p benchmarks/record
  # RECORD_FILE: add to that record instead (e.g. a quick burst beside a full run)
  suffix=""
  if $quick; then suffix="-quick"; fi
  record_file=${RECORD_FILE:-"benchmarks/record/$(date -u +%Y%m%dT%H%M%SZ)-${commit}${suffix}.jsonl"}
  echo "== recording to $record_file" >&2
fi

# One row a benchmark, in the order they run: script | --quick arguments | full arguments |
# what it measures, against what. Arguments are split on spaces.
BENCHMARKS=(
  "scan_throughput | --lines 200000 | | rule engine vs grep -P"
  "checkpoint_verify | --size-gb 0.5 | --size-gb 4 | quick/full vs cat, sha256sum"
  "attribution_accuracy | | | real-log corpus vs the majority-class baseline"
  "agent_overhead | --duration 10 | --duration 60 | 8 fake GPUs vs an idle interpreter"
  "follower_scan | --window 120 --save-entries 20000 | | hang check on a 50,000-entry checkpoint dir vs the former full rescan; a look at a 100,000-entry save vs listing it every look"
  "fuzz_untrusted_input | --inputs 10000 --parser-inputs 2000 | | >= 100,000 hostile inputs through the service loops, then 20,000 per issue-20 parser (Flight Recorder JSON/pickle/helper, py-spy text, hold marks, liveness datagrams), one line each"
  "progress_parse | --lines 50000 | | progress rules vs the failure-rule scan of the same lines"
  "telemetry_overhead | --recoveries 10 --rounds 1 | --recoveries 30 --rounds 3 | a burst of recoveries, metrics+tracing on vs off"
  "watcher_cost | --jobs 10000 --nodes 2000 --running 400 | | 50,000 jobs / 10,000 nodes: filtered compact reads vs full JSON"
  "rest_watcher_cost | --small 500 --large 5000 --full-polls 1 | | slurmrestd view at 1,000 and 20,000 jobs: job states + jobs in view by id, node snapshot vs full jobs/ + nodes/ reads"
  "liveness_cost | --nodes 2000 --duration 24 | | 10,000 agents heartbeating the collector vs a Temporal signal each"
  "follower_cost | --jobs 300 --duration 5 --flood-rounds 2 | | 1,000 followed jobs: adaptive looks on open files vs every file every 0.25 s; a good job beside flooding jobs, per-job shares vs the former per-line follower"
  "burst | --jobs 200 --skip-baseline | --jobs 1000 | 1,000 simultaneous node losses, 3 reports each: the default vs signalled reports on one task queue, and vs an empty workflow (--quick: 200, the size .ci/run checks)"
  "temporal_floor | --jobs 100 | | the ceiling of the embedded server + SDK: empty, local-activity and activity-task workflows, 3 signal-starts each"
  "drain_budget | --recoveries 50 | | burst of reserve_drains updates vs queries of the same workflow"
  "hang_culprit_record | --records 5000 --hangs 4 | | 40 hangs naming 256 invented nodes against a full record: appended lines vs the former whole-file rewrite"
  "simulate_cost | --replications 1 | | what-if simulator: a month of 1,000 nodes (3 scenarios x 8 replications) vs a month of 100 nodes"
  "chaos_soak | --minutes 4 --seed 1 | --minutes 10 --seed 1 | live 6-node cluster, seeded overlapping faults in jobs, nodes and resurrect's processes: invariant violations, detect/recover p50/p95, goodput of faulted jobs vs fault-free ones (root, Slurm, Temporal, torch)"
)

# Each JSON line as printed, with what was run added ("recorded"), into the record.
tag='import json, sys, datetime
for text in sys.stdin:
    if not text.startswith("{"): continue
    line = json.loads(text)
    line["recorded"] = {"at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                        "commit": sys.argv[1], "args": sys.argv[2].strip(), "quick": sys.argv[3] == "true"}
    print(json.dumps(line), flush=True)'

for row in "${BENCHMARKS[@]}"; do
  IFS='|' read -r name quick_args full_args what <<<"$row"
  name=${name//[[:space:]]/}
  if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then continue; fi
  if $quick; then args=$quick_args; else args=$full_args; fi
  echo "== $name (${what# })" >&2
  # shellcheck disable=SC2086  # the arguments are words, split on purpose
  "$PY" "benchmarks/$name.py" --json $args | "$PY" -c "$tag" "$commit" "$args" "$quick" \
    | tee -a "$record_file"
done
