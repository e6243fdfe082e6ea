#!/usr/bin/env bash
# GPU smoke test of the resurrect node agent: run it on a real GPU node to confirm the NVML
# code against real hardware. It prints every reading the agent takes (and the rule each
# one matched), one health check (human and JSON, with its exit code), then WATCH_S seconds
# (default 10) of watching: heartbeats, findings, Xid events and kernel NVRM lines, as JSON.
#
#   deploy/gpu-smoke.sh                 # from a fresh checkout; needs python3 >= 3.11
#   WATCH_S=30 deploy/gpu-smoke.sh
#
# Python: $RESURRECT_PYTHON if set, else the repo's .venv if it has what is needed, else a
# venv in .venv-smoke with only nvidia-ml-py, pydantic, pyyaml and temporalio (no torch, no
# Temporal server). Nothing is written outside the repository; nothing talks to Temporal.
#   --help   this text
set -euo pipefail
case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WATCH_S="${WATCH_S:-10}"
NEEDS="import pynvml, pydantic, yaml, temporalio"

pick_python() {
    if [[ -n "${RESURRECT_PYTHON:-}" ]]; then echo "$RESURRECT_PYTHON"; return; fi
    if [[ -x "$REPO/.venv/bin/python" ]] && "$REPO/.venv/bin/python" -c "$NEEDS" 2>/dev/null; then
        echo "$REPO/.venv/bin/python"; return
    fi
    local venv="$REPO/.venv-smoke"
    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "$NEEDS" 2>/dev/null; then
        local base="${PYTHON:-python3}"
        echo "== creating $venv (nvidia-ml-py pydantic pyyaml temporalio)" >&2
        "$base" -m venv "$venv"
        if command -v uv >/dev/null 2>&1; then
            uv pip install -q --python "$venv/bin/python" nvidia-ml-py pydantic pyyaml temporalio >&2
        else
            "$venv/bin/pip" install -q --disable-pip-version-check \
                nvidia-ml-py pydantic pyyaml temporalio >&2
        fi
    fi
    echo "$venv/bin/python"
}

PY="$(pick_python)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
AGENT=("$PY" -m resurrect.sensors.node_agent)
cd "$REPO"

echo "== host $(hostname) | $("$PY" --version) | nvidia-ml-py $("$PY" -c 'from importlib.metadata import version; print(version("nvidia-ml-py"))')"
if command -v nvidia-smi >/dev/null 2>&1; then
    echo "== nvidia-smi -L (for comparison)"
    nvidia-smi -L || true
    nvidia-smi --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,clocks_event_reasons.active --format=csv 2>/dev/null || true
fi
if [[ -r /dev/kmsg ]]; then echo "== kernel log: /dev/kmsg readable"; else echo "== kernel log: /dev/kmsg not readable (journald fallback; run as root to use kmsg)"; fi

echo
echo "== every reading (-vv also logs each NVML call the GPU does not support)"
"${AGENT[@]}" -vv readings

echo
echo "== health check"
set +e
"${AGENT[@]}" check
rc=$?
set -e
echo "-- exit code $rc (0 healthy or no GPUs, 1 unhealthy)"
"${AGENT[@]}" check --json || true

echo
echo "== watching ${WATCH_S}s: heartbeats, findings, Xid events, kernel NVRM lines"
"${AGENT[@]}" -v readings --watch "$WATCH_S" > /tmp/resurrect-gpu-smoke.$$ 2>&1 || true
grep -v '^gpu_\|^kernel_' /tmp/resurrect-gpu-smoke.$$ | grep -v '^# GPU ' || true
rm -f /tmp/resurrect-gpu-smoke.$$
echo "== done"
