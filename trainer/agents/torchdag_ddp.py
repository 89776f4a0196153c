"""The few lines a user's own DDP script needs under a torchdag Workflow (docs/byo.md).

    import torchdag_ddp                               # on sys.path under record.py (launcher.recordErrors)
    device = torchdag_ddp.setup()                     # device and process group, from the Workflow's env
    model = DDP(model.to(device), device_ids=torchdag_ddp.device_ids(device))
    torchdag_ddp.exchange_on_cpu(model)               # gloo on NPU, or a mixed job: gradients through CPU
    attempt = torchdag_ddp.restart()                  # 0 on the first run, then 1, 2... (resume then)

setup() takes the device from TORCHDAG_DEVICE (npu, cuda, cpu) and LOCAL_RANK, and starts
the process group with TORCHDAG_BACKEND and TORCHDAG_PG_TIMEOUT, the backend and timeout the
render header names. A later `init_process_group(...)` in the script (one that hard-codes
"hccl", say) is then a no-op that says which backend runs, so the script and the header
cannot silently disagree. gloo cannot carry NPU tensors: exchange_on_cpu() registers a DDP
communication hook that all-reduces each gradient bucket on a CPU copy and copies it back,
so `DDP(model)` keeps working on 310P nodes over gloo and in NPU+CPU jobs. Standard library
and torch only.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

_init_process_group = dist.init_process_group


def device_of(kind: str, local_rank: int) -> torch.device:
    if kind == "npu":
        import torch_npu  # noqa: F401 -- registers the npu device

        torch.npu.set_device(local_rank)
        return torch.device("npu", local_rank)
    if kind == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def device() -> torch.device:
    """This rank's device: TORCHDAG_DEVICE's kind, LOCAL_RANK's index (set as current)."""
    return device_of(os.environ.get("TORCHDAG_DEVICE", "cpu"), int(os.environ.get("LOCAL_RANK", "0")))


def setup() -> torch.device:
    """This rank's device, with the default process group started as the Workflow says."""
    here = device()
    backend = os.environ.get("TORCHDAG_BACKEND") or ("gloo" if here.type == "cpu" else None)
    seconds = os.environ.get("TORCHDAG_PG_TIMEOUT")
    if not dist.is_initialized():
        _init_process_group(backend=backend, **({"timeout": datetime.timedelta(seconds=int(seconds))}
                                                if seconds else {}))

    def already_started(backend=None, *args, **kwargs) -> None:
        if backend and str(backend) != dist.get_backend():
            print(f"[torchdag_ddp] init_process_group({backend!r}) skipped: the process group runs "
                  f"{dist.get_backend()} (TORCHDAG_BACKEND)", flush=True)

    dist.init_process_group = already_started
    return here


def device_ids(device: torch.device) -> list[int] | None:
    """DDP's device_ids: the accelerator's index, None on CPU (DDP's rule)."""
    return None if device.type == "cpu" else [device.index]


def _cpu_allreduce(state, bucket):
    """Average one gradient bucket over the group through a CPU copy (gloo)."""
    group = state or dist.group.WORLD
    grads = bucket.buffer()
    on_cpu = grads.detach().to("cpu")
    work = dist.all_reduce(on_cpu, group=group, async_op=True)
    size = dist.get_world_size(group)
    return work.get_future().then(lambda fut: fut.value()[0].div_(size).to(grads.device))


def exchange_on_cpu(model) -> bool:
    """Under gloo, let DDP exchange gradients through CPU buckets (no-op copies on CPU);
    returns whether the hook was registered."""
    if dist.get_backend() != "gloo":
        return False
    model.register_comm_hook(None, _cpu_allreduce)
    return True


def restart() -> int:
    """TORCHDAG_RESTART: which whole-job attempt this is (0 first); resume from a checkpoint when > 0."""
    return int(os.environ.get("TORCHDAG_RESTART") or 0)
