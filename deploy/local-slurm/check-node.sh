#!/bin/bash
# check-node.sh - the health check of one virtual node of a cluster started by start.sh:
# what `resurrect agent check` is on a real GPU node, for the local cluster (which has no
# GPUs). Exit 0 when the node's slurmd runs and is not stopped, 1 otherwise, with a line
# saying why; on hosts in namespaces (start.sh --hosts netns) also that its host is not frozen
# and that its slurmd answers from the controller's host (a cut link fails it). Used as isolation.health_check_argv by the return-to-service tests:
#   [deploy/local-slurm/check-node.sh, --state-dir, DIR, "{node}"]
# Usage: check-node.sh [--state-dir DIR] NODE     (--help: this text)
set -euo pipefail
case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

STATE_DIR=${LOCAL_SLURM_STATE_DIR:-/tmp/resurrect-slurm}
if [ "${1:-}" = "--state-dir" ]; then STATE_DIR=$2; shift 2; fi
[ $# -eq 1 ] || { echo "usage: check-node.sh [--state-dir DIR] NODE" >&2; exit 2; }
NODE=$1
ls_load_state "$STATE_DIR"
NODE_RE="^${LS_NODE_PREFIX}[0-9]+\$"
[[ $NODE =~ $NODE_RE ]] || { echo "unhealthy: no node $NODE in $LS_CLUSTER_NAME"; exit 1; }
pid=$(cat "$STATE_DIR/run/slurmd-$NODE.pid" 2>/dev/null || true)
if ! ls_pid_is "$pid" slurmd; then
  echo "unhealthy: slurmd of $NODE is not running"; exit 1
fi
if grep -q '^State:[[:space:]]*T' "/proc/$pid/status" 2>/dev/null; then
  echo "unhealthy: slurmd of $NODE is stopped"; exit 1
fi
if [ "${LS_HOSTS:-local}" = netns ]; then
  # a host in its namespace: not frozen, and its slurmd reachable from the controller's host
  addr=$(awk -v h="$NODE" '$1 == h {print $3}' "$STATE_DIR/hosts.info")
  port=$(sed -n 's/^SlurmdPort=//p' "$LS_SLURM_CONF")
  if ! "$HERE/hosts.sh" --state-dir "$STATE_DIR" exec ctl -- \
      timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' sh "$addr" "$port" 2>/dev/null; then
    echo "unhealthy: $NODE ($addr) does not answer the controller on port $port"; exit 1
  fi
  if [ "$("$HERE/hosts.sh" --state-dir "$STATE_DIR" state "$NODE")" = FROZEN ]; then
    echo "unhealthy: the host of $NODE is frozen"; exit 1
  fi
fi
echo "healthy: slurmd of $NODE runs (pid $pid)"
