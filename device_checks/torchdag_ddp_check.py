"""A user's DDP script with docs/byo.md's lines (marked `# torchdag`), and its verdict.

    torchrun ... torchdag/agents/record.py device_checks/torchdag_ddp_check.py train OUT [options]
    python3 device_checks/torchdag_ddp_check.py compare OUT

`train` runs as every rank of a job, device and backend from the Workflow's variables
(TORCHDAG_DEVICE, TORCHDAG_BACKEND): a BatchNorm model, every rank starting from different
weights (the job must take rank 0's) and reading its own batches, gradient accumulation under
no_sync(), an evaluation forward now and then (DDP then skips the next buffer broadcast), SGD
with momentum. Each rank writes OUT/rank<R>.pt (its parameters and buffers) and OUT/rank<R>.json
(device, exchange, step times). `--lines 89a622e` builds the model as the lines documented before
issue 44 did (DDP(model.to(device), device_ids=...) and exchange_on_cpu(model)): under gloo on an
NPU (or any device gloo refuses) that fails in DDP's constructor.

`compare` trains the same model on the same batches in one process on the CPU (each step's
gradient the mean of the ranks' micro-batch gradients, BatchNorm per rank as under DDP) and
prints each parameter's largest difference from rank 0's and from every other rank's;
exit 1 past --tolerance. device_checks/torchdag_ddp.sh runs the jobs on a GPU or Ascend machine;
tests/trainer/test_torchdag_ddp.py runs it on the stand-in device.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def build(hidden: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.BatchNorm1d(hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 4))


def batch(step: int, micro: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s micro-batch `micro` of step `step`: the same on every machine."""
    g = torch.Generator().manual_seed(1_000_003 * step + 1009 * micro + rank)
    x = torch.randn(size, 8, generator=g)
    return x, torch.tanh(x[:, :4] * 2) + 0.1 * torch.randn(size, 4, generator=g)


def evaluates(step: int, every: int) -> bool:
    return every > 0 and step % every == every - 1


def train(args) -> None:
    import torch.distributed as dist
    import torchdag_ddp  # torchdag
    from torch.nn.parallel import DistributedDataParallel

    device = torchdag_ddp.setup()  # torchdag
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(100 + rank)  # different weights on every rank: the job must start from rank 0's
    model = build(args.hidden).to(device)
    if args.lines == "89a622e":
        model = DistributedDataParallel(model, device_ids=torchdag_ddp.device_ids(device))
        torchdag_ddp.exchange_on_cpu(model)
    else:
        model = torchdag_ddp.DDP(model)  # torchdag
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    held_out = batch(10**6, 0, 0, args.batch)[0].to(device)
    seconds = []
    for step in range(args.steps):
        start = time.perf_counter()
        for micro in range(args.accumulate):
            x, y = batch(step, micro, rank, args.batch)
            last = micro == args.accumulate - 1
            with contextlib.nullcontext() if last else model.no_sync():
                F.mse_loss(model(x.to(device)), y.to(device)).div(args.accumulate).backward()
        optimizer.step()
        optimizer.zero_grad()
        if evaluates(step, args.eval_every):
            model.eval()
            with torch.no_grad():
                model(held_out)
            model.train()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    out = Path(args.out)
    state = {k: v.detach().to("cpu") for k, v in model.module.state_dict().items()}
    torch.save(state, out / f"rank{rank}.pt")
    timed = sorted(seconds[1:] or seconds)  # the first step pays for the allocations
    facts = {"rank": rank, "world": world, "device": str(device), "backend": dist.get_backend(),
             "exchange": type(model).__name__, "steps": args.steps,
             "exchanges": getattr(getattr(model, "grad_buckets", None), "calls", None), "accumulate": args.accumulate,
             "batch": args.batch, "hidden": args.hidden, "eval_every": args.eval_every, "lr": args.lr,
             "step_ms_median": 1e3 * timed[len(timed) // 2], "torch": torch.__version__}
    (out / f"rank{rank}.json").write_text(json.dumps(facts) + "\n")
    print(f"[check] rank {rank}/{world} on {device} over {dist.get_backend()}: {args.steps} steps through "
          f"{type(model).__name__}, median step {facts['step_ms_median']:.2f} ms", flush=True)
    dist.destroy_process_group()


def single_process(facts: dict) -> dict:
    """The job's training in one process on the CPU: rank 0's first weights; per micro-batch,
    every rank's batch through the model (BatchNorm normalises each rank's batch alone, as it
    does under DDP), the gradients averaged over the ranks. Buffers follow no rank's, so only
    the parameters are compared."""
    world = facts["world"]
    torch.manual_seed(100)
    model = build(facts["hidden"])
    optimizer = torch.optim.SGD(model.parameters(), lr=facts["lr"], momentum=0.9)
    for step in range(facts["steps"]):
        for micro in range(facts["accumulate"]):
            for rank in range(world):
                x, y = batch(step, micro, rank, facts["batch"])
                F.mse_loss(model(x), y).div(facts["accumulate"] * world).backward()
        optimizer.step()
        optimizer.zero_grad()
    return {name: p.detach() for name, p in model.named_parameters()}


def compare(args) -> int:
    out = Path(args.out)
    facts = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"), key=lambda p: int(p.stem[4:]))]
    states = [torch.load(out / f"rank{f['rank']}.pt") for f in facts]
    reference = single_process(facts[0])
    print(f"[check] {facts[0]['world']} ranks ({', '.join(f['device'] for f in facts)}) over {facts[0]['backend']}, "
          f"exchange {facts[0]['exchange']}, torch {facts[0]['torch']}; {facts[0]['steps']} steps of "
          f"{facts[0]['accumulate']} micro-batches; median step ms: "
          + ", ".join(f"{f['step_ms_median']:.2f}" for f in facts))
    worst = 0.0
    for name, ref in reference.items():
        vs_single = (states[0][name] - ref).abs().max().item()
        across = max(((s[name] - states[0][name]).abs().max().item() for s in states[1:]), default=0.0)
        worst = max(worst, vs_single, across)
        print(f"[check]   {name:<10} max|rank 0 - single process| {vs_single:.2e}   max|rank r - rank 0| {across:.2e}")
    for name in states[0]:
        if name not in reference:
            across = max(((s[name].double() - states[0][name].double()).abs().max().item() for s in states[1:]),
                         default=0.0)
            worst = max(worst, across)
            print(f"[check]   {name:<22} (buffer) max|rank r - rank 0| {across:.2e}")
    verdict = "PASS" if worst <= args.tolerance else "FAIL"
    print(f"[check] {verdict}: largest difference {worst:.2e} (tolerance {args.tolerance:g})")
    return 0 if verdict == "PASS" else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("train", help="one rank of the job (under torchrun)")
    run.add_argument("out", help="folder for rank<R>.pt and rank<R>.json")
    run.add_argument("--steps", type=int, default=20)
    run.add_argument("--accumulate", type=int, default=2,
                     help="micro-batches per step (all but the last under no_sync)")
    run.add_argument("--batch", type=int, default=16)
    run.add_argument("--hidden", type=int, default=32)
    run.add_argument("--lr", type=float, default=0.05)
    run.add_argument("--eval-every", type=int, default=5, help="an evaluation forward after every Nth step (0: none)")
    run.add_argument("--lines", choices=("now", "89a622e"), default="now",
                     help="docs/byo.md's lines now, or those documented at commit 89a622e")
    check = sub.add_parser("compare", help="the verdict: the ranks against single-process training")
    check.add_argument("out")
    check.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    if args.command == "train":
        train(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
