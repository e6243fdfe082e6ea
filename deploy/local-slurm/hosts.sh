#!/bin/bash
# hosts.sh - the hosts of a local cluster as Linux namespaces (start.sh --hosts netns).
#
# Each compute node is its own network and UTS namespace (its hostname, its address, its
# slurmd and agent); the controller (slurmctld, slurmrestd, Temporal, resurrect's watcher) is
# one more network and UTS namespace (hostname `controller`), holding the bridge `br0` every node's veth pair joins; resurrect's
# worker gets a host of its own (so the worker <-> Temporal link can be cut alone). Addresses
# come from 198.18.0.0/24 (RFC 2544 benchmarking space, never routed), exist only inside these
# namespaces and are never visible from the machine's own network: controller 198.18.0.1,
# worker 198.18.0.2, node K 198.18.0.(10+K). Names derive from the state dir, so clusters side
# by side never collide: namespaces <id>-ctl, <id>-worker, <id>-<node>; UTS namespaces pinned
# under /run/resurrect-hosts/<id>/; each host's processes in the freezer cgroup
# /sys/fs/cgroup/freezer/resurrect-<id>/<host> (v1) when the kernel has one. Processes share
# the file system (as a shared parallel file system).
#
# Usage: hosts.sh [--state-dir DIR] ACTION [ARGS]
#   up --nodes N [--node-prefix P]   create every host (idempotent for the controller)
#   down                             delete every host of DIR (their processes must be gone)
#   check                            exit 0 when namespaces work here; else say what is missing
#   exec HOST -- ARGV...             run ARGV on HOST (ctl, worker or a node), in its cgroup
#   pids HOST                        every process on HOST (by its network namespace)
#   partition NODE [both|in|out]     cut NODE from the controller: both ways, only what the
#                                    controller sends (in) or only what NODE sends (out); its
#                                    processes live on and still reach the other nodes
#   cut-port NODE PORT [udp|tcp]     drop NODE's packets to the controller's PORT only (the
#                                    liveness collector's: an agent partition)
#   cut-worker PORT                  drop the worker host's packets to the controller's PORT
#                                    (Temporal's: a worker <-> Temporal partition)
#   lossy HOST LOSS_PCT [DELAY_MS]   lose (and delay) packets on HOST's link: tc netem where
#                                    the kernel has it, else nftables' random loss (no delay)
#   freeze HOST | thaw HOST          stop / resume every process of HOST at once (freezer
#                                    cgroup; SIGSTOP/SIGCONT of each process without one)
#   crash HOST                       SIGKILL every process of HOST at once
#   heal HOST|all                    undo every partition, cut and loss on HOST (or all hosts)
#   state HOST                       FROZEN, THAWED (or FREEZING) from HOST's freezer cgroup
# Needs root, iproute2 (ip, tc), nftables (nft) and util-linux (nsenter, unshare).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

