#!/bin/sh
# kick-watcher.sh - a Slurm hook that makes resurrect's watcher poll at once.
# Use it as a strigger program and as the jobcomp script:
#   strigger --set --node --down --flags=perm --program=/opt/resurrect/deploy/hooks/kick-watcher.sh
#   slurm.conf: JobCompType=jobcomp/script  JobCompLoc=/opt/resurrect/deploy/hooks/kick-watcher.sh
# The socket is the watcher's `watcher.kick_socket` (override: RESURRECT_KICK_SOCKET); the
# default below is resurrect.config.DEFAULT_KICK_SOCKET (tests keep the two equal).
# It never fails and never blocks Slurm: if resurrect is down, the kick is simply lost.
# --help: this text (nothing is sent).
case ${1:-} in -h|--help) sed -n '2,/^SOCK=/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
SOCK=${RESURRECT_KICK_SOCKET:-/run/resurrect/kick.sock}
python3 - "$SOCK" "${JOBID:-}${JOBSTATE:+ $JOBSTATE}${1:+ $*}" <<'PY' >/dev/null 2>&1 || true
import socket, sys
with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
    s.settimeout(1)
    s.sendto(("slurm " + sys.argv[2]).encode()[:256], sys.argv[1])
PY
exit 0
