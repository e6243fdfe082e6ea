#!/bin/bash
# stop.sh - stop what start.sh started in one state dir, by pidfile only: job step trees,
# the slurmd of every node, slurmrestd, slurmctld and the cluster's private munged. Others and
# any system Slurm/munge on the host are left alone. Packages stay installed.
#
# Hosts in namespaces (start.sh --hosts netns): every process still on a node's or the
# worker's host is killed, and the namespaces are deleted (hosts.sh down).
#
# Usage: stop.sh [--state-dir DIR] [--purge] [--keep-hosts]
#   --state-dir DIR   the cluster to stop [$LOCAL_SLURM_STATE_DIR or /tmp/resurrect-slurm]
#   --purge           also delete DIR
#   --keep-hosts      leave the namespaces (start.sh restarting a cluster in DIR)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

STATE_DIR=${LOCAL_SLURM_STATE_DIR:-/tmp/resurrect-slurm}
PURGE=0
KEEP_HOSTS=0
while [ $# -gt 0 ]; do
  case $1 in
    --state-dir) STATE_DIR=$2; shift 2 ;;
    --purge) PURGE=1; shift ;;
    --keep-hosts) KEEP_HOSTS=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) ls_die "unknown option: $1" ;;
  esac
done
if [ ! -r "$STATE_DIR/cluster.info" ]; then
  echo "nothing to stop in $STATE_DIR"
  [ "$PURGE" = 1 ] && rm -rf "$STATE_DIR"
  exit 0
fi
ls_load_state "$STATE_DIR"

for ((i = 1; i <= LS_NODES; i++)); do
  node=$LS_NODE_PREFIX$i
  pidfile=$STATE_DIR/run/slurmd-$node.pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  ls_pid_is "$pid" slurmd || pid=""
  # job steps first: their tasks would otherwise outlive the cluster
  ls_kill_node_tree "$STATE_DIR/spool/$node" "$node" "$LS_SLURM_CONF" ""
  ls_stop_pid "$pid" slurmd 50
  rm -f "$pidfile"
done
ls_stop_pid "$(cat "$STATE_DIR/run/slurmrestd.pid" 2>/dev/null || true)" slurmrestd 50
rm -f "$STATE_DIR/run/slurmrestd.pid"
ls_stop_pid "$(cat "$STATE_DIR/run/slurmctld.pid" 2>/dev/null || true)" slurmctld 100
rm -f "$STATE_DIR/run/slurmctld.pid"
ls_stop_pid "$(cat "$STATE_DIR/munge/munged.pid" 2>/dev/null || true)" munged 50
rm -f "$STATE_DIR/munge/munged.pid"
if [ "${LS_HOSTS:-local}" = netns ] && [ -r "$STATE_DIR/hosts.info" ]; then
  HOSTS_SH=("$HERE/hosts.sh" --state-dir "$STATE_DIR")
  for host in $(awk '$1 != "ID" && $1 != "ctl" {print $1}' "$STATE_DIR/hosts.info"); do
    "${HOSTS_SH[@]}" heal "$host" >/dev/null 2>&1 || true
    "${HOSTS_SH[@]}" thaw "$host" >/dev/null 2>&1 || true
    pids=$("${HOSTS_SH[@]}" pids "$host" | tr '\n' ' ' || true)
    # shellcheck disable=SC2086
    [ -z "${pids// }" ] || kill -KILL $pids 2>/dev/null || true
  done
  [ "$KEEP_HOSTS" = 1 ] || "${HOSTS_SH[@]}" down
fi
if [ "$PURGE" = 1 ]; then rm -rf "$STATE_DIR"; fi
echo "stopped cluster $LS_CLUSTER_NAME ($STATE_DIR)"