ls_state_dir_options "$@"; set -- "${LS_ARGS[@]}"
[ $# -ge 1 ] || ls_usage 2
ACTION=$1; shift

SUBNET=198.18.0
CTL_ADDR=$SUBNET.1
WORKER_ADDR=$SUBNET.2
ID=r$(printf '%s' "$STATE_DIR" | sha1sum | cut -c1-8)
PIN_DIR=/run/resurrect-hosts/$ID
FREEZER_ROOT=/sys/fs/cgroup/freezer
CGROUP_DIR=$FREEZER_ROOT/resurrect-$ID
INFO=$STATE_DIR/hosts.info

ns_of() { echo "$ID-$1"; }  # HOST -> its network namespace's name

# hosts_check: why namespaces cannot be used here (named package or kernel capability)
hosts_check() {
  [ "$(id -u)" = 0 ] || ls_die "hosts in namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
  command -v ip >/dev/null || ls_die "ip not found: apt-get install iproute2"
  command -v tc >/dev/null || ls_die "tc not found: apt-get install iproute2"
  command -v nft >/dev/null || ls_die "nft not found: apt-get install nftables"
  command -v nsenter >/dev/null && command -v unshare >/dev/null \
    || ls_die "nsenter/unshare not found: apt-get install util-linux"
  [ -e /proc/self/ns/net ] && [ -e /proc/self/ns/uts ] \
    || ls_die "this kernel has no network/UTS namespaces (CONFIG_NET_NS, CONFIG_UTS_NS)"
  local probe=$ID-probe$$
  ip netns del "$probe" 2>/dev/null || true
  ip netns add "$probe" 2>/dev/null \
    || ls_die "cannot create a network namespace (kernel CONFIG_NET_NS, or no CAP_SYS_ADMIN here)"
  local ok=1 why=""
  if ! ip -n "$probe" link add br0 type bridge 2>/dev/null; then
    ok=0; why="no bridge devices (kernel CONFIG_BRIDGE)"
  elif ! ip -n "$probe" link add v0 type veth peer name v1 2>/dev/null; then
    ok=0; why="no veth pairs (kernel CONFIG_VETH)"
  elif ! ip netns exec "$probe" nft add table inet resurrect_probe 2>/dev/null; then
    ok=0; why="nftables does not work in a namespace (kernel CONFIG_NF_TABLES, CONFIG_NFT_NUMGEN)"
  fi
  ip netns del "$probe" 2>/dev/null || true
  [ "$ok" = 1 ] || ls_die "$why"
}

# the nft table every host gets: faults add rules to its chains, heal flushes them
nft_base() {
  ip netns exec "$1" nft -f - <<'NFT'
table inet resurrect {
  chain input { type filter hook input priority 0; policy accept; }
  chain output { type filter hook output priority 0; policy accept; }
}
NFT
}

add_host() {  # NAME ADDR [UTS]: a namespace with a veth on the controller's bridge
  local name=$1 addr=$2 uts=${3:-} ns peer
  ns=$(ns_of "$name")
  peer=h$(( $(grep -c . "$INFO" 2>/dev/null || echo 0) ))
  ip netns del "$ns" 2>/dev/null || true
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$(ns_of ctl)" link del "$peer" 2>/dev/null || true
  ip -n "$(ns_of ctl)" link add "$peer" type veth peer name eth0 netns "$ns"
  ip -n "$(ns_of ctl)" link set "$peer" master br0 up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  nft_base "$ns"
  if [ -n "$uts" ]; then
    rm -f "$PIN_DIR/uts-$name"; touch "$PIN_DIR/uts-$name"
    unshare --uts="$PIN_DIR/uts-$name" hostname "$name"
  fi
  freezer_make "$name"
  echo "$name $ns $addr $peer" >>"$INFO"
}

freezer_make() {
  [ -d "$FREEZER_ROOT" ] || return 0
  mkdir -p "$CGROUP_DIR/$1"
}

hosts_up() {
  local nodes=4 prefix=node k
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes=$2; shift 2 ;;
      --node-prefix) prefix=$2; shift 2 ;;
      *) ls_die "up: unknown option $1" ;;
    esac
  done
  [[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 200 ] \
    || ls_die "--nodes must be 1..200 with --hosts netns"
  hosts_check
  mkdir -p "$STATE_DIR" "$PIN_DIR"
  local ctl
  ctl=$(ns_of ctl)
  # the controller's namespace is kept when it is there: a driver may already live in it
  if ! ip netns list | awk '{print $1}' | grep -qx "$ctl"; then
    ip netns add "$ctl"
    ip -n "$ctl" link set lo up
    ip -n "$ctl" link add br0 type bridge
    ip -n "$ctl" addr add "$CTL_ADDR/24" dev br0
    ip -n "$ctl" link set br0 up
    nft_base "$ctl"
  fi
  if [ ! -e "$PIN_DIR/uts-ctl" ]; then
    touch "$PIN_DIR/uts-ctl"
    unshare --uts="$PIN_DIR/uts-ctl" hostname controller
  fi
  freezer_make ctl
  hosts_down_nodes
  { echo "ID $ID"; echo "ctl $ctl $CTL_ADDR -"; } >"$INFO"
  add_host worker "$WORKER_ADDR"
  for ((k = 1; k <= nodes; k++)); do add_host "$prefix$k" "$SUBNET.$((10 + k))" uts; done
  ls_log "hosts up: controller $CTL_ADDR ($ctl), worker $WORKER_ADDR, $nodes nodes $SUBNET.11-$((10 + nodes))"
}

