#!/bin/bash
# restd.sh - start or stop the slurmrestd of a cluster started with `start.sh --restd`.
#
# Usage: restd.sh [--state-dir DIR] start|stop
#   start  slurmrestd (auth/jwt, openapi/slurmctld) as the cluster's RESTD_USER on the unix
#          socket RESTD_SOCKET and 127.0.0.1:RESTD_PORT (cluster.info); returns once the
#          socket is there. A running one is left as it is.
#   stop   stops it by pidfile (the cluster keeps running).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

STATE_DIR=${LOCAL_SLURM_STATE_DIR:-/tmp/resurrect-slurm}
while [ $# -gt 0 ]; do
  case $1 in
    --state-dir) STATE_DIR=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    start|stop) ACTION=$1; shift ;;
    *) ls_die "unknown argument: $1" ;;
  esac
done
[ -n "${ACTION:-}" ] || ls_die "usage: restd.sh [--state-dir DIR] start|stop"
ls_load_state "$STATE_DIR"
[ -n "${LS_RESTD_SOCKET:-}" ] || ls_die "$STATE_DIR was not started with --restd"
PIDFILE=$STATE_DIR/run/slurmrestd.pid
LOG=$STATE_DIR/log/slurmrestd.log

if [ "$ACTION" = stop ]; then
  ls_stop_pid "$(cat "$PIDFILE" 2>/dev/null || true)" slurmrestd 50
  rm -f "$PIDFILE" "$LS_RESTD_SOCKET"
  exit 0
fi

if ls_pid_is "$(cat "$PIDFILE" 2>/dev/null || true)" slurmrestd; then exit 0; fi
# the unix socket is made after the switch to RESTD_USER: in a folder of its own
dir=$(dirname "$LS_RESTD_SOCKET")
mkdir -p "$dir"; chown "$LS_RESTD_USER:" "$dir"; chmod 0755 "$dir"
rm -f "$LS_RESTD_SOCKET"
# only openapi/slurmctld: openapi/slurmdbd (loaded by default) fails without accounting.
# It serves as RESTD_USER (-u/-g); SLURM_JWT=daemon: it talks to slurmctld with each
# client's token (rest_auth/jwt), never with munge as itself.
# (hosts in namespaces: on the controller's host)
on_ctl=()
[ "${LS_HOSTS:-local}" = netns ] && on_ctl=("$HERE/hosts.sh" --state-dir "$STATE_DIR" exec ctl --)
SLURM_JWT=daemon "${on_ctl[@]}" setsid "$LS_SBIN_DIR/slurmrestd" -f "$LS_SLURM_CONF" -a rest_auth/jwt \
  -s openapi/slurmctld -u "$LS_RESTD_USER" -g "$LS_RESTD_USER" \
  "unix:$LS_RESTD_SOCKET" "127.0.0.1:$LS_RESTD_PORT" </dev/null >>"$LOG" 2>&1 &
pid=$!
echo "$pid" >"$PIDFILE"
for _ in $(seq 1 300); do
  [ -S "$LS_RESTD_SOCKET" ] && break
  # alive (its name is setsid's until the exec)
  kill -0 "$pid" 2>/dev/null || ls_die "slurmrestd exited: $(tail -5 "$LOG")"
  sleep 0.1
done
[ -S "$LS_RESTD_SOCKET" ] || ls_die "slurmrestd did not open $LS_RESTD_SOCKET"
ls_pid_is "$pid" slurmrestd || ls_die "pid $pid is not slurmrestd: $(tail -5 "$LOG")"
ls_log "slurmrestd started (pid $(cat "$PIDFILE"), $LS_RESTD_SOCKET, port $LS_RESTD_PORT)"
