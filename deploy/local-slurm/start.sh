#!/bin/bash
# start.sh - start a real Slurm cluster of N virtual nodes on this one host.
#
# One private munged, one slurmctld and N `slurmd -N <node>` (Debian's slurmd is built with
# multiple-slurmd support), all under a private state dir with a private SLURM_CONF; a real
# /etc/slurm is never read or written. Several clusters may run side by side on one host:
# give each its own --state-dir, ports and (optionally) cluster name. Runs as root.
#
# Usage: start.sh [options]
#   --state-dir DIR        state, config, logs, spool, pids, job output   [/tmp/resurrect-slurm]
#   --cluster-name NAME    ClusterName                                    [resurrect-local]
#   --nodes N              number of virtual nodes                        [4]
#   --node-prefix P        node names P1..PN                              [node]
#   --cpus N               CPUs per virtual node                          [1]
#   --ctld-port PORT       slurmctld port                                 [6817]
#   --slurmd-port PORT     slurmd of node K listens on PORT+K-1           [17001]
#   --slurmd-timeout S     SlurmdTimeout (silent node -> DOWN)            [5]
#   --jobcomp-script PATH  JobCompType=jobcomp/script, runs PATH at every job end
#   --max-jobs N           MaxJobCount (jobs slurmctld holds at once)    [10000]
#   --demo-user USER       unix user jobs run as (created if missing)     [resurrect-demo]
#   --no-install           never call apt-get; fail if packages are missing
#   --timeout S            how long to wait for all nodes to be idle      [60]
#   --slurm VER            Slurm version: the host's (22.05 on Debian 12), or 24.11 / 26.05
#                          from a cached Debian userland (userland.sh)    [host's]
#   --cache-dir DIR        where userland.sh keeps those userlands         [/var/cache/resurrect]
#   --slurmctld-parameters L  SlurmctldParameters=L (e.g. enable_expedited_requeue on 25.11+)
#   --prolog PATH          Prolog=PATH: run by each node's slurmd (as root) before a job starts
#                          there; a failing one makes Slurm drain the node and requeue the
#                          job held ("launch failed requeued held")
#   --restd                also start slurmrestd (auth/jwt; 24.11 / 26.05 userlands, or the
#                          host's slurmrestd package) as user --restd-user, on the unix socket
#                          DIR/restd/slurmrestd.socket and 127.0.0.1:--restd-port; writes the
#                          jwt key DIR/etc/jwt_hs256.key and a root token DIR/etc/restd-token
#   --restd-port PORT      slurmrestd's TCP port                          [6820]
#   --restd-user USER      unix user slurmrestd runs as (created if missing) [resurrect-restd]
#   --hosts MODE           `local`: every daemon on this host's network (NodeAddr 127.0.0.1);
#                          `netns`: each node its own network + UTS namespace with its own
#                          address, slurmctld in a controller namespace (hosts.sh); Slurm
#                          clients then run there: hosts.sh exec ctl -- scontrol ...  [local]
# Every option also reads an env variable: LOCAL_SLURM_STATE_DIR, LOCAL_SLURM_CLUSTER_NAME,
# LOCAL_SLURM_NODES, LOCAL_SLURM_NODE_PREFIX, LOCAL_SLURM_CPUS, LOCAL_SLURM_CTLD_PORT,
# LOCAL_SLURM_SLURMD_PORT, LOCAL_SLURM_SLURMD_TIMEOUT, LOCAL_SLURM_JOBCOMP_SCRIPT,
# LOCAL_SLURM_MAX_JOBS, LOCAL_SLURM_DEMO_USER, LOCAL_SLURM_NO_INSTALL=1, LOCAL_SLURM_VERSION,
# LOCAL_SLURM_CACHE_DIR, LOCAL_SLURM_SLURMCTLD_PARAMETERS, LOCAL_SLURM_PROLOG, LOCAL_SLURM_RESTD=1,
# LOCAL_SLURM_RESTD_PORT, LOCAL_SLURM_RESTD_USER, LOCAL_SLURM_HOSTS.
#
# A previous cluster in the same state dir is stopped (by pidfile) and its state wiped.
# On success prints the path of DIR/env (export SLURM_CONF, PATH) as the last stdout line.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

