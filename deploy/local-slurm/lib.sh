#!/bin/bash
# lib.sh - helpers shared by the local-slurm scripts (sourced, never run).
# Nothing here starts or stops anything by itself.

# log MSG... : timestamped progress line on stderr (seconds since the script started).
LS_T0=${EPOCHREALTIME:-0}
ls_log() {
  local now=${EPOCHREALTIME:-0}
  printf '[local-slurm %7.2fs] %s\n' "$(awk -v a="$LS_T0" -v b="$now" 'BEGIN{print b-a}')" "$*" >&2
}

ls_die() { echo "local-slurm: error: $*" >&2; exit 1; }

# ls_usage [STATUS] : print the running script's header comment (its usage), exit STATUS.
ls_usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit "${1:-0}"; }

# ls_state_dir_options ARGS... : the leading options of a script called as
# `[--state-dir DIR] ACTION [ARGS]`: sets STATE_DIR (default $LOCAL_SLURM_STATE_DIR, else
# /tmp/resurrect-slurm; made absolute) and LS_ARGS (the arguments after the options).
# -h/--help prints the usage; an unknown option is an error. Call it as
#   ls_state_dir_options "$@"; set -- "${LS_ARGS[@]}"
ls_state_dir_options() {
  STATE_DIR=${LOCAL_SLURM_STATE_DIR:-/tmp/resurrect-slurm}
  while [ $# -gt 0 ]; do
    case $1 in
      --state-dir) [ $# -ge 2 ] || ls_usage 2; STATE_DIR=$2; shift 2 ;;
      -h|--help) ls_usage 0 ;;
      -*) echo "unknown option: $1" >&2; ls_usage 2 ;;
      *) break ;;
    esac
  done
  [[ $STATE_DIR = /* ]] || STATE_DIR=$PWD/$STATE_DIR
  LS_ARGS=("$@")
}

# ls_load_state DIR : read DIR/cluster.info (written by start.sh) into LS_* variables.
ls_load_state() {
  local dir=$1 key val
  [ -r "$dir/cluster.info" ] || ls_die "$dir/cluster.info not found (was start.sh run with --state-dir $dir?)"
  while IFS='=' read -r key val; do
    case $key in
      STATE_DIR|CLUSTER_NAME|NODES|NODE_PREFIX|CTLD_PORT|SLURMD_BASE_PORT|SLURM_CONF|SBIN_DIR|BIN_DIR|SLURM_VERSION|MUNGE_SOCKET|DEMO_USER|RESTD_USER|RESTD_PORT|RESTD_URL|RESTD_SOCKET|RESTD_TOKEN_FILE|HOSTS)
        printf -v "LS_$key" '%s' "$val" ;;
      *) ;;
    esac
  done <"$dir/cluster.info"
  export SLURM_CONF=$LS_SLURM_CONF
}

# ls_pid_is PID COMM : true when PID is alive (not a zombie) and its comm is COMM.
ls_pid_is() {
  local pid=$1 want=$2
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ -d "/proc/$pid" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$want" ] || return 1
  ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

# ls_stop_pid PID COMM [WAIT_TENTHS] : SIGTERM, wait, then SIGKILL; skips PIDs that are not COMM.
ls_stop_pid() {
  local pid=$1 want=$2 tenths=${3:-100} i
  ls_pid_is "$pid" "$want" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < tenths; i++)); do
    ls_pid_is "$pid" "$want" || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  echo "local-slurm: killed -9 $want $pid" >&2
}

# ls_stepd_pids SPOOL_NODE_DIR : PIDs of slurmstepd processes serving the node whose spool dir
# is given. A slurmstepd listens on a unix socket <spool>/<node>_<job>.<step>; we map the
# socket paths in /proc/net/unix to inodes and the inodes to the slurmstepd that holds them.
ls_stepd_pids() {
  local spool=$1 inodes pid fd link
  inodes=$(awk -v d="$spool/" 'index($8, d) == 1 { print $7 }' /proc/net/unix 2>/dev/null | sort -u)
  [ -n "$inodes" ] || return 0
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    for fd in /proc/"$pid"/fd/*; do
      link=$(readlink "$fd" 2>/dev/null) || continue
      case $link in
        socket:\[*\])
          link=${link#socket:[}; link=${link%]}
          if grep -qx "$link" <<<"$inodes"; then echo "$pid"; break; fi ;;
        *) ;;
      esac
    done
  done
}

# ls_descendants PID... : every descendant (children, grandchildren, ...) of the given PIDs.
ls_descendants() {
  local -A kids=()
  local pid ppid cur queue=("$@")
  while read -r pid ppid; do kids[$ppid]+="$pid "; done < <(ps -e -o pid=,ppid=)
  while [ ${#queue[@]} -gt 0 ]; do
    cur=${queue[0]}; queue=("${queue[@]:1}")
    for pid in ${kids[$cur]:-}; do echo "$pid"; queue+=("$pid"); done
  done
}

# ls_node_env_pids NODE CONF : processes whose environment says they run on NODE of the
# cluster configured by CONF (catches job tasks that escaped the slurmstepd tree by double fork).
ls_node_env_pids() {
  local node=$1 conf=$2 f pid
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}; pid=${pid%/environ}
    [ "$pid" = "$$" ] && continue
    if grep -qzx "SLURMD_NODENAME=$node" "$f" 2>/dev/null \
      && grep -qzx "SLURM_CONF=$conf" "$f" 2>/dev/null; then
      echo "$pid"
    fi
  done
}

# ls_kill_node_tree SPOOL_NODE_DIR NODE CONF SLURMD_PID : SIGSTOP then SIGKILL slurmd, every
# slurmstepd of the node and all their descendants (stopping first so nothing forks meanwhile).
ls_kill_node_tree() {
  local spool=$1 node=$2 conf=$3 slurmd_pid=$4 stepds all pass
  for pass in 1 2; do
    stepds=$(ls_stepd_pids "$spool")
    all=$( { [ -n "$slurmd_pid" ] && echo "$slurmd_pid"; echo "$stepds";
             # shellcheck disable=SC2086
             [ -n "$stepds" ] && ls_descendants $stepds;
             ls_node_env_pids "$node" "$conf"; } | { grep -E '^[0-9]+$' || true; } \
             | { grep -vx "$$" || true; } | sort -un | tr '\n' ' ')
    [ -n "${all// }" ] || break
    # shellcheck disable=SC2086
    kill -STOP $all 2>/dev/null || true
    [ "$pass" = 1 ] && LS_KILLED="$all" || LS_KILLED="$LS_KILLED $all"
    # shellcheck disable=SC2086
    kill -KILL $all 2>/dev/null || true
    slurmd_pid=""
  done
}
