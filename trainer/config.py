"""Command line, environment and the small config dataclass of the trainer."""

from __future__ import annotations

import argparse
import dataclasses
import os

from trainer.device import backend_names, catalog
from trainer.errors import TrainerError

DEFAULT_PG_TIMEOUT_S = 600  # when TORCHDAG_PG_TIMEOUT is unset (gloo's own default is 30 min)

# Exit statuses of a rank (docs/trainer.md, "Exit status").
EXIT_OK = 0
EXIT_FAILED = 1  # training failure: the rank printed its traceback
EXIT_USAGE = 2  # usage or environment error, or no readable checkpoint: one "[trainer] error:" line
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped by SIGTERM/SIGINT/SIGHUP at an agreed step, checkpoint saved

NODE_RANK_FIELD = "{node_rank}"  # expanded in --checkpoint-dir from torchrun's GROUP_RANK


class LaunchError(TrainerError):
    """The launcher environment is missing or inconsistent."""


class CheckpointError(LaunchError):
    """Checkpoints exist but none can be read (exit 2 unless --ignore-bad-checkpoints)."""


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
    checkpoint_storage: str = "shared"
    ignore_bad_checkpoints: bool = False
    restart: int = 0  # TORCHDAG_RESTART: whole-job restart count (0 on the first attempt)
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
    p.add_argument("--checkpoint-dir", default=None,
                   help="enable checkpoints and resume; {node_rank} is replaced by the node's rank (GROUP_RANK)")
    p.add_argument("--checkpoint-every", type=_non_negative_int, default=0,
                   help="checkpoint every K steps (0: only at the end, and on SIGTERM)")
    p.add_argument("--keep-checkpoints", type=_positive(int), default=3,
                   help="newest readable checkpoints kept per directory")
    p.add_argument("--checkpoint-storage", choices=("shared", "node-local"), default="shared",
                   help="shared: global rank 0 writes; node-local: every node's local rank 0 writes its own copy")
    p.add_argument("--ignore-bad-checkpoints", action="store_true",
                   help="start at step 0 when checkpoints exist but none is readable (default: exit 2)")
    # The device kinds and backends of the catalogue (torchdag/catalog.yaml), as trainer/device.py reads it.
    p.add_argument("--device", choices=list(catalog()["devices"]), default=None,
                   help="overrides TORCHDAG_DEVICE and auto-detection")
    p.add_argument("--backend", choices=backend_names(), default=None,
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
    values["restart"] = restart_from_env(env)
    if values["max_steps"] is None and values["epochs"] is None:
        values["epochs"] = 1
    return Config(**values)


def pg_timeout_from_env(env) -> int:
    value = _env_int(env, "TORCHDAG_PG_TIMEOUT", minimum=1)
    return DEFAULT_PG_TIMEOUT_S if value is None else value


def _env_int(env, name: str, minimum: int = 0) -> int | None:
    """An integer >= minimum from the environment, or None when it is not set."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise LaunchError(f"{name} must be an integer (at least {minimum}), got {raw!r}") from None
    if value < minimum:
        raise LaunchError(f"{name} must be >= {minimum}, got {value}")
    return value


def restart_from_env(env) -> int:
    """TORCHDAG_RESTART: the rendered Workflow's whole-job attempt (0 first, 1.. on retries); absent = 0."""
    return _env_int(env, "TORCHDAG_RESTART") or 0


def node_rank_from_env(env=None) -> int | None:
    """torchrun's GROUP_RANK (the node rank), or None when it is not set."""
    return _env_int(os.environ if env is None else env, "GROUP_RANK")


def expand_checkpoint_dir(template: str, env=None) -> str:
    """--checkpoint-dir with {node_rank} replaced by this node's rank, so that
    nodes sharing one filesystem (or one test machine) get directories of their own."""
    if NODE_RANK_FIELD not in template:
        return template
    node = node_rank_from_env(env)
    if node is None:
        raise LaunchError(f"--checkpoint-dir {template!r} uses {NODE_RANK_FIELD} but GROUP_RANK is not set "
                          "(torchrun sets it to the node rank)")
    return template.replace(NODE_RANK_FIELD, str(node))


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
