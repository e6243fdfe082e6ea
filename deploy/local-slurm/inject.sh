#!/bin/bash
# inject.sh - fault injection on one virtual node of a cluster started by start.sh.
#
# Usage: inject.sh [--state-dir DIR] ACTION NODE
#   kill-node NODE     crash: SIGKILL the node's slurmd and every slurmstepd serving it with
#                      their whole process trees (all descendants, plus any process whose
#                      environment ties it to NODE of this cluster). Slurm marks the node DOWN
#                      (NOT_RESPONDING) after SlurmdTimeout.
#   freeze-node NODE   hang: SIGSTOP the node's slurmd (running tasks keep running)
#   thaw-node NODE     SIGCONT the node's slurmd
#   start-node NODE    (re)start the node's slurmd (after kill-node); no-op if it runs
# --state-dir defaults to $LOCAL_SLURM_STATE_DIR or /tmp/resurrect-slurm.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

STATE_DIR=${LOCAL_SLURM_STATE_DIR:-/tmp/resurrect-slurm}
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --state-dir) STATE_DIR=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "unknown option: $1" >&2; usage 2 ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || usage 2
ACTION=$1 NODE=$2
ls_load_state "$STATE_DIR"
NODE_RE="^${LS_NODE_PREFIX}[0-9]+\$"
if ! [[ $NODE =~ $NODE_RE ]] || [ "${NODE#"$LS_NODE_PREFIX"}" -lt 1 ] \
  || [ "${NODE#"$LS_NODE_PREFIX"}" -gt "$LS_NODES" ]; then
  ls_die "no node $NODE in $LS_CLUSTER_NAME"
fi
PIDFILE=$STATE_DIR/run/slurmd-$NODE.pid
slurmd_pid() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if ls_pid_is "$pid" slurmd; then echo "$pid"; fi
}

case $ACTION in
  kill-node)
    LS_KILLED=""
    ls_kill_node_tree "$STATE_DIR/spool/$NODE" "$NODE" "$LS_SLURM_CONF" "$(slurmd_pid)"
    echo "killed $NODE: ${LS_KILLED:-nothing was running}"
    ;;
  freeze-node)
    pid=$(slurmd_pid); [ -n "$pid" ] || ls_die "slurmd of $NODE is not running"
    kill -STOP "$pid"; echo "froze $NODE (slurmd $pid)"
    ;;
  thaw-node)
    pid=$(slurmd_pid); [ -n "$pid" ] || ls_die "slurmd of $NODE is not running"
    kill -CONT "$pid"; echo "thawed $NODE (slurmd $pid)"
    ;;
  start-node)
    pid=$(slurmd_pid)
    if [ -n "$pid" ]; then kill -CONT "$pid"; echo "$NODE already running (slurmd $pid)"; exit 0; fi
    "$LS_SBIN_DIR/slurmd" -N "$NODE"
    for _ in $(seq 1 50); do [ -s "$PIDFILE" ] && break; sleep 0.1; done
    echo "started $NODE (slurmd $(cat "$PIDFILE" 2>/dev/null || echo ?))"
    ;;
  *) ls_die "unknown action $ACTION (kill-node|freeze-node|thaw-node|start-node)" ;;
esac
