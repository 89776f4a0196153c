"""The DDP training loop of one rank, split the way pytorch/examples' multinode DDP tutorial
splits it: `Trainer.__init__` builds the job and loads the newest snapshot
(`_load_snapshot`), `train` runs epochs (`_run_epoch`) of batches (`_run_batch`) and saves
snapshots (`_save_snapshot`). What torchdag adds: the ranks agree on a stop signal and stop
at the same step (trainer/preemption.py), snapshots survive a lost node (trainer/distckpt.py),
and over gloo with an accelerator in the job (310P across servers, NPU beside CPU) the
gradients go through CPU buckets (torchdag/agents/torchdag_ddp.py, the helper users' scripts
import, so that both take the same path).
"""

from __future__ import annotations

import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from torchdag.agents.torchdag_ddp import CpuBucketDDP, choose_exchange
from trainer import checkpoint, distckpt
from trainer.config import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PREEMPTED,
    Config,
    LaunchError,
    Ranks,
    expand_checkpoint_dir,
    node_rank_from_env,
)
from trainer.device import DeviceError, Placement
from trainer.model import SimpleNet, SyntheticRegression
from trainer.preemption import StopAgreement, StopFlagCarrier, StopRequest, signal_name, stop_agent_restarts
from trainer.progress import ProgressFile, StallReporter


class Job:
    """What every run type shares: the rank, its device, its log lines and metrics."""

    def __init__(self, cfg: Config, ranks: Ranks, place: Placement):
        self.cfg, self.ranks, self.place = cfg, ranks, place
        self.rank = ranks.rank
        self.node_rank = node_rank_from_env()

    def log(self, msg: str) -> None:
        if self.rank == 0:
            print(f"[trainer] {msg}", flush=True)

    def node_log(self, msg: str) -> None:
        """Once per node (local rank 0), with the node rank."""
        if self.ranks.local_rank == 0:
            node = "?" if self.node_rank is None else self.node_rank
            print(f"[trainer] node {node}: {msg}", flush=True)

    def write_metrics(self, metrics: dict) -> None:
        if self.rank != 0 or not self.cfg.metrics_file:
            return
        path = self.cfg.metrics_file
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(metrics, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)


