# A training script in the style of the hand-written jobs torchdag replaces (issue 27): the
# process group hard-coded to hccl, tensors moved to `local_rank`. The lines docs/byo.md asks
# for end in `# torchdag`; the script's own hccl call then runs as a no-op that names the
# backend the Workflow chose (gloo here).
import os

import torch
import torch.distributed as dist
import torchdag_ddp  # torchdag
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: F401 (the script's own; torchdag_ddp.DDP builds the model now)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torchdag_ddp.setup()  # torchdag
    dist.init_process_group("hccl")
    local_rank = torchdag_ddp.device()  # torchdag
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to(local_rank)
    model = torchdag_ddp.DDP(model)  # torchdag
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(20):
        batch = torch.randn(8, 16).to(local_rank)
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    weights = model.module.weight.detach().to("cpu")
    gathered = [torch.empty_like(weights) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, weights)
    same = all(torch.equal(weights, other) for other in gathered)
    print(f"[original] rank {dist.get_rank()}/{dist.get_world_size()}: 20 steps, replicas equal: {same}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
