# A user's own DDP training script, plain torch (no torchdag import), with one fault that
# the environment injects into one rank (issue 41's cases; the local cluster runs it from the
# user's image, /workspace, under the Workflow's record.py):
#   FAULT=raise  rank FAULT_RANK raises ValueError in check_batch() at step FAULT_STEP
#   FAULT=stop   ... SIGSTOPs itself inside the step (a hang: a frozen process)
#   FAULT=loop   ... spins in wait_for_shard(), a Python loop that never ends (no collective)
# The process group's timeout: TORCHDAG_PG_TIMEOUT, as the Workflow sets it. STEPS (default
# 200); WORK: the matrix size of each step's extra compute (default 0: none).
import datetime
import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

FAULT = os.environ.get("FAULT", "")
FAULT_RANK = int(os.environ.get("FAULT_RANK", "1"))
FAULT_STEP = int(os.environ.get("FAULT_STEP", "5"))


def check_batch(batch: torch.Tensor, step: int, rank: int) -> None:
    if FAULT == "raise" and rank == FAULT_RANK and step == FAULT_STEP:
        raise ValueError(f"bad batch at step {step} on rank {rank}: {tuple(batch.shape)}")


def wait_for_shard(rank: int) -> None:
    ready = False
    while not ready:  # the flag is never set: a loop outside any collective
        ready = os.environ.get("SHARD_READY") == str(rank)


def main() -> None:
    seconds = os.environ.get("TORCHDAG_PG_TIMEOUT")
    dist.init_process_group(os.environ.get("TORCHDAG_BACKEND", "gloo"),
                            **({"timeout": datetime.timedelta(seconds=int(seconds))} if seconds else {}))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    work = int(os.environ.get("WORK", "0"))
    steps = int(os.environ.get("STEPS", "200"))
    for step in range(steps):
        batch = torch.randn(32, 64)
        check_batch(batch, step, rank)
        if rank == FAULT_RANK and step == FAULT_STEP and FAULT == "stop":
            print(f"[user] rank {rank} stops itself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        if rank == FAULT_RANK and step == FAULT_STEP and FAULT == "loop":
            print(f"[user] rank {rank} waits for its shard at step {step}", flush=True)
            wait_for_shard(rank)
        if work:
            extra = torch.randn(work, work)
            batch = batch + (extra @ extra).mean()
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 50 == 0:
            print(f"[user] step {step}/{steps} loss {loss.item():.4f}", flush=True)
    print(f"[user] rank {rank}: {steps} steps done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
