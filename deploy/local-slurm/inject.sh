#!/bin/bash
# inject.sh - fault injection on one virtual node of a cluster started by start.sh.
#
# Usage: inject.sh [--state-dir DIR] ACTION NODE [ARGS]
#   kill-node NODE     crash: SIGKILL the node's slurmd and every slurmstepd serving it with
#                      their whole process trees (all descendants, plus any process whose
#                      environment ties it to NODE of this cluster). Slurm marks the node DOWN
#                      (NOT_RESPONDING) after SlurmdTimeout.
#   freeze-node NODE   hang: SIGSTOP the node's slurmd (running tasks keep running)
#   thaw-node NODE     SIGCONT the node's slurmd
#   start-node NODE    (re)start the node's slurmd (after kill-node); no-op if it runs
# Hosts in namespaces only (start.sh --hosts netns; hosts.sh does the work):
#   partition NODE [both|in|out]  cut NODE from the controller, its processes alive
#   agent-partition NODE PORT     drop only NODE's datagrams to the liveness collector's PORT
#   worker-partition PORT         cut the worker's host from the controller's PORT (Temporal)
#   freeze-host NODE / thaw-host NODE   stop / resume every process of NODE's host at once
#   crash-host NODE               SIGKILL every process of NODE's host at once
#   lossy NODE LOSS_PCT [DELAY_MS]      lose (and delay) packets on NODE's link
#   heal NODE|all                 end every partition, cut and loss of NODE (or every host)
# --state-dir defaults to $LOCAL_SLURM_STATE_DIR or /tmp/resurrect-slurm.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

ls_state_dir_options "$@"; set -- "${LS_ARGS[@]}"
[ $# -ge 2 ] || ls_usage 2
ACTION=$1 NODE=$2
shift 2
ls_load_state "$STATE_DIR"
HOSTS_SH=("$HERE/hosts.sh" --state-dir "$STATE_DIR")
netns_only() {
  [ "${LS_HOSTS:-local}" = netns ] || ls_die "$ACTION needs hosts in namespaces (start.sh --hosts netns)"
}
case $ACTION in
  worker-partition) netns_only; exec "${HOSTS_SH[@]}" cut-worker "$NODE" ;;
  heal) netns_only; exec "${HOSTS_SH[@]}" heal "$NODE" ;;
  *) ;;
esac
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
    if [ "${LS_HOSTS:-local}" = netns ]; then
      "${HOSTS_SH[@]}" exec "$NODE" -- "$LS_SBIN_DIR/slurmd" -N "$NODE"
    else
      "$LS_SBIN_DIR/slurmd" -N "$NODE"
    fi
    for _ in $(seq 1 50); do [ -s "$PIDFILE" ] && break; sleep 0.1; done
    echo "started $NODE (slurmd $(cat "$PIDFILE" 2>/dev/null || echo ?))"
    ;;
  partition) netns_only; "${HOSTS_SH[@]}" partition "$NODE" "${1:-both}" ;;
  agent-partition) netns_only; [ $# -eq 1 ] || ls_usage 2; "${HOSTS_SH[@]}" cut-port "$NODE" "$1" udp ;;
  freeze-host) netns_only; "${HOSTS_SH[@]}" freeze "$NODE" ;;
  thaw-host) netns_only; "${HOSTS_SH[@]}" thaw "$NODE" ;;
  crash-host) netns_only; "${HOSTS_SH[@]}" crash "$NODE" ;;
  lossy) netns_only; [ $# -ge 1 ] || ls_usage 2; "${HOSTS_SH[@]}" lossy "$NODE" "$@" ;;
  *) ls_die "unknown action $ACTION (kill-node|freeze-node|thaw-node|start-node|partition|agent-partition|worker-partition|freeze-host|thaw-host|crash-host|lossy|heal)" ;;
esac
