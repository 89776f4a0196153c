"""Preemption: a stop signal to any rank ends every rank at the same step boundary, with
that step saved (trainer/train.py's loop uses these; docs/trainer.md has the failure model)."""

from __future__ import annotations

import os
import signal

import torch
import torch.distributed as dist

# torchrun forwards the signal it gets (SIGTERM from Kubernetes or Argo, SIGINT
# from a terminal, SIGHUP) to every worker's process group, then SIGKILLs the
# workers after its --shutdown-timeout (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, 30 s).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopRequest:
    """Records the first stop signal this rank receives while it trains.

    The handler only sets a number; StopAgreement sums "got one" over all
    ranks once per step, so every rank -- also those on nodes that got no
    signal -- learns of the request at the same step boundary, and all of
    them save that step and exit with EXIT_PREEMPTED together. Outside the
    training loop the default action applies (a rank stuck before its first
    step has no progress to save and should not outlive its grace period)."""

    def __init__(self):
        self.signum = 0
        self.agreed = False  # set by the loop: the handlers then stay until the process exits
        self._previous: dict = {}

    def _handler(self, signum, frame):
        if not self.signum:
            self.signum = signum

    def __enter__(self):
        for sig in STOP_SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread (library use): no graceful stop
                break
        return self

    def __exit__(self, *exc):
        if self.agreed:
            # torchrun may still forward a signal while this rank writes its
            # metrics and leaves; it must not turn exit 75 into a kill.
            return
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()


class StopFlagCarrier(torch.nn.Module):
    """The model plus one 1-element parameter, ``stop_flag``, whose gradient
    says whether this rank received a stop signal, so that DDP (or the CPU
    buckets) averages it with the real gradients, in the same all-reduce.

    ``stop_flag`` stays 0 (no optimizer sees it), so ``loss + term()`` is the
    loss exactly, while the gradient of ``term()`` with respect to
    ``stop_flag`` is 1 on a signalled rank and 0 elsewhere. Only the inner
    model is saved."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        super().__init__()
        self.model = model
        self.stop_flag = torch.nn.Parameter(torch.zeros(1, device=device))
        # Plain attributes, not buffers: DDP would broadcast buffers every step.
        self._values = (torch.zeros(1, device=device), torch.ones(1, device=device))

    def forward(self, x):
        return self.model(x)

    def term(self, signalled: bool) -> torch.Tensor:
        return torch.dot(self.stop_flag, self._values[signalled])


class StopAgreement:
    """Once per step, every rank learns how many ranks had received a stop signal.

    gloo (DDP or cpu-buckets): the count rides in the gradient all-reduce
    (StopFlagCarrier); measured here, a separate 4-byte all-reduce per step
    cost SimpleNet 20-45 % more CPU per step, the carrier a few %.
    nccl/hccl: one small asynchronous all-reduce over the job's gloo group,
    started after backward and awaited after the optimizer step -- CPU
    tensors, so no device synchronisation per step."""

    def __init__(self, request: StopRequest, group, world_size: int, carrier: StopFlagCarrier | None = None):
        self.request, self.group, self.world_size, self.carrier = request, group, world_size, carrier
        self._count: torch.Tensor | None = None
        self._work = None

    def loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to call backward() on."""
        if self.carrier is None:
            return loss
        return loss + self.carrier.term(bool(self.request.signum))

    def start(self) -> None:
        """After backward (and the gradient exchange), before the optimizer step."""
        if self.carrier is None:
            self._count = torch.tensor([1 if self.request.signum else 0], dtype=torch.int32)
            self._work = dist.all_reduce(self._count, group=self.group, async_op=True)

    def result(self) -> int:
        """How many ranks had received a stop signal: the same number on every rank."""
        if self.carrier is not None:
            flag = self.carrier.stop_flag
            mean = float(flag.grad.item())  # averaged over the ranks like every gradient
            flag.grad = None  # not in the optimizer, so nobody else clears it
            return round(mean * self.world_size)
        self._work.wait()
        return int(self._count.item())


def stop_agent_restarts(log) -> None:
    """Stop this node's torchrun from restarting its workers after a preemption.

    A worker's exit 75 is a failure to torchrun: with --max-restarts left,
    an agent whose node got no signal would start new workers, and they would
    wait in init_process_group for peers that are gone (measured: still
    waiting 120 s later). A preempted job must be restarted as a whole, so
    local rank 0 sends its own agent SIGTERM: the agent forwards it to its
    workers (who are already stopping and ignore it), waits for them and
    exits instead of restarting. Only done when the parent really is a
    torchelastic agent with restarts left."""
    try:
        left = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) - int(
            os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return
    if left <= 0:
        return
    agent = os.getppid()
    try:
        with open(f"/proc/{agent}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return
    launchers = (b"torchrun", b"torch.distributed.run", b"torch.distributed.launch")
    if not any(name in arg for arg in argv[:3] for name in launchers):
        return
    log(f"asking torchrun (pid {agent}) to stop rather than restart workers ({left} restarts left): "
        "the job was preempted")
    os.kill(agent, signal.SIGTERM)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