class Trainer(Job):
    def __init__(self, cfg: Config, ranks: Ranks, place: Placement):
        super().__init__(cfg, ranks, place)
        dev = place.device
        # gloo collectives take CPU tensors; hccl/nccl take device tensors.
        self.comm_device = dev if place.backend in ("hccl", "nccl") else torch.device("cpu")
        self.ckpt_dir = expand_checkpoint_dir(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
        # Who writes checkpoints (and reads them on resume): global rank 0, or
        # with node-local storage every node's local rank 0, into its own directory.
        self.ckpt_writer = ranks.local_rank == 0 if cfg.checkpoint_storage == "node-local" else ranks.rank == 0
        # Small CPU-side collectives (stop flag, RNG states, checkpoint broadcast) go over
        # gloo: the default group when the job runs gloo, else a gloo group of their own
        # (no device syncs for them), made by every rank in the same order.
        self.cpu_group = dist.new_group(backend="gloo") if place.backend != "gloo" else None

        data = SyntheticRegression(cfg.dataset_size, cfg.seed)
        self.sampler = DistributedSampler(data, num_replicas=ranks.world_size, rank=ranks.rank,
                                          shuffle=True, seed=cfg.seed, drop_last=True)
        self.steps_per_epoch = len(self.sampler) // cfg.batch_size
        if self.steps_per_epoch < 1:
            raise LaunchError(f"--dataset-size {cfg.dataset_size} gives {len(self.sampler)} samples per rank, "
                              f"fewer than --batch-size {cfg.batch_size}")
        total = self.steps_per_epoch * cfg.epochs if cfg.epochs is not None else cfg.max_steps
        self.total = min(total, cfg.max_steps) if cfg.max_steps is not None else total
        self.x_all, self.y_all = data.x.to(dev), data.y.to(dev)

        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        self.model = SimpleNet(cfg.hidden).to(dev)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self.loss_fn = torch.nn.MSELoss()
        self.step, self.first_loss, self.resumed_from = 0, None, None
        if self.ckpt_dir:
            self._load_snapshot()

        self.grad_sync_mode = self._choose_grad_sync()
        self.stop = StopRequest()
        # Over gloo the stop flag rides in the gradient all-reduce (see StopAgreement).
        carrier = StopFlagCarrier(self.model, dev) if place.backend == "gloo" else None
        if self.grad_sync_mode == "ddp":
            # DDP broadcasts rank 0's weights on construction.
            self.net = DDP(carrier or self.model, device_ids=[dev] if dev.type != "cpu" else None)
            self.grad_sync = None
        else:
            # Rank 0's weights through CPU copies; the gradients averaged at the end of backward.
            self.net = CpuBucketDDP(carrier or self.model, bucket_cap_mb=cfg.bucket_mb)
            self.grad_sync = self.net.grad_buckets
        self.agreement = StopAgreement(self.stop, self.cpu_group, ranks.world_size, carrier)
        self.stopping = 0  # agreed: how many ranks received a stop signal (0: none)
        self.signalled_here = None
        self.final_loss = None

    def _global_mean(self, value: torch.Tensor) -> float:
        t = value.detach().reshape(1).to(self.comm_device, dtype=torch.float32)
        dist.all_reduce(t)
        return t.item() / self.ranks.world_size

    def _choose_grad_sync(self) -> str:
        """DDP or the CPU buckets, agreed by every rank (torchdag_ddp.choose_exchange): only
        together do the ranks know whether any of them computes on an accelerator."""
        try:
            mode, kinds = choose_exchange(self.place.device, self.cfg.grad_sync)
        except ValueError as exc:
            raise DeviceError(f"--grad-sync {self.cfg.grad_sync}: {exc}") from None
        if kinds:
            counts = ", ".join(f"{k}x{kinds.count(k)}" for k in sorted(set(kinds)))
            self.log(f"devices in job: {counts}; gradient sync: {mode}")
        return mode

    def _load_snapshot(self) -> None:
        """Every rank resumes from the newest step any checkpoint reader has intact."""
        self.step, self.first_loss, self.resumed_from = distckpt.resume(self, self.model, self.optimizer)

    def _save_snapshot(self) -> None:
        distckpt.save(self, self.model, self.optimizer, self.step, self.first_loss)

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.net(source), targets)
        self.agreement.loss(loss).backward()  # averages the gradients, under DDP and the CPU buckets
        # A signal that any rank received before its backward (gloo: the flag rides in
        # the gradients) or before its optimizer step (nccl/hccl) stops every rank, on
        # every node, after this step.
        self.agreement.start()
        self.optimizer.step()
        return loss

    def _run_epoch(self, epoch: int, skip: int, start_step: int, t0: float) -> None:
        """The epoch's batches from `skip` on, until the run's last step or an agreed stop."""
        cfg = self.cfg
        self.sampler.set_epoch(epoch)  # same shuffle on every rank, new each epoch
        order = torch.tensor(list(iter(self.sampler)), dtype=torch.long, device=self.place.device)
        for b in range(skip, self.steps_per_epoch):
            if self.step >= self.total or self.stopping:
                return
            idx = order[b * cfg.batch_size:(b + 1) * cfg.batch_size]
            loss = self._run_batch(self.x_all[idx], self.y_all[idx])
            self.step += 1
            self.progress.update(self.step)
            self.stall.step(self.step)
            last = self.step == self.total
            agreed = self.agreement.result()
            self.stopping = 0 if last else agreed  # the last step ends the run anyway
            if self.stopping:
                self.stop.agreed = True
                self.signalled_here = self.stop.signum
            # Every rank knows these step numbers, so the loss all-reduce is a collective
            # they all join.
            if self.step == start_step + 1 or last or (cfg.log_every and self.step % cfg.log_every == 0):
                mean = self._global_mean(loss)
                self.first_loss = mean if self.first_loss is None else self.first_loss
                self.final_loss = mean if last else self.final_loss
                rate = (self.step - start_step) * cfg.batch_size * self.ranks.world_size / (time.perf_counter() - t0)
                self.log(f"step {self.step}/{self.total} loss {mean:.6f} samples/s {rate:.0f}")
                if self.node_rank:  # every other node's progress in its own log (torchdag status/logs)
                    self.node_log(f"step {self.step}/{self.total}")
            every = cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0
            if self.ckpt_dir and (last or self.stopping or every):
                self._save_snapshot()

    def train(self) -> int:
        """Run to the last step (or an agreed stop); the rank's exit status."""
        cfg, ranks, place = self.cfg, self.ranks, self.place
        self.log(f"training: world_size {ranks.world_size}, backend {place.backend}, device {place.device} "
                 f"({place.source}), {self.steps_per_epoch} steps/epoch, steps {self.step}->{self.total}, "
                 f"restart {cfg.restart}" + (f", parameter {cfg.parameter!r}" if cfg.parameter is not None else ""))
        # What the rendezvous assigned this node in this round (node recovery: it may differ
        # from the node table's order once a node has rejoined).
        self.node_log(f"rank {ranks.rank} of {ranks.world_size}, worker restart "
                      f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}, resumed from step {self.resumed_from}")
        start_step, t0 = self.step, time.perf_counter()
        epoch, skip = divmod(self.step, self.steps_per_epoch)
        self.progress = ProgressFile(self.total)
        self.progress.update(self.step, force=True)
        self.stall = StallReporter(ranks.rank, self.node_rank, self.total)
        self.stall.step(self.step)
        with self.stop, self.stall:
            while self.step < self.total and not self.stopping:
                self._run_epoch(epoch, skip, start_step, t0)
                epoch, skip = epoch + 1, 0
            elapsed = time.perf_counter() - t0
            if self.stopping:
                self._stopped()
        if cfg.params_file and not self.stopping:
            torch.save({k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                       f"{cfg.params_file}.rank{ranks.rank}")
        self.write_metrics(self._metrics(self.step - start_step, elapsed))
        if self.stopping and self._peer_left():
            self.node_log(f"a peer node is leaving (a stop signal elsewhere): checkpoint at step {self.step}; exit "
                          f"{EXIT_FAILED} so torchrun restarts the workers into the next rendezvous round")
            return EXIT_FAILED
        if self.stopping:
            saved = f", checkpoint {checkpoint.path_for(self.ckpt_dir, self.step)}" if self.ckpt_dir else ""
            self.log(f"preempted at step {self.step}/{self.total} (a stop signal reached {self.stopping} of "
                     f"{ranks.world_size} ranks){saved}; exit {EXIT_PREEMPTED}")
            return EXIT_PREEMPTED
        self.log(f"done: {self.step} steps, loss {self.first_loss} -> {self.final_loss}")
        return EXIT_OK

    def _peer_left(self) -> bool:
        """Node recovery (TORCHDAG_RECOVERY=node): a stop signal that reached another node only
        (its pod deleted, evicted or drained) is that node leaving, not the job stopping; this
        node's workers then fail, so that its torchrun restarts them into the next round."""
        return os.environ.get("TORCHDAG_RECOVERY") == "node" and not self.signalled_here

    def _stopped(self) -> None:
        """After an agreed stop: no rank leaves before every writer has its file on disk."""
        dist.barrier(group=self.cpu_group)
        if not self.signalled_here and self.ranks.local_rank == 0 and not self._peer_left():
            stop_agent_restarts(self.node_log)  # a node that got no signal
        here = (f"{signal_name(self.signalled_here)} received here" if self.signalled_here
                else "signal received elsewhere")
        saved = "checkpoint saved" if self.ckpt_dir else "no --checkpoint-dir, nothing saved"
        code = EXIT_FAILED if self._peer_left() else EXIT_PREEMPTED
        self.node_log(f"stopped at step {self.step}/{self.total} ({here}); {saved}; exit {code}")

    def _worker_restarts(self) -> list[int]:
        """A collective: every rank reaches it at the end of train()."""
        mine = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        seen = [0] * self.ranks.world_size
        dist.all_gather_object(seen, mine, group=self.cpu_group)
        return seen

    def _metrics(self, done: int, elapsed: float) -> dict:
        cfg, world = self.cfg, self.ranks.world_size
        metrics = {
            "type": cfg.type, "world_size": world, "backend": self.place.backend, "device": self.place.kind,
            "grad_sync": self.grad_sync_mode, "steps": self.step, "steps_this_run": done,
            "resumed_from_step": self.resumed_from, "restart": cfg.restart, "preempted": bool(self.stopping),
            "signalled_ranks": self.stopping, "first_loss": self.first_loss, "final_loss": self.final_loss,
            "batch_size": cfg.batch_size, "global_batch_size": cfg.batch_size * world,
            # Each rank's torchrun worker restarts (node recovery: a survivor restarts its workers
            # into every re-formed group; a retried node starts at 0), by the final round's rank.
            "worker_restarts": self._worker_restarts(),
            "recovery": os.environ.get("TORCHDAG_RECOVERY", ""), "elapsed_seconds": elapsed,
            "steps_per_second": done / elapsed if done else 0.0,
            "samples_per_second": done * cfg.batch_size * world / elapsed if done else 0.0,
            "parameter": cfg.parameter,
        }
        if self.grad_sync is not None and self.grad_sync.calls:
            metrics["grad_sync_seconds_per_step"] = self.grad_sync.seconds / self.grad_sync.calls
        return metrics
