#!/usr/bin/env bash
# Real GPU faults on a real GPU node, watched by the resurrect agent: run it on a GPU node you
# may load for two minutes to see what NVML and the kernel report for faults a job causes,
# and to keep the real outputs of PyTorch, NCCL and torchrun as attribution fixtures.
#
#   deploy/gpu-faults.sh OUTDIR         # needs python3 with torch (and cupy for the
#                                       # illegal address); the agent's own needs as
#                                       # for deploy/gpu-smoke.sh
#
# While the agent watches (readings --watch: NVML Xid events, polls, kernel NVRM lines), the
# script runs, each under torchrun and each its own process:
#   load      matrix products for LOAD_S seconds, with one agent activity reading mid-way
#   oom       a 100 GiB allocation, then one larger than what is left (device OOM)
#   assert    an index out of range on the GPU (device-side assert)
#   illegal   a kernel writing to address 0x10 (illegal memory access, an Xid on most GPUs)
#   nccl_dup  two ranks on one GPU under NCCL (NCCL's duplicate-GPU refusal)
#   gloo_hang rank 1 never joins an all-reduce (a collective's timeout)
#   segv      a rank that dereferences NULL (torchrun's signal report)
# OUTDIR gets <fault>.log (the job's combined output, exit code last), agent-watch.log,
# agent-check-{before,after}.json, activity.json and dmesg.log. Nothing is written elsewhere
# except the temporary scripts (mktemp), removed at the end.
#   --help   this text
set -uo pipefail
case ${1:-} in -h|--help|"") sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="$(mkdir -p "$1" && cd "$1" && pwd)"
PY="${RESURRECT_PYTHON:-python3}"
LOAD_S="${LOAD_S:-15}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
AGENT=("$PY" -m resurrect.sensors.node_agent)
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

cat > "$WORK/load.py" <<'EOF'
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    n += 20
print(f"load: {n} bf16 8192^3 products on {torch.cuda.get_device_name()}", flush=True)
EOF
cat > "$WORK/oom.py" <<'EOF'
import torch
held = torch.empty(100 * 2**30, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
more = torch.empty(free + 2**30, dtype=torch.uint8, device="cuda")
EOF
cat > "$WORK/assert.py" <<'EOF'
import torch
x = torch.arange(10, device="cuda", dtype=torch.float32)
y = x[torch.tensor([100], device="cuda")]
print(y.item())
EOF
cat > "$WORK/illegal.py" <<'EOF'
import numpy, torch, cupy
torch.ones(1, device="cuda")
bad = cupy.RawKernel(r'''
extern "C" __global__ void write_far(unsigned long long address) {
    ((float*)address)[threadIdx.x] = 1.0f;
}''', "write_far")
with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
    bad((1,), (32,), (numpy.uint64(0x10),))
torch.cuda.synchronize()
EOF
cat > "$WORK/nccl_dup.py" <<'EOF'
import torch, torch.distributed as dist
torch.cuda.set_device(0)
dist.init_process_group("nccl")
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("all_reduce", t.item())
EOF
cat > "$WORK/gloo_hang.py" <<'EOF'
import datetime, os, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
if dist.get_rank() == 1:
    time.sleep(40)
t = torch.ones(1)
dist.all_reduce(t)
print("all_reduce", t.item())
EOF
cat > "$WORK/segv.py" <<'EOF'
import ctypes, torch
torch.ones(1, device="cuda")
ctypes.string_at(0)
EOF

run_job() {  # name nproc timeout_s
    local name=$1 nproc=$2 limit=$3 port=$((29500 + RANDOM % 1000))
    echo "== $name"
    ( cd "$WORK" && NCCL_DEBUG=WARN timeout -k 5 "$limit" "$PY" -m torch.distributed.run \
        --nnodes=1 --nproc-per-node="$nproc" --master-port="$port" "$name.py" ) \
        > "$OUTDIR/$name.log" 2>&1
    echo "exit code $?" >> "$OUTDIR/$name.log"
    tail -n 3 "$OUTDIR/$name.log"
}

echo "== agent check (before)"
"${AGENT[@]}" check --json > "$OUTDIR/agent-check-before.json" 2>&1; echo "exit $?"
"${AGENT[@]}" -v readings --watch 400 > "$OUTDIR/agent-watch.log" 2>&1 &
watcher=$!
sleep 3

echo "== load (${LOAD_S}s), activity read mid-way"
( cd "$WORK" && "$PY" load.py "$LOAD_S" ) > "$OUTDIR/load.log" 2>&1 &
load=$!
sleep $((LOAD_S / 2))
"$PY" - > "$OUTDIR/activity.json" 2>&1 <<'EOF'
import dataclasses, json
from resurrect.sensors.node_agent.gpu_activity import LocalGpus
print(json.dumps([dataclasses.asdict(g) for g in LocalGpus().read()], default=str, indent=1))
EOF
wait $load; echo "exit code $?" >> "$OUTDIR/load.log"; cat "$OUTDIR/activity.json" | head -30

run_job oom 1 120
run_job assert 1 120
run_job illegal 1 120
sleep 5   # the Xid event of the illegal access, if any, reaches the watcher
run_job nccl_dup 2 120
run_job gloo_hang 2 120
run_job segv 1 120

sleep 5
echo "== agent check (after)"
"${AGENT[@]}" check --json > "$OUTDIR/agent-check-after.json" 2>&1; echo "exit $?"
kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
{ dmesg 2>/dev/null || journalctl -k --no-pager 2>/dev/null; } | grep -iE "nvrm|xid|nvidia" | tail -n 200 > "$OUTDIR/dmesg.log"
echo "== agent watch: findings and events"
grep -v '^gpu_\|^kernel_\|"type": "heartbeat"' "$OUTDIR/agent-watch.log" | grep -v '^# GPU ' | tail -n 40
echo "== kernel lines"; tail -n 20 "$OUTDIR/dmesg.log"
echo "== done"
