#!/usr/bin/env bash
# ci_burst.sh - the performance check .ci/run makes after the suite: a short burst (200 jobs
# x 3 reports, benchmarks/burst.py) compared with the committed performance record
# (benchmarks/compare.py against benchmarks/record/). Every figure more than 20 % worse is
# named; the check fails only on one more than 3x worse among those a busy machine does not
# move by itself: the rate against the same run's empty workflow, what each recovery costs
# (events, CPU, Temporal and scheduler calls), figures not read, cancelled assessments (the
# regression's symptom; a quick attempt of a later step cut on a busy machine gives way to an
# activity task by design, and is only named), and the checks (each job requeued once, no
# drain twice). The regression it is there for was 9x.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
run=$(mktemp --suffix=.jsonl)
trap 'rm -f "$run"' EXIT
echo "== performance: burst of 200 x 3 against the record" >&2
"$PY" benchmarks/burst.py --json --jobs 200 --skip-baseline >"$run"
"$PY" benchmarks/compare.py "$run" --fail-over 3 \
  --fail-on 'vs_empty|per_recovery|records_not_read|advice_not_computed|cancelled recovery\.assess|requeued_exactly_once|drained_twice'