STATE_DIR=${LOCAL_SLURM_STATE_DIR:-/tmp/resurrect-slurm}
CLUSTER_NAME=${LOCAL_SLURM_CLUSTER_NAME:-resurrect-local}
NODES=${LOCAL_SLURM_NODES:-4}
NODE_PREFIX=${LOCAL_SLURM_NODE_PREFIX:-node}
CPUS=${LOCAL_SLURM_CPUS:-1}
CTLD_PORT=${LOCAL_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${LOCAL_SLURM_SLURMD_PORT:-17001}
SLURMD_TIMEOUT=${LOCAL_SLURM_SLURMD_TIMEOUT:-5}
JOBCOMP_SCRIPT=${LOCAL_SLURM_JOBCOMP_SCRIPT:-}
MAX_JOBS=${LOCAL_SLURM_MAX_JOBS:-10000}
DEMO_USER=${LOCAL_SLURM_DEMO_USER:-resurrect-demo}
NO_INSTALL=${LOCAL_SLURM_NO_INSTALL:-0}
WAIT_TIMEOUT=60
WANT_VERSION=${LOCAL_SLURM_VERSION:-}
CACHE_DIR=${LOCAL_SLURM_CACHE_DIR:-/var/cache/resurrect}
CTLD_PARAMS=${LOCAL_SLURM_SLURMCTLD_PARAMETERS:-}
PROLOG=${LOCAL_SLURM_PROLOG:-}
RESTD=${LOCAL_SLURM_RESTD:-0}
RESTD_PORT=${LOCAL_SLURM_RESTD_PORT:-6820}
RESTD_USER=${LOCAL_SLURM_RESTD_USER:-resurrect-restd}
HOSTS=${LOCAL_SLURM_HOSTS:-local}

while [ $# -gt 0 ]; do
  case $1 in
    --state-dir) STATE_DIR=$2; shift 2 ;;
    --cluster-name) CLUSTER_NAME=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --node-prefix) NODE_PREFIX=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --ctld-port) CTLD_PORT=$2; shift 2 ;;
    --slurmd-port) SLURMD_PORT=$2; shift 2 ;;
    --slurmd-timeout) SLURMD_TIMEOUT=$2; shift 2 ;;
    --jobcomp-script) JOBCOMP_SCRIPT=$2; shift 2 ;;
    --max-jobs) MAX_JOBS=$2; shift 2 ;;
    --demo-user) DEMO_USER=$2; shift 2 ;;
    --no-install) NO_INSTALL=1; shift ;;
    --timeout) WAIT_TIMEOUT=$2; shift 2 ;;
    --slurm) WANT_VERSION=$2; shift 2 ;;
    --cache-dir) CACHE_DIR=$2; shift 2 ;;
    --slurmctld-parameters) CTLD_PARAMS=$2; shift 2 ;;
    --prolog) PROLOG=$2; shift 2 ;;
    --restd) RESTD=1; shift ;;
    --restd-port) RESTD_PORT=$2; shift 2 ;;
    --restd-user) RESTD_USER=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    -h|--help) ls_usage 0 ;;
    *) echo "unknown option: $1" >&2; ls_usage 2 ;;
  esac
done

