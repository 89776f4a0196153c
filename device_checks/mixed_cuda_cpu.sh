#!/bin/bash
# Device check (needs one CUDA GPU): a 2-rank gloo job with rank 0 on CUDA and
# rank 1 on CPU -- two torchrun "nodes" on 127.0.0.1 -- must train through the
# trainer's CPU-buffer gradient exchange, end with the same parameters on both
# ranks, match an all-CPU DDP run of the same seed, and pass scatter-reduce.
# Exits non-zero on any failure.  Usage: [PYTHON=python3] device_checks/mixed_cuda_cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 TORCHDAG_PG_TIMEOUT=60
unset TORCHDAG_DEVICE TORCHDAG_BACKEND RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

"$PY" -c 'import torch, sys
ok = torch.cuda.is_available()
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())
sys.exit(0 if ok else "mixed_cuda_cpu: FAIL: no CUDA device visible to torch")'

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run_job NAME DEVICE0 DEVICE1 TRAINER-ARGS...: node 0 on DEVICE0, node 1 on DEVICE1.
run_job() {
    local name=$1 dev0=$2 dev1=$3
    shift 3
    local port
    port=$(free_port)
    mkdir -p "$WORK/$name"
    local pids=()
    for node in 0 1; do
        local dev=$dev0
        [ "$node" = 1 ] && dev=$dev1
        TORCHDAG_DEVICE=$dev TORCHDAG_BACKEND=gloo timeout 300 "$PY" -m torch.distributed.run \
            --nnodes=2 --node-rank=$node --nproc-per-node=1 --master-addr=127.0.0.1 --master-port="$port" \
            --rdzv-conf=timeout=60 trainer/train.py "$@" >"$WORK/$name/node$node.log" 2>&1 &
        pids+=($!)
    done
    local rc=0
    for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
    if [ "$rc" != 0 ]; then
        tail -n 40 "$WORK/$name"/node*.log
        echo "mixed_cuda_cpu: FAIL: job $name exited $rc"
        exit 1
    fi
}

common=(--max-steps 200 --seed 7 --log-every 50)
run_job mixed cuda cpu "${common[@]}" --params-file "$WORK/mixed/p" --metrics-file "$WORK/mixed/m.json"
run_job cpu cpu cpu "${common[@]}" --params-file "$WORK/cpu/p" --metrics-file "$WORK/cpu/m.json"
run_job scatter cuda cpu --type scatter-reduce --rounds 3 --array-size 1000003
grep "scatter-reduce: round" "$WORK/scatter/node0.log"
grep -q "round 3/3.*-> ok" "$WORK/scatter/node0.log" || { echo "mixed_cuda_cpu: FAIL: scatter-reduce"; exit 1; }

"$PY" device_checks/compare_params.py "$WORK"
