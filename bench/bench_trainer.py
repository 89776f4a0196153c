#!/usr/bin/env python3
"""Trainer overhead against a bare DDP loop, the cost of the mixed-device gradient
exchange, and of recording (torchdag/agents/torchdag_flight.py with PyTorch's flight
recorder, against neither).  Real torchrun processes on 127.0.0.1, OMP_NUM_THREADS=1.

    .venv/bin/python bench/bench_trainer.py [--reps 3] [--parts overhead,mixed,record]

Numbers, not pass/fail: each cell is the best of --reps repetitions; within
one torchrun job the two loops alternate, so background load hits both alike."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "bench" / "bench_worker.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(nodes: int, args: list[str], extra_env: dict | None = None) -> dict:
    """One torchrun job of `nodes` x 1 process; returns rank 0's results."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for k in ("TORCHDAG_BACKEND", "TORCHDAG_DEVICE", "TORCHDAG_PG_TIMEOUT", "TORCHDAG_RECORD", "TORCH_FR_BUFFER_SIZE",
              "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_HCCL_TRACE_BUFFER_SIZE"):
        env.pop(k, None)
    env.update(extra_env or {})
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}",
                               f"--node-rank={n}", "--nproc-per-node=1", "--master-addr=127.0.0.1",
                               f"--master-port={port}", "--rdzv-conf=timeout=60", str(WORKER), *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for n in range(nodes)]
    out = ""
    for p in procs:
        text, _ = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"benchmark run failed (exit {p.returncode}):\n{text[-3000:]}")
        out += text
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][0]
    return json.loads(line[len("RESULT "):])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--record-steps", type=int, default=12000,
                    help="steps of each recording run: long enough for windows of 20 s")
    ap.add_argument("--parts", default="overhead,mixed,record",
                    help="which tables, comma-separated: overhead (the trainer's loop), mixed (the gradient "
                         "exchange), record (the collective recording)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    start = time.monotonic()
    reps = str(args.reps)
    rows = []
    for label, nodes, steps in (("1 process", 1, 4000), ("2x1 processes", 2, 1500)) if "overhead" in parts else ():
        r = run(nodes, ["--mode", "overhead", "--steps", str(steps), "--reps", reps])
        rows.append((label, max(r["bare"]), max(r["trainer"])))

    if rows:
        print_overhead(rows, args.reps)
    if "mixed" in parts:
        print_mixed(reps)
    if "record" in parts:
        print_recording(args.reps, args.record_steps)
    print(f"(benchmark took {time.monotonic() - start:.0f} s)")
    return 0


def print_overhead(rows: list, reps: int) -> None:
    print(f"trainer loop vs bare DDP loop (SimpleNet 10->50->10, batch 32/rank, gloo, CPU, "
          f"OMP_NUM_THREADS=1, best of {reps}, alternating in one job)")
    print(f"{'config':<16}{'bare DDP steps/s':>18}{'trainer steps/s':>18}{'overhead':>10}")
    for label, b, t in rows:
        print(f"{label:<16}{b:>18.0f}{t:>18.0f}{(b / t - 1) * 100:>9.1f}%")
    print("overhead = bare/trainer - 1 (target <= 5%)")
    print()


def print_mixed(reps: str) -> None:
    print(f"mixed-device gradient exchange (--grad-sync cpu-buckets vs DDP), 2x1 processes, best of {reps}")
    print(f"{'model':<16}{'params':>9}{'DDP steps/s':>13}{'buckets steps/s':>17}{'exchange ms/step':>18}")
    for hidden, steps in ((50, 1500), (4096, 300)):
        r = run(2, ["--mode", "mixed", "--steps", str(steps), "--hidden", str(hidden), "--reps", reps])
        sps, exchange = max(r["buckets"])
        n_params = 10 * hidden + hidden + hidden * 10 + 10
        print(f"{'10->' + str(hidden) + '->10':<16}{n_params:>9}{max(r['ddp']):>13.0f}{sps:>17.0f}"
              f"{exchange * 1e3:>18.3f}")
    print("exchange = device->CPU copy + gloo all-reduce (includes waiting for the slowest rank)"
          " + CPU->device copy, per step")
    print()


def print_recording(reps: int, steps: int) -> None:
    # Recording is process-wide (the flight recorder's buffer is sized when the first group
    # starts): its runs are jobs of their own, off and on alternating.
    off, on = [], []
    for _ in range(reps):
        off += run(2, ["--mode", "record", "--steps", str(steps), "--reps", "1"],
                   {"TORCHDAG_RECORD": "0", "TORCH_FR_BUFFER_SIZE": "0"})["record"]
        on += run(2, ["--mode", "record", "--steps", str(steps), "--reps", "1"])["record"]
    print(f"recording overhead (the trainer, 2x1 processes, {steps} steps a run, best of {reps} alternating runs)")
    print(f"{'recording':<34}{'steps/s':>10}{'step ms':>10}")
    print(f"{'off (TORCHDAG_RECORD=0, no FR)':<34}{max(off):>10.0f}{1e3 / max(off):>10.3f}")
    print(f"{'on (torchdag_flight + FR 2000)':<34}{max(on):>10.0f}{1e3 / max(on):>10.3f}")
    print(f"step time on vs off: {(max(off) / max(on) - 1) * 100:+.1f}% (target <= 2%)")


if __name__ == "__main__":
    sys.exit(main())