# ---------------------------------------------------------------- validate
[ "$(id -u)" = 0 ] || ls_die "must run as root (slurmd launches jobs as their owners)"
for v in NODES CPUS CTLD_PORT SLURMD_PORT SLURMD_TIMEOUT WAIT_TIMEOUT MAX_JOBS RESTD_PORT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || ls_die "$v must be a number, got '${!v}'"
done
[ "$NODES" -ge 1 ] || ls_die "--nodes must be >= 1"
[[ $NODE_PREFIX =~ ^[a-z][a-z0-9-]*$ ]] || ls_die "--node-prefix must match [a-z][a-z0-9-]*"
[[ $CLUSTER_NAME =~ ^[a-z][a-z0-9_-]{0,39}$ ]] || ls_die "--cluster-name must match [a-z][a-z0-9_-]*"
[[ $STATE_DIR = /* ]] || STATE_DIR=$PWD/$STATE_DIR
[[ $STATE_DIR =~ ^[A-Za-z0-9/._-]+$ ]] || ls_die "state dir must be a plain path: $STATE_DIR"
if [ -n "$JOBCOMP_SCRIPT" ]; then
  [ -x "$JOBCOMP_SCRIPT" ] || ls_die "--jobcomp-script $JOBCOMP_SCRIPT is not executable"
fi
[[ $CTLD_PARAMS =~ ^[A-Za-z0-9_=,.:-]*$ ]] || ls_die "--slurmctld-parameters must be a plain list"
[[ $HOSTS =~ ^(local|netns)$ ]] || ls_die "--hosts must be local or netns, got '$HOSTS'"
[[ $RESTD_USER =~ ^[a-z][a-z0-9-]{0,30}$ ]] || ls_die "--restd-user must match [a-z][a-z0-9-]*"

# ---------------------------------------------------------------- packages
PKGS=(munge slurmctld slurmd slurm-client procps util-linux passwd)
[ "$HOSTS" = netns ] && PKGS+=(iproute2 nftables)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$NO_INSTALL" = 1 ] && ls_die "missing packages (and --no-install): ${missing[*]}"
  ls_log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/local-slurm-apt.log 2>&1; then
    apt-get update -q >>/tmp/local-slurm-apt.log 2>&1
    apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/local-slurm-apt.log 2>&1 \
      || ls_die "apt-get failed, see /tmp/local-slurm-apt.log"
  fi
  ls_log "packages installed"
fi
SBIN_DIR=$(dirname "$(command -v slurmctld || echo /usr/sbin/slurmctld)")
BIN_DIR=$(dirname "$(command -v sinfo || echo /usr/bin/sinfo)")
SLURM_VERSION=$("$SBIN_DIR/slurmctld" -V | awk '{print $2}')
# another version than the host's: its Debian userland's programs (userland.sh), and its
# plugins (PluginDir below); munged stays the host's (the protocol is the same)
PLUGIN_DIR=""
if [ -n "$WANT_VERSION" ] && [ "${SLURM_VERSION%.*}" != "$WANT_VERSION" ]; then
  userland_args=(--cache-dir "$CACHE_DIR")
  [ "$NO_INSTALL" = 1 ] && userland_args+=(--no-install)
  USERLAND=$("$HERE/userland.sh" "${userland_args[@]}" "$WANT_VERSION" | tail -1) \
    || ls_die "no Slurm $WANT_VERSION userland"
  SBIN_DIR=$USERLAND/sbin
  BIN_DIR=$USERLAND/bin
  PLUGIN_DIR=$USERLAND/root/usr/lib/x86_64-linux-gnu/slurm-wlm
  SLURM_VERSION=$(cat "$USERLAND/VERSION")
fi
SLURM_MAJOR=${SLURM_VERSION%%.*}
if [ "$RESTD" = 1 ]; then
  [ -x "$SBIN_DIR/slurmrestd" ] || ls_die "--restd: no slurmrestd in $SBIN_DIR (Slurm $SLURM_VERSION)"
  [ -e "${PLUGIN_DIR:-/usr/lib/x86_64-linux-gnu/slurm-wlm}/auth_jwt.so" ] \
    || ls_die "--restd: no auth/jwt plugin for Slurm $SLURM_VERSION (package slurm-wlm-jwt-plugin)"
fi
ls_log "slurm $SLURM_VERSION"

# ---------------------------------------------------------------- demo user
if ! id "$DEMO_USER" >/dev/null 2>&1; then
  useradd -m -s /bin/bash "$DEMO_USER"
  ls_log "created user $DEMO_USER"
fi

# slurmrestd refuses to serve as root or SlurmUser: its own unprivileged user
if [ "$RESTD" = 1 ] && ! id "$RESTD_USER" >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin "$RESTD_USER"
  ls_log "created user $RESTD_USER"
fi

# ---------------------------------------------------------------- stop previous, lay out
if [ -r "$STATE_DIR/cluster.info" ]; then "$HERE/stop.sh" --state-dir "$STATE_DIR" --keep-hosts >/dev/null 2>&1 || true; fi
rm -rf "${STATE_DIR:?}"/{etc,state,spool,log,run,out,munge,restd,env,cluster.info}
mkdir -p "$STATE_DIR"/{etc,state,spool,log,run,out,munge}
chmod 0755 "$STATE_DIR" "$STATE_DIR"/{etc,spool,log,run,munge}
chmod 0700 "$STATE_DIR/state"
chown "$DEMO_USER": "$STATE_DIR/out"; chmod 1777 "$STATE_DIR/out"
# the demo user must reach the munge socket and slurm.conf below the state dir
if ! runuser -u "$DEMO_USER" -- test -x "$STATE_DIR/munge"; then
  ls_die "$DEMO_USER cannot traverse $STATE_DIR (a parent directory is private); pick another --state-dir"
fi
# a port in use means another cluster (or a leftover daemon) would answer instead of ours
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
restd_ports=(); [ "$RESTD" = 1 ] && restd_ports=("$RESTD_PORT")
# (hosts in namespaces: every port is private to this cluster's namespaces)
if [ "$HOSTS" = local ]; then
  for port in "$CTLD_PORT" "${restd_ports[@]}" $(seq "$SLURMD_PORT" $((SLURMD_PORT + NODES - 1))); do
    if port_busy "$port"; then ls_die "port $port is already in use; pick other --ctld-port/--slurmd-port"; fi
  done
fi
# ON_CTL / on_node: run a command on the controller's host / a node's host
ON_CTL=()
on_node() { shift; "$@"; }
if [ "$HOSTS" = netns ]; then
  "$HERE/hosts.sh" --state-dir "$STATE_DIR" up --nodes "$NODES" --node-prefix "$NODE_PREFIX"
  ON_CTL=("$HERE/hosts.sh" --state-dir "$STATE_DIR" exec ctl --)
  on_node() { local node=$1; shift; "$HERE/hosts.sh" --state-dir "$STATE_DIR" exec "$node" -- "$@"; }
fi
CONF=$STATE_DIR/etc/slurm.conf
MUNGE_DIR=$STATE_DIR/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket

# ---------------------------------------------------------------- private munged
# Each cluster has its own munged on its own socket (AuthInfo=socket=...), so clusters never
# share or stop one another's munged, and the host's /run/munge is left alone.
chown munge:munge "$MUNGE_DIR"
if [ -s /etc/munge/munge.key ]; then
  install -o munge -g munge -m 0400 /etc/munge/munge.key "$MUNGE_DIR/munge.key"
else
  dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1024 count=1 status=none
  chown munge:munge "$MUNGE_DIR/munge.key"; chmod 0400 "$MUNGE_DIR/munge.key"
fi
setpriv --reuid=munge --regid=munge --clear-groups /usr/sbin/munged \
  --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" --pid-file="$MUNGE_DIR/munged.pid" \
  --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" \
  || ls_die "munged failed to start: $(tail -3 "$MUNGE_DIR/munged.log" 2>/dev/null)"
for _ in $(seq 1 50); do
  munge -S "$MUNGE_SOCKET" -n 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 && break
  sleep 0.1
done
munge -S "$MUNGE_SOCKET" -n | unmunge -S "$MUNGE_SOCKET" >/dev/null || ls_die "munged does not answer"
ls_log "munged up (pid $(cat "$MUNGE_DIR/munged.pid"), socket $MUNGE_SOCKET)"

# ---------------------------------------------------------------- slurm.conf
LAST_PORT=$((SLURMD_PORT + NODES - 1))
if [ -n "$JOBCOMP_SCRIPT" ]; then
  JOBCOMP="JobCompType=jobcomp/script
JobCompLoc=$JOBCOMP_SCRIPT"
else
  JOBCOMP="JobCompType=jobcomp/none"
fi
# auth/jwt beside munge: slurmctld accepts the tokens slurmrestd passes on (HS256, key
# readable by root only)
JWT_KEY=$STATE_DIR/etc/jwt_hs256.key
JWT_CONF=""
if [ "$RESTD" = 1 ]; then
  (umask 077; dd if=/dev/urandom of="$JWT_KEY" bs=32 count=1 status=none)
  JWT_CONF="AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY"
fi
NODE_RANGE="${NODE_PREFIX}[1-$NODES]"; [ "$NODES" = 1 ] && NODE_RANGE="${NODE_PREFIX}1"
PORTS="$SLURMD_PORT-$LAST_PORT"; [ "$NODES" = 1 ] && PORTS="$SLURMD_PORT"
CTLD_HOST=localhost
NODE_LINES="NodeName=$NODE_RANGE NodeHostname=localhost NodeAddr=127.0.0.1 Port=$PORTS CPUs=$CPUS RealMemory=500 State=UNKNOWN"
if [ "$HOSTS" = netns ]; then
  # each node on its own host: its own name and address (hosts.info, written by hosts.sh)
  CTLD_HOST="controller($(awk '$1 == "ctl" {print $3}' "$STATE_DIR/hosts.info"))"
  NODE_LINES=$(for i in $(seq 1 "$NODES"); do
    addr=$(awk -v h="$NODE_PREFIX$i" '$1 == h {print $3}' "$STATE_DIR/hosts.info")
    echo "NodeName=$NODE_PREFIX$i NodeHostname=$NODE_PREFIX$i NodeAddr=$addr Port=$SLURMD_PORT CPUs=$CPUS RealMemory=500 State=UNKNOWN"
  done)
fi
cat >"$CONF" <<CONF_EOF
# generated by resurrect deploy/local-slurm/start.sh for slurm $SLURM_VERSION
# $NODES virtual nodes on one host (multiple-slurmd); private state under $STATE_DIR
ClusterName=$CLUSTER_NAME
SlurmctldHost=$CTLD_HOST
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# socket: this cluster's private munged. cred_expire: also the delay before a requeued job
# may start again (default 120 s).
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=5
StateSaveLocation=$STATE_DIR/state
SlurmdSpoolDir=$STATE_DIR/spool/%n
SlurmctldPidFile=$STATE_DIR/run/slurmctld.pid
SlurmdPidFile=$STATE_DIR/run/slurmd-%n.pid
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
$JOBCOMP
MpiDefault=none
MailProg=/bin/true
JobRequeue=1
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=$SLURMD_TIMEOUT
SlurmctldTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=2
Waittime=0
MinJobAge=300
MaxJobCount=$MAX_JOBS
${PLUGIN_DIR:+PluginDir=$PLUGIN_DIR
}${CTLD_PARAMS:+SlurmctldParameters=$CTLD_PARAMS
}${PROLOG:+Prolog=$PROLOG
}${JWT_CONF:+$JWT_CONF
}$NODE_LINES
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
CONF_EOF
chmod 0644 "$CONF"
export SLURM_CONF=$CONF

cat >"$STATE_DIR/cluster.info" <<INFO_EOF
STATE_DIR=$STATE_DIR
CLUSTER_NAME=$CLUSTER_NAME
NODES=$NODES
NODE_PREFIX=$NODE_PREFIX
CTLD_PORT=$CTLD_PORT
SLURMD_BASE_PORT=$SLURMD_PORT
SLURM_CONF=$CONF
SBIN_DIR=$SBIN_DIR
BIN_DIR=$BIN_DIR
SLURM_VERSION=$SLURM_VERSION
MUNGE_SOCKET=$MUNGE_SOCKET
DEMO_USER=$DEMO_USER
HOSTS=$HOSTS
INFO_EOF

# ---------------------------------------------------------------- daemons
"${ON_CTL[@]}" "$SBIN_DIR/slurmctld" -i || ls_die "slurmctld failed: $(tail -5 "$STATE_DIR/log/slurmctld.log" 2>/dev/null)"
ctld_pid=$(cat "$STATE_DIR/run/slurmctld.pid" 2>/dev/null || true)
for _ in $(seq 1 50); do
  [ -n "$ctld_pid" ] && break
  sleep 0.1; ctld_pid=$(cat "$STATE_DIR/run/slurmctld.pid" 2>/dev/null || true)
done
ls_pid_is "$ctld_pid" slurmctld || ls_die "slurmctld is not running: $(tail -5 "$STATE_DIR/log/slurmctld.log" 2>/dev/null)"
ls_log "slurmctld started (pid $(cat "$STATE_DIR/run/slurmctld.pid" 2>/dev/null || echo ?), port $CTLD_PORT)"
for i in $(seq 1 "$NODES"); do
  on_node "$NODE_PREFIX$i" "$SBIN_DIR/slurmd" -N "$NODE_PREFIX$i" || ls_die "slurmd $NODE_PREFIX$i failed"
done
ls_log "$NODES slurmd started (ports $SLURMD_PORT-$LAST_PORT)"

# ---------------------------------------------------------------- slurmrestd (--restd)
if [ "$RESTD" = 1 ]; then
  RESTD_TOKEN=$STATE_DIR/etc/restd-token
  cat >>"$STATE_DIR/cluster.info" <<RESTD_EOF
RESTD_USER=$RESTD_USER
RESTD_PORT=$RESTD_PORT
RESTD_URL=http://127.0.0.1:$RESTD_PORT
RESTD_SOCKET=$STATE_DIR/restd/slurmrestd.socket
RESTD_TOKEN_FILE=$RESTD_TOKEN
RESTD_EOF
  "$HERE/restd.sh" --state-dir "$STATE_DIR" start
  # a day's token for root (resurrect acts as the cluster's administrator)
  (umask 077; "${ON_CTL[@]}" "$BIN_DIR/scontrol" token username=root lifespan=86400 \
    | sed -n 's/^SLURM_JWT=//p' >"$RESTD_TOKEN")
  [ -s "$RESTD_TOKEN" ] || ls_die "scontrol token printed no token"
fi

cat >"$STATE_DIR/env" <<ENV_EOF
export SLURM_CONF=$CONF
export PATH=$BIN_DIR:\$PATH
ENV_EOF

# ---------------------------------------------------------------- wait until all idle
deadline=$((SECONDS + WAIT_TIMEOUT))
while :; do
  idle=$("${ON_CTL[@]}" "$BIN_DIR/sinfo" -h -N -o '%N %T' 2>/dev/null | sort -u | grep -c ' idle$' || true)
  [ "$idle" -eq "$NODES" ] && break
  if [ $SECONDS -ge $deadline ]; then
    "${ON_CTL[@]}" "$BIN_DIR/sinfo" -N >&2 || true
    tail -20 "$STATE_DIR/log/slurmctld.log" >&2 || true
    ls_die "cluster did not become idle within ${WAIT_TIMEOUT}s"
  fi
  sleep 0.2
done
ls_log "cluster $CLUSTER_NAME ready: $NODES nodes idle (slurm $SLURM_VERSION, major $SLURM_MAJOR)"
echo "$STATE_DIR/env"
