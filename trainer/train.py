#!/usr/bin/env python3
"""torchdag training entry point.

    torchrun --nnodes=2 --node-rank=R --nproc-per-node=N \
        --master-addr=ADDR --master-port=PORT trainer/train.py --type example --max-steps 50

Ranks come from torchrun's environment; device and backend from trainer/device.py; the
training loop is trainer/ddp.py. See docs/trainer.md for every flag and variable.
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):
    # Run by path (torchrun /opt/torchdag/trainer/train.py): Python put trainer/ itself on
    # sys.path, where our module names (config, device, ...) could shadow other packages'.
    # Put the folder above it there instead: the one import convention of trainer/ is
    # `from trainer.… import …`, and every file run by path starts with these lines.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A torch_npu wheel on a host without CANN makes `import torch` itself raise
# through torch's backend autoload; we import torch_npu ourselves, guarded, in
# trainer/device.py.  An explicit setting by the user wins.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import datetime
import time
import traceback

import torch.distributed as dist

from trainer import scatter_reduce
from trainer.config import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CheckpointError, Ranks, parse_config, ranks_from_env
from trainer.ddp import Job, Trainer
from trainer.device import resolve
from trainer.errors import TrainerError


def run_scatter_reduce(job: Job) -> int:
    cfg = job.cfg
    t0 = time.perf_counter()
    ok = scatter_reduce.run(job.rank, job.ranks.world_size, job.place.device, job.place.backend,
                            cfg.rounds, cfg.array_size, cfg.seed, cfg.scatter_reduce_fault_rank, job.log)
    job.write_metrics({
        "type": cfg.type, "world_size": job.ranks.world_size, "backend": job.place.backend,
        "device": job.place.kind, "rounds": cfg.rounds, "array_size": cfg.array_size, "ok": ok,
        "elapsed_seconds": time.perf_counter() - t0, "parameter": cfg.parameter, "restart": cfg.restart,
    })
    if not ok:
        print(f"[trainer] rank {job.rank}: scatter-reduce result differs from the serial computation",
              file=sys.stderr, flush=True)
    return EXIT_OK if ok else EXIT_FAILED


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


def recorder():
    """torchdag_flight: the copy record.py already started (the Workflow's ConfigMap puts it
    on the path), else the image's; None where neither is (the helpers' ConfigMap, mounted
    over torchdag/agents/, ships it with record.py only)."""
    started = sys.modules.get("torchdag_flight")
    if started is not None:
        return started
    try:
        from torchdag.agents import torchdag_flight
    except ImportError:
        return None
    return torchdag_flight


def run(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    flight = recorder()
    if flight is not None:
        flight.install()  # every rank says where it waits or is stuck, and how busy (TORCHDAG_RECORD=0: off)
    ranks = ranks_from_env(local_rank_arg=cfg.local_rank_arg)
    place = resolve(ranks.local_rank, cfg.device, cfg.backend)
    if place.note and ranks.local_rank == 0:
        print(f"[trainer] {place.note}", flush=True)  # once per node
    init_process_group(place.backend, ranks, datetime.timedelta(seconds=cfg.pg_timeout))
    if cfg.type == "scatter-reduce":
        return run_scatter_reduce(Job(cfg, ranks, place))
    return Trainer(cfg, ranks, place).train()


def main(argv: list[str] | None = None) -> int:
    """Exit status: EXIT_OK, EXIT_FAILED, EXIT_USAGE or EXIT_PREEMPTED (docs/trainer.md)."""
    status = EXIT_FAILED
    try:
        status = run(argv)
    except SystemExit as exc:  # argparse: --help (0) or usage error (2)
        status = exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    except TrainerError as exc:
        # Every rank knows why no checkpoint is usable; one line per node says it.
        if not isinstance(exc, CheckpointError) or os.environ.get("LOCAL_RANK", "0") == "0":
            print(f"[trainer] error: {exc}", file=sys.stderr, flush=True)
        status = EXIT_USAGE
    except BaseException:  # noqa: BLE001 - report, then leave through the same exit path
        flight = recorder()
        if flight is not None:
            flight.report_failure()  # the collective it failed in (its timeout), as its records say
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
