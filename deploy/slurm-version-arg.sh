# slurm-version-arg.sh - sourced (never run) by deploy/demo.sh and deploy/run-tests.sh with
# their arguments: a first `--slurm VER` exports RESURRECT_SLURM_VERSION=VER (the Slurm the
# local cluster runs) and is shifted off; any other first argument is left alone.
if [ "${1:-}" = "--slurm" ]; then
  [ $# -ge 2 ] || { echo "$(basename "$0"): --slurm needs a version" >&2; exit 2; }
  export RESURRECT_SLURM_VERSION=$2
  shift 2
fi