# every host but the controller's namespace (start.sh's restart keeps a driver inside it)
hosts_down_nodes() {
  local name ns
  [ -r "$INFO" ] || return 0
  while read -r name ns _ _; do
    [ "$name" = ID ] || [ "$name" = ctl ] && continue
    ip netns del "$ns" 2>/dev/null || true
    if [ -e "$PIN_DIR/uts-$name" ]; then umount "$PIN_DIR/uts-$name" 2>/dev/null || true; rm -f "$PIN_DIR/uts-$name"; fi
    rmdir "$CGROUP_DIR/$name" 2>/dev/null || true
  done <"$INFO"
}

hosts_down() {
  hosts_down_nodes
  ip netns del "$(ns_of ctl)" 2>/dev/null || true
  if [ -e "$PIN_DIR/uts-ctl" ]; then umount "$PIN_DIR/uts-ctl" 2>/dev/null || true; rm -f "$PIN_DIR/uts-ctl"; fi
  rmdir "$CGROUP_DIR/ctl" "$CGROUP_DIR" 2>/dev/null || true
  rmdir "$PIN_DIR" 2>/dev/null || true
  rm -f "$INFO"
}

host_field() {  # HOST FIELD(2=ns 3=addr 4=peer)
  local f
  [ -r "$INFO" ] || ls_die "$INFO not found: no hosts in namespaces for $STATE_DIR"
  f=$(awk -v h="$1" -v n="$2" '$1 == h { print $n }' "$INFO")
  [ -n "$f" ] || ls_die "no host $1 in $STATE_DIR (hosts: $(awk '$1 != "ID" {printf "%s ", $1}' "$INFO"))"
  echo "$f"
}

