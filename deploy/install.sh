#!/usr/bin/env bash
# install.sh - install everything resurrect, its demo and its tests need on this machine:
# Debian's munge + Slurm (slurmctld, slurmd, client) and a Python virtual environment in
# .venv with resurrect (editable), its dev tools and CPU torch for the example training job.
# Idempotent: what is already there is kept. Needs root for apt-get (skipped when present).
#   RESURRECT_TORCH_SPEC   pip requirement for torch       [torch==2.13.0]
#   RESURRECT_PYTHON       interpreter for the venv (>= 3.11) [python3]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
say() { printf '[install] %s\n' "$*" >&2; }

packages=(munge slurmctld slurmd slurm-client procps iproute2 util-linux)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then say "missing Debian packages (${missing[*]}): run as root"; exit 1; fi
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${RESURRECT_PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  say "$PY is older than Python 3.11"; exit 1
fi
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  say "pip install ${RESURRECT_TORCH_SPEC:-torch==2.13.0}"
  .venv/bin/python -m pip install -q "${RESURRECT_TORCH_SPEC:-torch==2.13.0}"
fi
say "pip install -e .[dev]"
.venv/bin/python -m pip install -q -e ".[dev]" -e examples/plugins/resurrect-example-plugin 2>&1 | grep -v -e '^WARNING: Location' -e 'is ignored' >&2 || true
.venv/bin/python -c 'import resurrect, temporalio, torch' || { say "install failed"; exit 1; }
say "ready: $(.venv/bin/resurrect --version)"
