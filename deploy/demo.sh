#!/usr/bin/env bash
# demo.sh - from a fresh machine: install what is needed, then run `resurrect demo`
# (a local 4-node Slurm cluster, the Temporal server with its web UI on :8233, resurrect,
# a 2-node torchrun training job, an injected node failure, the recovery). Run as root.
# Arguments go to `resurrect demo`, e.g. deploy/demo.sh --scenario gpu-error --json
#   --slurm VER   (first) the cluster runs Slurm VER: 22.05 (the host's on Debian 12), or
#                 24.11 / 26.05 from a cached Debian userland (deploy/local-slurm/userland.sh)
#   --help        this text and, once installed, the options of `resurrect demo`
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
. deploy/slurm-version-arg.sh  # a first --slurm VER
case ${1:-} in
  -h|--help)
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    if [ -x .venv/bin/resurrect ]; then echo; .venv/bin/resurrect demo --help
    else echo; echo "(the options of \`resurrect demo\` are listed once deploy/install.sh has run)"; fi
    exit 0 ;;
  *) ;;
esac
deploy/install.sh
exec .venv/bin/resurrect demo "$@"
