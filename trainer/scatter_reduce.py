"""The write-up's data-parallel toy, made executable across ranks.

A large array lives on the CPU of rank 0.  Each round it is cut into one
chunk per rank; every rank receives its chunk's indices and data, moves the
data to its own device, runs ``Add()`` there, and the chunks come back into a
dict keyed by device id (the global rank; the value also names the device)
from which rank 0 updates its CPU copy.  After every round the copy is
compared with the same computation done serially on the CPU.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class Add(torch.nn.Module):
    """The write-up's per-device computation: add a constant."""

    def __init__(self, value: float = 1.0):
        super().__init__()
        self.register_buffer("value", torch.tensor(value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.value


def chunk_bounds(n: int, world: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) per rank; sizes differ by at most one."""
    base, extra = divmod(n, world)
    bounds, start = [], 0
    for r in range(world):
        end = start + base + (1 if r < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def run(rank: int, world: int, device: torch.device, backend: str, rounds: int, size: int, seed: int,
        fault_rank: int | None, log) -> bool:
    """Returns True when every round matched the serial computation (on every rank)."""
    # Collectives of hccl/nccl need device tensors; gloo takes CPU tensors
    # (and is the only backend that can take them from an NPU job).
    comm = device if backend in ("hccl", "nccl") else torch.device("cpu")
    bounds = chunk_bounds(size, world)
    width = max(e - s for s, e in bounds)
    add = Add(1.0).to(device)

    gen = torch.Generator().manual_seed(seed)
    array = torch.randn(size, generator=gen) if rank == 0 else None
    expected = array.clone() if rank == 0 else None
    names: list[str] = [""] * world
    dist.all_gather_object(names, f"{device}")

    all_ok = True
    for rnd in range(1, rounds + 1):
        # Scatter: rank 0 packs (indices, data) per rank, padded to one width
        # because scatter needs equal shapes; the real length rides along.
        idx_out = torch.empty(width, dtype=torch.int64, device=comm)
        data_out = torch.empty(width, dtype=torch.float32, device=comm)
        if rank == 0:
            idx_list, data_list = [], []
            for s, e in bounds:
                idx = torch.full((width,), -1, dtype=torch.int64)
                idx[: e - s] = torch.arange(s, e)
                data = torch.zeros(width)
                data[: e - s] = array[s:e]
                idx_list.append(idx.to(comm))
                data_list.append(data.to(comm))
            dist.scatter(idx_out, idx_list, src=0)
            dist.scatter(data_out, data_list, src=0)
        else:
            dist.scatter(idx_out, None, src=0)
            dist.scatter(data_out, None, src=0)

        # Compute on this rank's own device.
        valid = idx_out >= 0
        result = add(data_out.to(device)).to(comm)
        if fault_rank == rank:
            result = result + 0.5  # deliberate error: the check below must catch it
        result = torch.where(valid, result, torch.zeros_like(result))

        # Reduce: every chunk comes back, keyed by device id.
        idx_all = [torch.empty_like(idx_out) for _ in range(world)]
        data_all = [torch.empty_like(result) for _ in range(world)]
        dist.all_gather(idx_all, idx_out)
        dist.all_gather(data_all, result)

        ok_flag = torch.ones(1, dtype=torch.int64, device=comm)
        if rank == 0:
            reduced = {r: (idx_all[r].cpu(), data_all[r].cpu(), names[r]) for r in range(world)}
            for idx, data, _ in reduced.values():
                keep = idx >= 0
                array[idx[keep]] = data[keep]
            expected = expected + 1.0  # the serial computation
            err = (array - expected).abs().max().item()
            ok = err <= 1e-6
            kinds = sorted({n.split(":")[0] for n in names})
            log(f"scatter-reduce: round {rnd}/{rounds}: {size} elements over {world} ranks "
                f"({', '.join(kinds)}) max|err| {err:.3g} -> {'ok' if ok else 'MISMATCH'}")
            ok_flag.fill_(1 if ok else 0)
        dist.broadcast(ok_flag, src=0)
        if not bool(ok_flag.item()):
            all_ok = False
            break
    return all_ok
