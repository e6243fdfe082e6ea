#!/bin/sh
# prolog-fail-marked.sh - a Prolog (start.sh --prolog) that fails on a node while the file
# <state dir>/prolog-fail/<node> exists, as a broken node's prolog would: slurmctld then
# drains the node ("Prolog error") and requeues the job held ("launch failed requeued held").
# Each job it refuses is appended to <state dir>/prolog-fail/<node>.refused (id, unix time).
# slurmd runs it as root with SLURM_CONF (<state dir>/etc/slurm.conf) and SLURMD_NODENAME set.
#   --help   this text
case ${1:-} in -h|--help) sed -n '2,/^#   --help/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
state_dir=$(dirname "$(dirname "$SLURM_CONF")")
if [ -e "$state_dir/prolog-fail/$SLURMD_NODENAME" ]; then
    echo "prolog-fail-marked: $SLURMD_NODENAME is marked to fail" >&2
    echo "$SLURM_JOB_ID $(date +%s.%N)" >> "$state_dir/prolog-fail/$SLURMD_NODENAME.refused"
    exit 1
fi
exit 0
