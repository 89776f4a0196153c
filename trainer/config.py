"""Command line, environment and the small config dataclass of the trainer."""

from __future__ import annotations

import argparse
import dataclasses
import os

DEFAULT_PG_TIMEOUT_S = 600  # when TORCHDAG_PG_TIMEOUT is unset (gloo's own default is 30 min)


class LaunchError(RuntimeError):
    """The launcher environment is missing or inconsistent."""


@dataclasses.dataclass(frozen=True)
class Ranks:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int


@dataclasses.dataclass
class Config:
    type: str = "example"
    parameter: str | None = None
    max_steps: int | None = None
    epochs: int | None = None
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    dataset_size: int = 4096
    hidden: int = 50
    log_every: int = 10
    metrics_file: str | None = None
    params_file: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    device: str | None = None
    backend: str | None = None
    pg_timeout: int = DEFAULT_PG_TIMEOUT_S
    grad_sync: str = "auto"
    bucket_mb: float = 25.0
    rounds: int = 3
    array_size: int = 1_000_000
    scatter_reduce_fault_rank: int | None = None
    local_rank_arg: int | None = None


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: a user's typo must not silently match another flag.
    p = argparse.ArgumentParser(
        prog="trainer/train.py",
        description="torchdag multi-node DDP trainer (run under torchrun).",
        allow_abbrev=False,
    )
    p.add_argument("--type", choices=("example", "scatter-reduce"), default="example",
                   help="example: train SimpleNet; scatter-reduce: the write-up's scatter/reduce toy")
    p.add_argument("--parameter", default=None,
                   help="free-form value from the original CLI; echoed in the log and metrics")
    p.add_argument("--max-steps", type=_positive(int), default=None, help="stop after this many optimizer steps")
    p.add_argument("--epochs", type=_positive(int), default=None,
                   help="stop after this many epochs (default 1 unless --max-steps is given)")
    p.add_argument("--batch-size", type=_positive(int), default=32, help="samples per rank per step")
    p.add_argument("--lr", type=_positive(float), default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset-size", type=_positive(int), default=4096)
    p.add_argument("--hidden", type=_positive(int), default=50, help="SimpleNet hidden width (10->H->10)")
    p.add_argument("--log-every", type=_non_negative_int, default=10, help="rank 0 logs every N steps (0: off)")
    p.add_argument("--metrics-file", default=None, help="rank 0 writes JSON metrics here at the end")
    p.add_argument("--params-file", default=None,
                   help="every rank writes its final parameters to PATH.rank<R> (torch.save)")
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--checkpoint-every", type=_non_negative_int, default=0,
                   help="rank 0 checkpoints every K steps (0: only at the end)")
    p.add_argument("--keep-checkpoints", type=_positive(int), default=3)
    p.add_argument("--device", choices=("npu", "cuda", "cpu"), default=None,
                   help="overrides TORCHDAG_DEVICE and auto-detection")
    p.add_argument("--backend", choices=("hccl", "nccl", "gloo"), default=None,
                   help="overrides TORCHDAG_BACKEND and the device's native backend")
    p.add_argument("--pg-timeout", type=_positive(int), default=None,
                   help=f"process-group timeout in s (overrides TORCHDAG_PG_TIMEOUT; default {DEFAULT_PG_TIMEOUT_S})")
    p.add_argument("--grad-sync", choices=("auto", "ddp", "cpu-buckets"), default="auto",
                   help="auto: DDP unless some rank runs gloo on an accelerator, then CPU-buffer buckets")
    p.add_argument("--bucket-mb", type=_positive(float), default=25.0, help="bucket size for cpu-buckets")
    p.add_argument("--rounds", type=_positive(int), default=3, help="scatter-reduce rounds")
    p.add_argument("--array-size", type=_positive(int), default=1_000_000, help="scatter-reduce array length")
    p.add_argument("--scatter-reduce-fault-rank", type=int, default=None,
                   help="self-test of the scatter-reduce check: this rank returns a wrong chunk")
    # torch.distributed.launch passes --local-rank=N (older versions --local_rank=N).
    p.add_argument("--local-rank", "--local_rank", dest="local_rank_arg", type=int, default=None,
                   help=argparse.SUPPRESS)
    return p


def parse_config(argv: list[str] | None = None, env: dict[str, str] | None = None) -> Config:
    env = os.environ if env is None else env
    ns = build_parser().parse_args(argv)
    values = vars(ns)
    if values["pg_timeout"] is None:
        values["pg_timeout"] = pg_timeout_from_env(env)
    if values["max_steps"] is None and values["epochs"] is None:
        values["epochs"] = 1
    return Config(**values)


def pg_timeout_from_env(env) -> int:
    raw = env.get("TORCHDAG_PG_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_PG_TIMEOUT_S
    try:
        value = int(raw)
    except ValueError:
        raise LaunchError(f"TORCHDAG_PG_TIMEOUT must be an integer number of seconds, got {raw!r}") from None
    if value <= 0:
        raise LaunchError(f"TORCHDAG_PG_TIMEOUT must be > 0, got {value}")
    return value


def ranks_from_env(env: dict[str, str] | None = None, local_rank_arg: int | None = None) -> Ranks:
    """Read torchrun's rank variables; explain what is wrong instead of KeyError."""
    env = os.environ if env is None else env
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    missing = [n for n in names if not env.get(n, "").strip()]
    if local_rank_arg is not None and "LOCAL_RANK" in missing:
        missing.remove("LOCAL_RANK")  # the legacy launcher's argument stands in for it
    if missing:
        raise LaunchError(
            f"missing launcher environment: {', '.join(missing)}. Start the trainer through torchrun, "
            "e.g. `torchrun --nnodes=1 --nproc-per-node=2 trainer/train.py`, "
            "or the legacy `python -m torch.distributed.launch ...`"
        )
    parsed = {}
    for n in names[:4] + ("MASTER_PORT",):
        raw = env.get(n, "").strip()
        if n == "LOCAL_RANK" and not raw:
            continue
        try:
            parsed[n] = int(raw)
        except ValueError:
            raise LaunchError(f"{n} must be an integer, got {raw!r}") from None
    local_rank = parsed.get("LOCAL_RANK", local_rank_arg)
    if local_rank_arg is not None and local_rank_arg != local_rank:
        raise LaunchError(f"--local-rank={local_rank_arg} disagrees with LOCAL_RANK={local_rank}")
    r = Ranks(parsed["RANK"], local_rank, parsed["WORLD_SIZE"], parsed["LOCAL_WORLD_SIZE"])
    problems = []
    if r.world_size < 1:
        problems.append(f"WORLD_SIZE={r.world_size} < 1")
    if not 0 <= r.rank < r.world_size:
        problems.append(f"RANK={r.rank} not in [0, WORLD_SIZE={r.world_size})")
    if not 1 <= r.local_world_size <= max(r.world_size, 1):
        problems.append(f"LOCAL_WORLD_SIZE={r.local_world_size} not in [1, WORLD_SIZE={r.world_size}]")
    if not 0 <= r.local_rank < r.local_world_size:
        problems.append(f"LOCAL_RANK={r.local_rank} not in [0, LOCAL_WORLD_SIZE={r.local_world_size})")
    if not 0 < parsed["MASTER_PORT"] < 65536:
        problems.append(f"MASTER_PORT={parsed['MASTER_PORT']} is not a TCP port")
    if problems:
        raise LaunchError("inconsistent launcher environment: " + "; ".join(problems))
    return r
