"""The lines a user's own DDP script needs under a torchdag Workflow (docs/byo.md):

    import torchdag_ddp                                       # found beside the runner (record.py)
    device = torchdag_ddp.setup()                             # device and process group, from the Workflow
    local_rank = torchdag_ddp.device()                        # for a script's .to(local_rank)
    model = torchdag_ddp.DDP(model, device_ids=[local_rank])  # in place of DDP(...)
    resuming = torchdag_ddp.restart() > 0                     # resume from your newest checkpoint

setup() takes the device from TORCHDAG_DEVICE (npu, cuda, cpu) and LOCAL_RANK, and starts the
process group with TORCHDAG_BACKEND and TORCHDAG_PG_TIMEOUT, as the render header says; a later
`init_process_group(...)` in the script (one that hard-codes "hccl") is then a no-op that says
which backend runs.

DDP() is torch's DistributedDataParallel under hccl and nccl, and under gloo when every rank
computes on the CPU. gloo carries no NPU tensors: DistributedDataParallel's constructor already
fails there ("No backend type associated with device type npu"), when it checks the shapes and
broadcasts rank 0's parameters. So under gloo with any rank on an accelerator (310P across
servers, NPU beside CPU, GPU beside CPU) every rank takes CpuBucketDDP instead: the parameters
and buffers start from rank 0's through CPU copies, the gradients are averaged through flat CPU
buckets (one gloo all-reduce per bucket) at the end of each backward, the buffers are broadcast
at forward as DDP's broadcast_buffers does, and no_sync() accumulates gradients as DDP's does.
torchdag's own trainer (trainer/ddp.py) uses the same classes. Standard library and torch only
(torch 2.1 and later, Python 3.8 and later).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time

import torch
import torch.distributed as dist

if __package__:  # imported as torchdag.agents.torchdag_ddp (torchdag's trainer)
    from . import torchdag_device
else:  # beside the runner (record.py puts this folder on the path), or the script
    import torchdag_device

_init_process_group = dist.init_process_group
GLOO_DEVICES = ("cpu", "cuda")  # the tensors a gloo process group takes


def device_of(kind: str, local_rank: int) -> torch.device:
    """The device `kind`:`local_rank`, made current. A kind torch does not know is registered
    by its package, torch_<kind> (torch_npu for npu), as torch.<kind> (torchdag_device.py)."""
    return torchdag_device.make_current(kind, local_rank)


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


def restart() -> int:
    """How many times this rank's training was started before this run: 0 on the first start,
    more when it must resume from its newest checkpoint. The sum of TORCHDAG_RESTART (job
    recovery: the whole job's attempt; node recovery: this pod's own retry, so a node that
    replaces a lost one reads 1) and TORCHELASTIC_RESTART_COUNT (torchrun's restarts of this
    node's workers: a node that survives a lost peer restarts them into the re-formed group,
    and launcher.maxRestarts restarts them in place)."""
    return sum(int(os.environ.get(name) or 0) for name in ("TORCHDAG_RESTART", "TORCHELASTIC_RESTART_COUNT"))


WORDS_BYTES = 64  # a device kind and a mode, with room to spare


def gather_words(text: str, group=None) -> list[str]:
    """Each rank's short ASCII text, gathered on every rank through one all_gather of a byte
    tensor. Not all_gather_object: torch unpickles its result through numpy (tensor.numpy()),
    which PyPI's torch does not install, so in a user's image of python3 and torch alone it fails
    with "Numpy is not available" (the local cluster's real nodes showed it)."""
    raw = text.encode()[:WORDS_BYTES]
    mine = torch.zeros(WORDS_BYTES + 1, dtype=torch.uint8)
    mine[0] = len(raw)
    mine[1:1 + len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    return [bytes(t[1:1 + int(t[0])].tolist()).decode() for t in every]


def choose_exchange(device: torch.device, requested: str = "auto", group=None) -> tuple[str, list[str]]:
    """How the job averages gradients, the same answer on every rank: "ddp" (torch's
    DistributedDataParallel) or "cpu-buckets" (CpuBucketDDP); and each rank's device kind (known
    under gloo only, else []). Under gloo the ranks gather each other's device kind and request
    (one gather of a few bytes): "auto" takes the CPU buckets as soon as any rank computes on an
    accelerator. Raises ValueError, on every rank, for a choice that cannot work."""
    if dist.get_backend(group) != "gloo":
        if requested == "cpu-buckets":
            raise ValueError(f"the cpu-buckets exchange needs backend gloo, not {dist.get_backend(group)}")
        return "ddp", []
    seen = [words.split(" ", 1) for words in gather_words(f"{device.type} {requested}", group)]
    kinds = [kind for kind, _ in seen]
    asked = sorted({mode for _, mode in seen})
    if len(asked) != 1:
        raise ValueError(f"ranks disagree on the gradient exchange: {asked}")
    refused = sorted({kind for kind in kinds if kind not in GLOO_DEVICES})
    if asked[0] == "ddp" and refused:
        raise ValueError(f"DDP over gloo cannot take {'/'.join(k.upper() for k in refused)} tensors; "
                         "use the CPU buckets (torchdag_ddp.DDP, --grad-sync auto or cpu-buckets)")
    if asked[0] != "auto":
        return asked[0], kinds
    return ("ddp" if all(kind == "cpu" for kind in kinds) else "cpu-buckets"), kinds


def DDP(module: torch.nn.Module, device_ids=None, output_device=None, **kwargs) -> torch.nn.Module:
    """torch's DistributedDataParallel(module, ...), or under gloo with an accelerator anywhere
    in the job CpuBucketDDP(module, ...): call it where the script called DDP, on every rank.
    device_ids and output_device are the module's own device, as DDP wants them (None on CPU,
    so a CPU rank of a mixed job runs a script written with device_ids=[local_rank])."""
    here = _device_of_module(module)
    mode, _ = choose_exchange(here, "auto", kwargs.get("process_group"))
    if mode == "cpu-buckets":
        return CpuBucketDDP(module, **kwargs)
    if here.type == "cpu":
        device_ids = output_device = None
    elif device_ids is None:
        device_ids = [here.index]
    return torch.nn.parallel.DistributedDataParallel(module, device_ids=device_ids, output_device=output_device,
                                                     **kwargs)


def exchange_on_cpu(model) -> bool:
    """Superseded by DDP() (docs/byo.md); kept so that a script written for it still runs."""
    print("[torchdag_ddp] exchange_on_cpu() does nothing now: call torchdag_ddp.DDP(model) in place of "
          "DDP(model) (docs/byo.md)", flush=True)
    return False


def _device_of_module(module: torch.nn.Module) -> torch.device:
    devices = {t.device for t in list(module.parameters()) + list(module.buffers())}
    if len(devices) != 1:
        raise ValueError(f"torchdag_ddp.DDP takes a module on one device, not on {sorted(map(str, devices))}")
    return devices.pop()


class CpuBuckets:
    """Flat CPU buffers over a list of tensors (each bucket one dtype, at most `bucket_mb`), so
    that gloo moves them in one collective per bucket, whatever device the tensors live on.

    Tensors are bucketed last first, as DDP does: the last layers' gradients are ready first.
    With CUDA tensors the buffers are pinned and the copies asynchronous; other devices copy
    through pageable memory."""

    def __init__(self, tensors: list[torch.Tensor], device: torch.device, bucket_mb: float = 25.0, group=None):
        self.group = group
        self.pin = device.type == "cuda"
        self.device = device
        cap = max(1, int(bucket_mb * 1024 * 1024))
        self.buckets: list[tuple[list[torch.Tensor], list[tuple[int, int]], torch.Tensor]] = []
        run: list[torch.Tensor] = []
        size = 0
        for t in reversed(tensors):
            nbytes = t.numel() * t.element_size()
            if run and (size + nbytes > cap or t.dtype != run[0].dtype):
                self._add(run)
                run, size = [], 0
            run.append(t)
            size += nbytes
        if run:
            self._add(run)
        self.seconds = 0.0  # time spent averaging gradients (metrics, bench)
        self.calls = 0

    def _add(self, tensors: list[torch.Tensor]) -> None:
        spans, total = [], 0
        for t in tensors:
            spans.append((total, t.numel()))
            total += t.numel()
        self.buckets.append((tensors, spans, torch.zeros(total, dtype=tensors[0].dtype, pin_memory=self.pin)))

    def _pack(self, bucket, grads: bool) -> None:
        tensors, spans, flat = bucket
        for t, (start, n) in zip(tensors, spans):
            source = t.grad if grads else t
            if source is None:
                flat[start:start + n].zero_()  # a parameter without a gradient contributes zeros
            else:
                flat[start:start + n].copy_(source.detach().reshape(-1), non_blocking=self.pin)
        self._wait_for_copies()

    def _unpack(self, bucket, grads: bool) -> None:
        tensors, spans, flat = bucket
        for t, (start, n) in zip(tensors, spans):
            view = flat[start:start + n].view_as(t)
            if not grads:
                # .data: no version bump, so a graph that saved the tensor (a buffer read by an
                # earlier forward whose backward is still to come) stays valid, as under DDP.
                t.data.copy_(view, non_blocking=self.pin)
            elif t.grad is None:
                t.grad = view.to(t.device, copy=True)
            else:
                t.grad.copy_(view, non_blocking=self.pin)

    def _wait_for_copies(self) -> None:
        # The buffers are read by gloo (after a pack) or written by the next pack (after an
        # unpack): the device's copies must be done by then.
        if self.pin:
            torch.cuda.current_stream(self.device).synchronize()

    @torch.no_grad()
    def broadcast(self, src: int = 0) -> None:
        """Every rank's tensors become rank `src`'s (a global rank, as dist.broadcast's)."""
        for bucket in self.buckets:
            self._pack(bucket, grads=False)
            dist.broadcast(bucket[2], src=src, group=self.group)
            self._unpack(bucket, grads=False)
        self._wait_for_copies()

    @torch.no_grad()
    def average_gradients(self) -> None:
        """Every rank's .grad becomes the mean of all ranks' (a missing one counts as zeros)."""
        start = time.perf_counter()
        world = dist.get_world_size(self.group)
        works = []
        for bucket in self.buckets:  # packing the next bucket overlaps gloo reducing this one
            self._pack(bucket, grads=True)
            works.append(dist.all_reduce(bucket[2], op=dist.ReduceOp.SUM, group=self.group, async_op=True))
        for bucket, work in zip(self.buckets, works):
            work.wait()
            bucket[2].div_(world)
            self._unpack(bucket, grads=True)
        self._wait_for_copies()
        self.seconds += time.perf_counter() - start
        self.calls += 1


class CpuBucketDDP(torch.nn.Module):
    """DistributedDataParallel's contract over gloo for a module on any device, its tensors
    exchanged through CpuBuckets. Every rank of the job must use it (or every rank DDP): the two
    run different collectives.

    - construction: rank 0's parameters and buffers (with broadcast_buffers) on every rank;
    - backward: the gradients averaged over the ranks once the backward pass is done, unless
      the forward ran under no_sync(); the first backward after no_sync() averages what was
      accumulated, as DDP's;
    - forward: rank 0's buffers broadcast first (broadcast_buffers), when the previous forward
      was one whose gradients are averaged, as DDP's; inputs moved to the module's device;
    - `.module` is the wrapped module, and the state_dict's keys start with `module.`.

    DDP's options that change only how DDP schedules its own work (find_unused_parameters,
    gradient_as_bucket_view, static_graph, dim, device_ids, output_device) are accepted and
    have nothing to do here: a parameter without a gradient counts as zeros."""

    def __init__(self, module: torch.nn.Module, process_group=None, bucket_cap_mb: float | None = None,
                 broadcast_buffers: bool = True, init_sync: bool = True, find_unused_parameters: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False, dim: int = 0,
                 device_ids=None, output_device=None):
        super().__init__()
        self.module = module
        self.device = _device_of_module(module)
        self.process_group = process_group
        self.broadcast_buffers = broadcast_buffers
        self.require_backward_grad_sync = True  # False under no_sync()
        self.require_forward_param_sync = True  # whether the next forward broadcasts the buffers
        bucket_mb = 25.0 if bucket_cap_mb is None else bucket_cap_mb
        trained = [p for p in module.parameters() if p.requires_grad]
        self.grad_buckets = CpuBuckets(trained, self.device, bucket_mb, process_group)
        self._buffer_buckets: CpuBuckets | None = None
        self._averaging = False  # the backward of this forward averages the gradients
        self._queued = False
        if init_sync:
            states = list(module.parameters()) + (list(module.buffers()) if broadcast_buffers else [])
            CpuBuckets(states, self.device, bucket_mb, process_group).broadcast(self._rank0())
        for p in trained:
            p.register_post_accumulate_grad_hook(self._gradient_ready)

    def _rank0(self) -> int:
        return 0 if self.process_group is None else dist.get_global_rank(self.process_group, 0)

    def _gradient_ready(self, param: torch.Tensor) -> None:
        # The first gradient of an averaging backward queues the exchange for the end of that
        # backward, when every gradient has been accumulated.
        if self._averaging and not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

    def _backward_done(self) -> None:
        self._averaging = self._queued = False
        self.grad_buckets.average_gradients()

    def _sync_buffers(self) -> None:
        buffers = list(self.module.buffers())
        cached = self._buffer_buckets
        held = [(id(t), t.shape) for bucket in (cached.buckets if cached else []) for t in bucket[0]]
        if cached is None or held != [(id(t), t.shape) for t in reversed(buffers)]:
            # First use, or the module replaced a buffer: bucket what it holds now.
            cached = self._buffer_buckets = CpuBuckets(buffers, self.device, group=self.process_group)
        cached.broadcast(self._rank0())

    def forward(self, *inputs, **kwargs):
        if self.require_forward_param_sync and self.broadcast_buffers and any(True for _ in self.module.buffers()):
            self._sync_buffers()
        output = self.module(*_to_device(inputs, self.device), **_to_device(kwargs, self.device))
        averaging = torch.is_grad_enabled() and self.require_backward_grad_sync
        self.require_forward_param_sync = averaging
        if torch.is_grad_enabled():
            self._averaging, self._queued = averaging, False  # (a backward that raised queued nothing)
        return output

    @contextlib.contextmanager
    def no_sync(self):
        """Gradients of the forward and backward passes inside accumulate on this rank only."""
        before = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before


def _to_device(value, device: torch.device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_to_device(v, device) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value
