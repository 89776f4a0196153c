"""Verdict of device_checks/mixed_cuda_cpu.sh from the files its jobs left."""

import json
import sys
from pathlib import Path

import torch


def main(work: Path) -> int:
    failures = []
    mixed = json.loads((work / "mixed" / "m.json").read_text())
    cpu = json.loads((work / "cpu" / "m.json").read_text())
    print("mixed:", json.dumps({k: mixed.get(k) for k in ("device", "backend", "grad_sync", "first_loss",
                                                           "final_loss", "steps_per_second",
                                                           "grad_sync_seconds_per_step")}))
    print("cpu:  ", json.dumps({k: cpu.get(k) for k in ("device", "grad_sync", "first_loss", "final_loss")}))
    if mixed["device"] != "cuda" or mixed["grad_sync"] != "cpu-buckets":
        failures.append(f"rank 0 should run on cuda with cpu-buckets, metrics say {mixed['device']}/"
                        f"{mixed['grad_sync']}")
    if not mixed["final_loss"] <= mixed["first_loss"] / 2:
        failures.append(f"loss did not halve: {mixed['first_loss']} -> {mixed['final_loss']}")
    p0 = torch.load(work / "mixed" / "p.rank0", weights_only=True)
    p1 = torch.load(work / "mixed" / "p.rank1", weights_only=True)
    ref = torch.load(work / "cpu" / "p.rank0", weights_only=True)
    for name in ref:
        across = (p0[name] - p1[name]).abs().max().item()
        vs_cpu = (p0[name] - ref[name]).abs().max().item()
        print(f"{name:<12} max|cuda rank - cpu rank| {across:.2e}   max|mixed - all-CPU DDP| {vs_cpu:.2e}")
        # The ranks apply the same averaged gradient; only last-bit rounding
        # of the optimizer arithmetic may differ between the devices.
        if across > 1e-5:
            failures.append(f"{name}: ranks disagree by {across:.3g}")
        # Against all-CPU DDP: cuBLAS vs CPU matmul rounding, over 200 steps.
        if vs_cpu > 1e-3:
            failures.append(f"{name}: mixed job differs from the all-CPU job by {vs_cpu:.3g}")
    for f in failures:
        print("mixed_cuda_cpu: FAIL:", f)
    if not failures:
        print("mixed_cuda_cpu: PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