host_exec() {
  local host=$1 ns uts=() cg=""
  shift
  [ "${1:-}" = -- ] && shift
  [ $# -ge 1 ] || ls_die "exec: no command"
  ns=$(host_field "$host" 2)
  [ -e "$PIN_DIR/uts-$host" ] && uts=(--uts="$PIN_DIR/uts-$host")
  [ -d "$CGROUP_DIR/$host" ] && cg=$CGROUP_DIR/$host/cgroup.procs
  # shellcheck disable=SC2016
  exec nsenter --net="/run/netns/$ns" "${uts[@]}" -- \
    /bin/sh -c 'if [ -n "$1" ]; then echo $$ >"$1"; fi; shift; exec "$@"' sh "$cg" "$@"
}

host_pids() {  # every process whose network namespace is HOST's (the kernel's word)
  local ns inode
  ns=$(host_field "$1" 2)
  inode=$(stat -L -c %i "/run/netns/$ns")
  # one pass: /proc/PID/ns/net is a link to "net:[INODE]"
  # (processes that end during the walk make find complain: not a failure)
  { find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/net' -lname "net:\[$inode\]" \
      2>/dev/null || true; } | cut -d/ -f3
  return 0
}

nft_in() { ip netns exec "$(host_field "$1" 2)" nft "${@:2}"; }

host_freeze() {  # HOST FROZEN|THAWED
  local host=$1 state=$2 sig pids
  if [ -d "$CGROUP_DIR/$host" ]; then
    # stragglers that entered the namespace without the cgroup join it first
    for pid in $(host_pids "$host"); do echo "$pid" >"$CGROUP_DIR/$host/cgroup.procs" 2>/dev/null || true; done
    echo "$state" >"$CGROUP_DIR/$host/freezer.state"
    # the freezer reports FREEZING until every task has stopped: return once it has
    local waited=0
    while [ "$state" = FROZEN ] && [ "$(cat "$CGROUP_DIR/$host/freezer.state")" != FROZEN ]; do
      [ "$waited" -lt 100 ] || ls_die "host $host still $(cat "$CGROUP_DIR/$host/freezer.state") after 10 s"
      sleep 0.1; waited=$((waited + 1))
    done
    return 0
  fi
  sig=STOP; [ "$state" = THAWED ] && sig=CONT
  pids=$(host_pids "$host" | tr '\n' ' ')
  # shellcheck disable=SC2086
  [ -z "${pids// }" ] || kill -"$sig" $pids 2>/dev/null || true
}

case $ACTION in
  check) hosts_check; echo "namespaces usable" ;;
  up) hosts_up "$@" ;;
  down) hosts_down ;;
  exec) [ $# -ge 2 ] || ls_usage 2; host_exec "$@" ;;
  pids) [ $# -eq 1 ] || ls_usage 2; host_pids "$1" ;;
  partition)
    [ $# -ge 1 ] || ls_usage 2
    way=${2:-both}
    case $way in both|in|out) ;; *) ls_die "partition: way must be both, in or out" ;; esac
    if [ "$way" != out ]; then nft_in "$1" add rule inet resurrect input ip saddr "$CTL_ADDR" drop; fi
    if [ "$way" != in ]; then nft_in "$1" add rule inet resurrect output ip daddr "$CTL_ADDR" drop; fi
    echo "partitioned $1 from the controller ($way)" ;;
  cut-port)
    [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || ls_usage 2
    proto=${3:-udp}; [[ $proto =~ ^(udp|tcp)$ ]] || ls_die "cut-port: udp or tcp"
    nft_in "$1" add rule inet resurrect output ip daddr "$CTL_ADDR" "$proto" dport "$2" drop
    echo "cut $1 -> controller $proto/$2" ;;
  cut-worker)
    [ $# -eq 1 ] && [[ $1 =~ ^[0-9]+$ ]] || ls_usage 2
    nft_in worker add rule inet resurrect output ip daddr "$CTL_ADDR" tcp dport "$1" drop
    nft_in worker add rule inet resurrect input ip saddr "$CTL_ADDR" tcp sport "$1" drop
    echo "cut worker <-> controller tcp/$1" ;;
  lossy)
    [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -le 100 ] || ls_usage 2
    delay=${3:-0}; [[ $delay =~ ^[0-9]+$ ]] || ls_usage 2
    ns=$(host_field "$1" 2)
    if ip netns exec "$ns" tc qdisc replace dev eth0 root netem loss "$2%" delay "${delay}ms" 2>/dev/null; then
      echo "lossy $1: netem loss $2% delay ${delay}ms"
    else
      [ "$delay" = 0 ] || ls_die "lossy: a delay needs tc netem (kernel module sch_netem), not here"
      nft_in "$1" add rule inet resurrect output oifname eth0 numgen random mod 100 '<' "$2" drop
      nft_in "$1" add rule inet resurrect input iifname eth0 numgen random mod 100 '<' "$2" drop
      echo "lossy $1: nftables random loss $2% each way (no sch_netem in this kernel)"
    fi ;;
  freeze) [ $# -eq 1 ] || ls_usage 2; host_freeze "$1" FROZEN; echo "froze host $1" ;;
  state)
    [ $# -eq 1 ] || ls_usage 2
    host_field "$1" 2 >/dev/null
    cat "$CGROUP_DIR/$1/freezer.state" 2>/dev/null || echo THAWED ;;
  thaw) [ $# -eq 1 ] || ls_usage 2; host_freeze "$1" THAWED; echo "thawed host $1" ;;
  crash)
    [ $# -eq 1 ] || ls_usage 2
    host_freeze "$1" FROZEN  # nothing forks while the kill goes round
    pids=$(host_pids "$1" | { grep -vx "$$" || true; } | tr '\n' ' ')
    # shellcheck disable=SC2086
    [ -z "${pids// }" ] || kill -KILL $pids 2>/dev/null || true
    host_freeze "$1" THAWED
    echo "crashed host $1: ${pids:-nothing was running}" ;;
  heal)
    [ $# -eq 1 ] || ls_usage 2
    if [ "$1" = all ]; then targets=$(awk '$1 != "ID" {print $1}' "$INFO"); else targets=$1; fi
    for h in $targets; do
      nft_in "$h" flush chain inet resurrect input
      nft_in "$h" flush chain inet resurrect output
      [ "$h" = ctl ] || ip netns exec "$(host_field "$h" 2)" tc qdisc del dev eth0 root 2>/dev/null || true
    done
    echo "healed $1" ;;
  *) ls_die "unknown action $ACTION" ;;
esac
