"""Gradient averaging over gloo through CPU buffers, for mixed-device jobs.

DDP over gloo cannot take NPU tensors, and a job whose ranks sit on different
device kinds (an NPU node plus a CPU node) has no common device backend at
all.  So every rank computes on its own device, and after backward the
gradients are packed into a few flat CPU buckets (like DDP's 25 MB buckets,
in reverse parameter order), all-reduced over gloo, averaged and copied back.
One collective per bucket instead of one per tensor keeps the per-step
latency near one all-reduce for small models.  Every rank of a job must use
this path (or every rank DDP): the two exchange different collectives.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


class _Bucket:
    def __init__(self, params: list[torch.nn.Parameter], dtype: torch.dtype, pin: bool):
        self.params = params
        self.offsets = []
        total = 0
        for p in params:
            self.offsets.append((total, p.numel()))
            total += p.numel()
        self.buffer = torch.zeros(total, dtype=dtype, pin_memory=pin)


class CpuBucketGradSync:
    def __init__(self, module: torch.nn.Module, device: torch.device, bucket_mb: float = 25.0, group=None):
        self.device = device
        self.group = group
        self.world_size = dist.get_world_size(group)
        # Pinned host memory makes the CUDA copies asynchronous; other devices
        # (npu) go through ordinary pageable memory.
        self.pin = device.type == "cuda"
        self.non_blocking = self.pin
        params = [p for p in module.parameters() if p.requires_grad]
        cap = max(1, int(bucket_mb * 1024 * 1024))
        self.buckets: list[_Bucket] = []
        current: list[torch.nn.Parameter] = []
        size = 0
        # Reverse order: the last layers' gradients are ready first in backward,
        # the same heuristic DDP uses for its buckets.
        for p in reversed(params):
            nbytes = p.numel() * p.element_size()
            if current and (size + nbytes > cap or p.dtype != current[0].dtype):
                self.buckets.append(_Bucket(current, current[0].dtype, self.pin))
                current, size = [], 0
            current.append(p)
            size += nbytes
        if current:
            self.buckets.append(_Bucket(current, current[0].dtype, self.pin))
        self.seconds = 0.0  # time spent in sync(), for the metrics and the benchmark
        self.calls = 0

    def _gather(self, bucket: _Bucket, use_grad: bool) -> None:
        for p, (off, n) in zip(bucket.params, bucket.offsets):
            src = p.grad if use_grad else p.data
            view = bucket.buffer[off:off + n]
            if src is None:
                view.zero_()  # an unused parameter contributes a zero gradient
            else:
                view.copy_(src.detach().reshape(-1), non_blocking=self.non_blocking)
        if self.non_blocking:
            torch.cuda.current_stream(self.device).synchronize()

    def _scatter(self, bucket: _Bucket, use_grad: bool) -> None:
        for p, (off, n) in zip(bucket.params, bucket.offsets):
            view = bucket.buffer[off:off + n].view_as(p)
            if use_grad:
                if p.grad is None:
                    p.grad = torch.empty_like(p)
                p.grad.copy_(view, non_blocking=self.non_blocking)
            else:
                p.data.copy_(view, non_blocking=self.non_blocking)

    @torch.no_grad()
    def broadcast_parameters(self, src: int = 0) -> None:
        """Start every rank from rank ``src``'s weights, as DDP does."""
        for bucket in self.buckets:
            self._gather(bucket, use_grad=False)
            dist.broadcast(bucket.buffer, src=src, group=self.group)
            self._scatter(bucket, use_grad=False)
        self._finish_copies()

    @torch.no_grad()
    def sync(self) -> None:
        """Average gradients across all ranks (call after backward)."""
        start = time.perf_counter()
        works = []
        for bucket in self.buckets:
            # Packing the next bucket overlaps with gloo reducing this one.
            self._gather(bucket, use_grad=True)
            works.append(dist.all_reduce(bucket.buffer, op=dist.ReduceOp.SUM, group=self.group, async_op=True))
        for bucket, work in zip(self.buckets, works):
            work.wait()
            bucket.buffer.div_(self.world_size)
            self._scatter(bucket, use_grad=True)
        self._finish_copies()
        self.seconds += time.perf_counter() - start
        self.calls += 1

    def _finish_copies(self) -> None:
        # The next _gather overwrites the buffers; host->device copies must
        # have read them by then.
        if self.non_blocking:
            torch.cuda.current_stream(self.device).synchronize()
