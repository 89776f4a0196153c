"""One torchrun worker of bench_trainer.py: alternates the bare DDP loop and
trainer/ddp.py's training loop in the same process group, so that both see
the same machine load and one launch serves every repetition."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from trainer.config import Config, ranks_from_env
from trainer.ddp import Trainer
from trainer.device import resolve
from trainer.model import SimpleNet, SyntheticRegression


def bare_ddp(steps: int, hidden: int, batch: int = 32, dataset_size: int = 4096) -> float:
    """The shortest correct DDP loop over the same model, data, sampler,
    batch and optimizer as the trainer: no logging, checkpoints or metrics."""
    rank, world = dist.get_rank(), dist.get_world_size()
    data = SyntheticRegression(dataset_size, 0)
    torch.manual_seed(0)
    model = DDP(SimpleNet(hidden))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0, drop_last=True)
    per_epoch = len(sampler) // batch
    step, epoch = 0, 0
    t0 = time.perf_counter()
    while step < steps:
        sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(sampler)))
        for b in range(per_epoch):
            if step >= steps:
                break
            idx = order[b * batch:(b + 1) * batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(data.x[idx]), data.y[idx]).backward()
            opt.step()
            step += 1
        epoch += 1
    return step / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("overhead", "mixed", "record"), required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--hidden", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    ranks = ranks_from_env()
    place = resolve(ranks.local_rank, "cpu", "gloo")
    if args.mode == "record" and os.environ.get("TORCHDAG_RECORD") != "0":
        from torchdag.agents import torchdag_flight

        torchdag_flight.install()  # as trainer/train.py does, before the process group
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    results: dict[str, list] = {"bare": [], "trainer": [], "ddp": [], "buckets": [], "record": []}
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.json")

        def run_trainer(grad_sync: str) -> dict:
            cfg = Config(max_steps=args.steps, epochs=None, hidden=args.hidden, log_every=0,
                         metrics_file=metrics, grad_sync=grad_sync)
            Trainer(cfg, ranks, place).train()
            return json.loads(Path(metrics).read_text()) if ranks.rank == 0 else {}

        for _ in range(args.reps):
            if args.mode == "record":
                results["record"].append(run_trainer("auto").get("steps_per_second"))
            elif args.mode == "overhead":
                results["bare"].append(bare_ddp(args.steps, args.hidden))
                results["trainer"].append(run_trainer("auto").get("steps_per_second"))
            else:
                results["ddp"].append(run_trainer("ddp").get("steps_per_second"))
                m = run_trainer("cpu-buckets")
                results["buckets"].append([m.get("steps_per_second"), m.get("grad_sync_seconds_per_step")])
    if ranks.rank == 0:
        print("RESULT " + json.dumps(results), flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
