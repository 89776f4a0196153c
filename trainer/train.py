#!/usr/bin/env python3
"""torchdag training entry point.

    torchrun --nnodes=2 --node-rank=R --nproc-per-node=N \
        --master-addr=ADDR --master-port=PORT trainer/train.py --type example --max-steps 50

Ranks come from torchrun's environment; device and backend from
trainer/device.py; see docs/trainer.md for every flag and variable.
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):
    # Run as a script path (torchrun trainer/train.py): Python put trainer/
    # itself on sys.path, where our module names (config, device, ...) could
    # shadow other packages' imports.  Put the directory above it there
    # instead, so `import trainer.x` works from any working directory.
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == _here:
        sys.path[0] = os.path.dirname(_here)
    else:
        sys.path.insert(0, os.path.dirname(_here))

# A torch_npu wheel on a host without CANN makes `import torch` itself raise
# through torch's backend autoload; we import torch_npu ourselves, guarded, in
# trainer/device.py.  An explicit setting by the user wins.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import datetime
import json
import time
import traceback

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from trainer import checkpoint, distckpt, scatter_reduce
from trainer.config import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_USAGE,
    CheckpointError,
    Config,
    LaunchError,
    Ranks,
    expand_checkpoint_dir,
    node_rank_from_env,
    parse_config,
    ranks_from_env,
)
from trainer.device import DeviceError, Placement, resolve
from trainer.mixed import CpuBucketGradSync
from trainer.model import SimpleNet, SyntheticRegression
from trainer.preemption import StopAgreement, StopFlagCarrier, StopRequest, signal_name, stop_agent_restarts


class Trainer:
    def __init__(self, cfg: Config, ranks: Ranks, place: Placement):
        self.cfg, self.ranks, self.place = cfg, ranks, place
        self.rank = ranks.rank
        # gloo collectives take CPU tensors; hccl/nccl take device tensors.
        self.comm_device = place.device if place.backend in ("hccl", "nccl") else torch.device("cpu")
        self.node_rank = node_rank_from_env()
        self.ckpt_dir = expand_checkpoint_dir(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
        # Who writes checkpoints (and reads them on resume): global rank 0, or
        # with node-local storage every node's local rank 0, into its own directory.
        self.ckpt_writer = ranks.local_rank == 0 if cfg.checkpoint_storage == "node-local" else ranks.rank == 0
        # Small CPU-side collectives (stop flag, RNG states, checkpoint
        # broadcast) go over gloo: the default group when the job runs gloo,
        # else a gloo group made in run_example (no device syncs for them).
        self.cpu_group = None

    def log(self, msg: str) -> None:
        if self.rank == 0:
            print(f"[trainer] {msg}", flush=True)

    def node_log(self, msg: str) -> None:
        """Once per node (local rank 0), with the node rank."""
        if self.ranks.local_rank == 0:
            node = "?" if self.node_rank is None else self.node_rank
            print(f"[trainer] node {node}: {msg}", flush=True)

    def _global_mean(self, value: torch.Tensor) -> float:
        t = value.detach().reshape(1).to(self.comm_device, dtype=torch.float32)
        dist.all_reduce(t)
        return t.item() / self.ranks.world_size

    def _choose_grad_sync(self) -> str:
        cfg, place = self.cfg, self.place
        if place.backend != "gloo":
            if cfg.grad_sync == "cpu-buckets":
                raise DeviceError("--grad-sync cpu-buckets needs backend gloo")
            return "ddp"
        if cfg.grad_sync == "ddp" and place.kind == "npu":
            raise DeviceError("DDP over gloo cannot take NPU tensors; use --grad-sync auto or cpu-buckets")
        # Every rank must take the same path, and only together do the ranks
        # know whether any of them computes on an accelerator.
        seen = [None] * self.ranks.world_size
        dist.all_gather_object(seen, (place.kind, cfg.grad_sync))
        kinds = [k for k, _ in seen]
        modes = {m for _, m in seen}
        if len(modes) != 1:
            raise DeviceError(f"ranks disagree on --grad-sync: {sorted(modes)}")
        counts = ", ".join(f"{k}x{kinds.count(k)}" for k in sorted(set(kinds)))
        mode = cfg.grad_sync
        if mode == "auto":
            mode = "ddp" if all(k == "cpu" for k in kinds) else "cpu-buckets"
        self.log(f"devices in job: {counts}; gradient sync: {mode}")
        return mode

    def run_example(self) -> int:
        cfg, ranks, dev = self.cfg, self.ranks, self.place.device
        data = SyntheticRegression(cfg.dataset_size, cfg.seed)
        sampler = DistributedSampler(data, num_replicas=ranks.world_size, rank=ranks.rank,
                                     shuffle=True, seed=cfg.seed, drop_last=True)
        steps_per_epoch = len(sampler) // cfg.batch_size
        if steps_per_epoch < 1:
            raise LaunchError(
                f"--dataset-size {cfg.dataset_size} gives {len(sampler)} samples per rank, "
                f"fewer than --batch-size {cfg.batch_size}")
        total = steps_per_epoch * cfg.epochs if cfg.epochs is not None else cfg.max_steps
        if cfg.max_steps is not None:
            total = min(total, cfg.max_steps)
        x_all, y_all = data.x.to(dev), data.y.to(dev)

        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        model = SimpleNet(cfg.hidden).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        loss_fn = torch.nn.MSELoss()

        if self.place.backend != "gloo":
            self.cpu_group = dist.new_group(backend="gloo")  # every rank, same order
        step, first_loss, resumed_from = 0, None, None
        if self.ckpt_dir:
            step, first_loss, resumed_from = self._resume(model, opt)
        mode = self._choose_grad_sync()
        stop = StopRequest()
        # Over gloo the stop flag rides in the gradient all-reduce (see StopAgreement).
        carrier = StopFlagCarrier(model, dev) if self.place.backend == "gloo" else None
        if mode == "ddp":
            # DDP broadcasts rank 0's weights on construction.
            net = DDP(carrier or model, device_ids=[dev] if dev.type != "cpu" else None)
            grad_sync = None
        else:
            net = carrier or model
            grad_sync = CpuBucketGradSync(net, dev, cfg.bucket_mb)
            grad_sync.broadcast_parameters(src=0)
        agreement = StopAgreement(stop, self.cpu_group, ranks.world_size, carrier)

        self.log(f"training: world_size {ranks.world_size}, backend {self.place.backend}, device {dev} "
                 f"({self.place.source}), {steps_per_epoch} steps/epoch, steps {step}->{total}, "
                 f"restart {cfg.restart}"
                 + (f", parameter {cfg.parameter!r}" if cfg.parameter is not None else ""))
        final_loss = None
        start_step = step
        stopping = 0  # agreed: how many ranks received a stop signal (0: none)
        t0 = time.perf_counter()
        epoch, skip = divmod(step, steps_per_epoch)
        with stop:
            while step < total and not stopping:
                sampler.set_epoch(epoch)  # same shuffle on every rank, new each epoch
                order = torch.tensor(list(iter(sampler)), dtype=torch.long, device=dev)
                for b in range(skip, steps_per_epoch):
                    if step >= total or stopping:
                        break
                    idx = order[b * cfg.batch_size:(b + 1) * cfg.batch_size]
                    x, y = x_all[idx], y_all[idx]
                    opt.zero_grad(set_to_none=True)
                    loss = loss_fn(net(x), y)
                    agreement.loss(loss).backward()
                    if grad_sync is not None:
                        grad_sync.sync()
                    # A signal that any rank received before its backward
                    # (gloo: the flag rides in the gradients) or before its
                    # optimizer step (nccl/hccl) stops every rank, on every
                    # node, after this step.
                    agreement.start()
                    opt.step()
                    step += 1
                    last = step == total
                    agreed = agreement.result()
                    stopping = 0 if last else agreed  # the last step ends the run anyway
                    if stopping:
                        stop.agreed = True
                        signalled_here = stop.signum
                    # Every rank knows these step numbers, so the loss all-reduce
                    # is a collective they all join.
                    if step == start_step + 1 or last or (cfg.log_every and step % cfg.log_every == 0):
                        mean = self._global_mean(loss)
                        if first_loss is None:
                            first_loss = mean
                        if last:
                            final_loss = mean
                        rate = (step - start_step) * cfg.batch_size * ranks.world_size / (time.perf_counter() - t0)
                        self.log(f"step {step}/{total} loss {mean:.6f} samples/s {rate:.0f}")
                    if self.ckpt_dir and (last or stopping
                                          or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0)):
                        self._save(model, opt, step, first_loss)
                epoch, skip = epoch + 1, 0
            elapsed = time.perf_counter() - t0
            done = step - start_step
            if stopping:
                # No rank leaves before every writer has its file on disk.
                dist.barrier(group=self.cpu_group)
                if not signalled_here and self.ranks.local_rank == 0:
                    stop_agent_restarts(self.node_log)  # a node that got no signal
                here = f"{signal_name(signalled_here)} received here" if signalled_here else "signal received elsewhere"
                self.node_log(f"stopped at step {step}/{total} ({here}); "
                              + ("checkpoint saved" if self.ckpt_dir else "no --checkpoint-dir, nothing saved")
                              + f"; exit {EXIT_PREEMPTED}")

        if cfg.params_file and not stopping:
            torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()},
                       f"{cfg.params_file}.rank{ranks.rank}")
        metrics = {
            "type": cfg.type,
            "world_size": ranks.world_size,
            "backend": self.place.backend,
            "device": self.place.kind,
            "grad_sync": mode,
            "steps": step,
            "steps_this_run": done,
            "resumed_from_step": resumed_from,
            "restart": cfg.restart,
            "preempted": bool(stopping),
            "signalled_ranks": stopping,
            "first_loss": first_loss,
            "final_loss": final_loss,
            "batch_size": cfg.batch_size,
            "elapsed_seconds": elapsed,
            "steps_per_second": done / elapsed if done else 0.0,
            "samples_per_second": done * cfg.batch_size * ranks.world_size / elapsed if done else 0.0,
            "parameter": cfg.parameter,
        }
        if grad_sync is not None and grad_sync.calls:
            metrics["grad_sync_seconds_per_step"] = grad_sync.seconds / grad_sync.calls
        self._write_metrics(metrics)
        if stopping:
            self.log(f"preempted at step {step}/{total} (a stop signal reached {stopping} of "
                     f"{ranks.world_size} ranks)"
                     + (f", checkpoint {checkpoint.path_for(self.ckpt_dir, step)}" if self.ckpt_dir else "")
                     + f"; exit {EXIT_PREEMPTED}")
            return EXIT_PREEMPTED
        self.log(f"done: {step} steps, loss {first_loss} -> {final_loss}")
        return EXIT_OK

    def _resume(self, model, opt):
        return distckpt.resume(self, model, opt)

    def _save(self, model, opt, step, first_loss):
        distckpt.save(self, model, opt, step, first_loss)

    def run_scatter_reduce(self) -> int:
        cfg = self.cfg
        t0 = time.perf_counter()
        ok = scatter_reduce.run(self.rank, self.ranks.world_size, self.place.device, self.place.backend,
                                cfg.rounds, cfg.array_size, cfg.seed, cfg.scatter_reduce_fault_rank, self.log)
        self._write_metrics({
            "type": cfg.type, "world_size": self.ranks.world_size, "backend": self.place.backend,
            "device": self.place.kind, "rounds": cfg.rounds, "array_size": cfg.array_size, "ok": ok,
            "elapsed_seconds": time.perf_counter() - t0, "parameter": cfg.parameter, "restart": cfg.restart,
        })
        if not ok:
            print(f"[trainer] rank {self.rank}: scatter-reduce result differs from the serial computation",
                  file=sys.stderr, flush=True)
        return EXIT_OK if ok else EXIT_FAILED

    def _write_metrics(self, metrics: dict) -> None:
        if self.rank != 0 or not self.cfg.metrics_file:
            return
        path = self.cfg.metrics_file
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(metrics, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)


def init_process_group(backend: str, ranks: Ranks, timeout: datetime.timedelta) -> None:
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and restart is not None:
        # torchrun's static rendezvous keeps one store (on the node-rank-0
        # agent) across worker restarts, and env:// does not separate the
        # attempts: a restarted worker can read its peer's address from the
        # previous attempt and fail with "connectFullMesh failed ...
        # Connection refused" (2 of 5 restart tests here before this).  Every agent
        # restarts together after a failure, so the restart count names the
        # attempt on all of them.
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), ranks.world_size,
                              is_master=False, timeout=timeout)
        dist.init_process_group(backend=backend, store=dist.PrefixStore(f"torchdag/attempt_{restart}", store),
                                rank=ranks.rank, world_size=ranks.world_size, timeout=timeout)
    else:
        dist.init_process_group(backend=backend, rank=ranks.rank, world_size=ranks.world_size, timeout=timeout)


def run(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    ranks = ranks_from_env(local_rank_arg=cfg.local_rank_arg)
    place = resolve(ranks.local_rank, cfg.device, cfg.backend)
    if place.note and ranks.local_rank == 0:
        print(f"[trainer] {place.note}", flush=True)  # once per node
    init_process_group(place.backend, ranks, datetime.timedelta(seconds=cfg.pg_timeout))
    trainer = Trainer(cfg, ranks, place)
    if cfg.type == "scatter-reduce":
        return trainer.run_scatter_reduce()
    return trainer.run_example()


def main(argv: list[str] | None = None) -> int:
    """Exit status: EXIT_OK, EXIT_FAILED, EXIT_USAGE or EXIT_PREEMPTED (docs/trainer.md)."""
    status = EXIT_FAILED
    try:
        status = run(argv)
    except SystemExit as exc:  # argparse: --help (0) or usage error (2)
        status = exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    except (LaunchError, DeviceError) as exc:
        # Every rank knows why no checkpoint is usable; one line per node says it.
        if not isinstance(exc, CheckpointError) or os.environ.get("LOCAL_RANK", "0") == "0":
            print(f"[trainer] error: {exc}", file=sys.stderr, flush=True)
        status = EXIT_USAGE
    except BaseException:  # noqa: BLE001 - report, then leave through the same exit path
        rank = os.environ.get("RANK", "?")
        print(f"[trainer] rank {rank} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        status = EXIT_FAILED
    finally:
        if dist.is_available() and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as exc:  # noqa: BLE001 - exiting anyway
                print(f"[trainer] destroy_process_group failed: {exc}", file=sys.stderr, flush=True)
    return status


def write_status_file(status: int, env=None) -> None:
    """TORCHDAG_STATUS_FILE: local rank 0 writes its exit status there (one
    line), atomically. torchrun itself exits 1 whatever its workers' status,
    so a wrapper that must tell a preemption (75) from a failure reads this."""
    env = os.environ if env is None else env
    path = env.get("TORCHDAG_STATUS_FILE", "").strip()
    if not path or env.get("LOCAL_RANK", "0").strip() not in ("", "0"):
        return
    try:
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(f"{status}\n")
        os.replace(tmp, path)
    except OSError as exc:
        print(f"[trainer] cannot write TORCHDAG_STATUS_FILE {path}: {exc}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    code = main()
    write_status_file(code)
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit skips interpreter teardown, where gloo aborts in ~4% of exits
    # ("terminate called without an active exception") and torchrun would
    # then hold the healthy node 300 s at its exit barrier.
    os._exit(code)
