#!/bin/bash
# install-triggers.sh - register permanent slurmctld triggers that push node events to a
# program (the resurrect Slurm watcher uses them instead of polling).
#
# Usage: install-triggers.sh [--state-dir DIR] --program PATH [--events down,drained,fail,up]
#   --program PATH   executable run by slurmctld (as the user who set the trigger, here root)
#                    with the node list as its argument, 5-11 s after the event
#   --events LIST    comma list of node events [down,drained]
# Triggers are `strigger --set --node --<event> --flags=perm --program=PATH`; they persist in
# the cluster's StateSaveLocation. Existing identical triggers are not added twice.
# --state-dir defaults to $LOCAL_SLURM_STATE_DIR or /tmp/resurrect-slurm.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

STATE_DIR=${LOCAL_SLURM_STATE_DIR:-/tmp/resurrect-slurm}
PROGRAM="" EVENTS=down,drained
while [ $# -gt 0 ]; do
  case $1 in
    --state-dir) STATE_DIR=$2; shift 2 ;;
    --program) PROGRAM=$2; shift 2 ;;
    --events) EVENTS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) ls_die "unknown option: $1" ;;
  esac
done
[ -n "$PROGRAM" ] || ls_die "--program PATH is required"
[[ $PROGRAM = /* && -x $PROGRAM ]] || ls_die "--program must be an absolute path to an executable"
ls_load_state "$STATE_DIR"
IFS=',' read -r -a events <<<"$EVENTS"
existing=$("$LS_BIN_DIR/strigger" --get 2>/dev/null || true)
for ev in "${events[@]}"; do
  case $ev in down|drained|fail|up|idle) ;; *) ls_die "unsupported event: $ev" ;; esac
  if awk -v p="$PROGRAM" -v e="$ev" '$2 == "node" && index($0, p) && tolower($0) ~ e' <<<"$existing" | grep -q .; then
    echo "trigger node/$ev -> $PROGRAM already set"
    continue
  fi
  "$LS_BIN_DIR/strigger" --set --node "--$ev" --flags=perm "--program=$PROGRAM"
  echo "trigger node/$ev -> $PROGRAM set"
done
"$LS_BIN_DIR/strigger" --get
