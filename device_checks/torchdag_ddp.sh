#!/bin/bash
# Device check of torchdag_ddp, the helper users' scripts import (docs/byo.md), on a GPU or an
# Ascend machine. The user's script (device_checks/torchdag_ddp_check.py: BatchNorm, gradient
# accumulation under no_sync(), rank 0's weights to start) runs through
# torchdag/agents/record.py as the Workflow runs it, in jobs of two torchrun "nodes" on
# 127.0.0.1 over gloo:
#   DEVICE only    both ranks on the accelerator (310P across servers; GPU-only over gloo)
#   DEVICE + cpu   rank 0 on the accelerator, rank 1 on the CPU (NPU + CPU, GPU + CPU)
#   cpu only       both ranks on the CPU (torch's own DDP), the step time to compare with
# and, with two accelerators, both over the accelerator's own backend (nccl, hccl): torch's DDP.
# Each job prints its parameters' largest difference from single-process training on the CPU
# and each rank's median step time; exits non-zero past TOLERANCE. The lines documented before
# issue 44 (89a622e) run once on the accelerator alone, to show what they do there (on an NPU:
# "No backend type associated with device type npu" in DDP's constructor).
# Usage: [PYTHON=python3] [DEVICE=cuda|npu] [STEPS=200] [HIDDEN=256] [TOLERANCE=1e-4] device_checks/torchdag_ddp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-200}
HIDDEN=${HIDDEN:-256}
TOLERANCE=${TOLERANCE:-1e-4}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 TORCHDAG_PG_TIMEOUT=60
unset TORCHDAG_DEVICE TORCHDAG_BACKEND RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

# How many DEVICE devices torch sees (torch_<kind> registers a kind torch does not know, as torch_npu).
COUNT=$("$PY" -c "import importlib, sys, torch
kind = sys.argv[1]
module = getattr(torch, kind, None) or (importlib.import_module('torch_' + kind) and getattr(torch, kind))
print(module.device_count() if module.is_available() else 0)" "$DEVICE")
"$PY" -c 'import sys, torch; print("torch", torch.__version__, "python", sys.version.split()[0])'
echo "torchdag_ddp check: $COUNT $DEVICE device(s)"
[ "$COUNT" -ge 1 ] || { echo "torchdag_ddp check: FAIL: no $DEVICE device visible to torch"; exit 1; }

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# job NAME BACKEND KIND0 KIND1 [ARGS...]: node n's one rank on KINDn; 0 when every node exits 0.
job() {
    local name=$1 backend=$2 kind0=$3 kind1=$4
    shift 4
    local port pids=() rc=0
    port=$(free_port)
    mkdir -p "$WORK/$name"
    for node in 0 1; do
        local kind=$kind0 visible=()
        [ "$node" = 1 ] && kind=$kind1
        # Over gloo both ranks may share device 0; over nccl/hccl each needs one of its own.
        [ "$backend" != gloo ] && visible=(CUDA_VISIBLE_DEVICES=$node ASCEND_RT_VISIBLE_DEVICES=$node)
        env "${visible[@]}" TORCHDAG_DEVICE="$kind" TORCHDAG_BACKEND="$backend" \
            timeout 600 "$PY" -m torch.distributed.run --nnodes=2 --node-rank=$node --nproc-per-node=1 \
            --master-addr=127.0.0.1 --master-port="$port" --rdzv-conf=timeout=60 \
            torchdag/agents/record.py device_checks/torchdag_ddp_check.py train "$WORK/$name" \
            --steps "$STEPS" --hidden "$HIDDEN" "$@" >"$WORK/$name/node$node.log" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
    return $rc
}

failed=0
check() {
    local name=$1
    shift
    echo "== $name"
    if job "$name" "$@"; then
        "$PY" device_checks/torchdag_ddp_check.py compare "$WORK/$name" --tolerance "$TOLERANCE" || failed=1
    else
        tail -n 30 "$WORK/$name"/node*.log
        echo "torchdag_ddp check: FAIL: job $name"
        failed=1
    fi
}

check "$DEVICE-only" gloo "$DEVICE" "$DEVICE"
check "$DEVICE+cpu" gloo "$DEVICE" cpu
check cpu-only gloo cpu cpu
native=$(case $DEVICE in cuda) echo nccl ;; npu) echo hccl ;; esac)
if [ -n "$native" ] && [ "$COUNT" -ge 2 ]; then
    check "$DEVICE-only-$native" "$native" "$DEVICE" "$DEVICE"
fi

echo "== $DEVICE-only, the lines of 89a622e"
if job before gloo "$DEVICE" "$DEVICE" --lines 89a622e --steps 5; then
    echo "they train here (gloo carries $DEVICE tensors)"
else
    grep -m1 -h "Error: " "$WORK"/before/node*.log || tail -n 5 "$WORK"/before/node0.log
fi
[ "$failed" = 0 ] && echo "torchdag_ddp check: PASS" || echo "torchdag_ddp check: FAIL"
exit $failed
