#!/usr/bin/env bash
# install.sh - install everything resurrect, its demo and its tests need on this machine:
# Debian's munge + Slurm (slurmctld, slurmd, client) and a Python virtual environment in
# .venv with resurrect (editable), its dev tools and torch for the example training job.
# Idempotent: what is already there is kept. Needs root for apt-get (skipped when present).
#   RESURRECT_TORCH_SPEC   pip requirement for torch       [torch: the newest release pip may
#                          install here; e.g. torch==2.2.2 for the oldest supported one]
#   RESURRECT_PYTHON       interpreter for the venv (>= 3.11) [/usr/bin/python3, else python3]
#   RESURRECT_SLURM_VERSION  also a Slurm of this version for the local cluster (24.11, 26.05:
#                          mmdebstrap + patchelf, then deploy/local-slurm/userland.sh)
# Jobs of the demo and the tests run as an unprivileged user with the venv's interpreter, so
# it must be executable by everyone: Debian's /usr/bin/python3 is preferred over a Python
# installed under a private home (pyenv in /root), and a venv that other users cannot run
# is rebuilt.
#   --help   this text
set -euo pipefail
case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
say() { printf '[install] %s\n' "$*" >&2; }

# systemd: systemd-analyze verifies the shipped units; openssl: throwaway certificates for
# the Temporal mTLS test; prometheus: the real server the metrics tests scrape with (never
# started as a service); chromium-headless-shell: the tests' screenshot of the Temporal UI.
packages=(munge slurmctld slurmd slurm-client procps iproute2 nftables util-linux systemd openssl
  prometheus chromium-headless-shell)
case ${RESURRECT_SLURM_VERSION:-} in 24.11|26.05) packages+=(mmdebstrap patchelf) ;; *) ;; esac
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

new_enough() { "$1" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; }
if [ -n "${RESURRECT_PYTHON:-}" ]; then PY=$RESURRECT_PYTHON
elif [ -x /usr/bin/python3 ] && new_enough /usr/bin/python3; then PY=/usr/bin/python3
else PY=python3; fi
new_enough "$PY" || { say "$PY is older than Python 3.11 (or lacks venv: apt-get install python3-venv)"; exit 1; }
runs_for_others() {  # can an unprivileged user run the venv's interpreter?
  [ "$(id -u)" -ne 0 ] || setpriv --reuid=65534 --regid=65534 --clear-groups .venv/bin/python -c '' 2>/dev/null
}
if [ -x .venv/bin/python ] && ! runs_for_others; then
  say "rebuilding .venv: its interpreter is not executable by other users"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# The newest torch by default (docs/checkpoints.md: which versions are tested where). A
# site's pip constraints apply: where they cap torch, the newest allowed release is taken.
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  say "pip install ${RESURRECT_TORCH_SPEC:-torch}"
  .venv/bin/python -m pip install -q "${RESURRECT_TORCH_SPEC:-torch}"
fi
pip_install_editable() {
  .venv/bin/python -m pip install -q -e ".[dev]" -e examples/plugins/resurrect-example-plugin 2>&1 | grep -v -e '^WARNING: Location' -e 'is ignored' >&2 || true
}
# Does the venv import this checkout, resurrect.workflows from workflows/ (setup.py's mapping)?
# Run from / so that the working directory is not on sys.path.
imports_this_checkout() {
  (cd / && "$ROOT/.venv/bin/python" -c 'import sys, resurrect.workflows.recovery as m, temporalio, torch
sys.exit(m.__file__ != sys.argv[1])' "$ROOT/workflows/recovery.py") 2>/dev/null
}
# What the editable install was made from: its packaging files and this checkout's path.
# Unchanged since the last install that imported this checkout: pip is not run again.
install_inputs() {
  { echo "$ROOT"; cat pyproject.toml setup.py examples/plugins/resurrect-example-plugin/pyproject.toml; } | sha256sum | cut -d' ' -f1
}
STAMP=.venv/.resurrect-installed-from
if [ "$(cat "$STAMP" 2>/dev/null)" = "$(install_inputs)" ] && imports_this_checkout; then
  say "pip install -e .[dev]: up to date"
else
  say "pip install -e .[dev]"
  pip_install_editable
fi
if ! imports_this_checkout; then
  # an install of another layout (resurrect/workflows as a link or a copy in site-packages,
  # an older editable finder) or of another checkout: remove it and install this one again
  say "resurrect was installed from another layout or checkout: reinstalling"
  .venv/bin/python -m pip uninstall -q -y resurrect >&2 || true
  pip_install_editable
  imports_this_checkout || { say "install failed: resurrect.workflows is not $ROOT/workflows"; exit 1; }
fi
install_inputs > "$STAMP"
case ${RESURRECT_SLURM_VERSION:-} in
  24.11|26.05)
    if [ "$(id -u)" -eq 0 ]; then
      say "Slurm ${RESURRECT_SLURM_VERSION}: $(deploy/local-slurm/userland.sh "$RESURRECT_SLURM_VERSION" | tail -1)"
    fi ;;
  *) ;;
esac
say "ready: $(.venv/bin/resurrect --version)"
