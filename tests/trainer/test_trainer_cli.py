"""The command line of trainer/train.py as docs/trainer.md's table states it: every default
written out here, and a default run checked against it (steps per epoch, log lines,
checkpoints, the optimizer in the checkpoint, metrics). Real processes on 127.0.0.1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import free_port
from trainer_helpers import REPO, clean_env, full_output_of, output_of, read_json, run_direct, run_ranks

sys.path.insert(0, str(REPO))

from trainer import checkpoint
from trainer.config import LaunchError, parse_config

pytestmark = pytest.mark.torch  # real torchrun jobs and the trainer's modules


def test_every_default_of_the_table():
    cfg = parse_config([], env={})
    assert (cfg.type, cfg.parameter, cfg.max_steps, cfg.epochs) == ("example", None, None, 1)
    assert (cfg.batch_size, cfg.lr, cfg.momentum, cfg.seed, cfg.dataset_size, cfg.hidden) == (
        32,
        0.05,
        0.9,
        0,
        4096,
        50,
    )
    assert (cfg.log_every, cfg.metrics_file, cfg.params_file, cfg.checkpoint_dir) == (10, None, None, None)
    assert (cfg.checkpoint_every, cfg.keep_checkpoints, cfg.checkpoint_storage) == (0, 3, "shared")
    assert (cfg.ignore_bad_checkpoints, cfg.device, cfg.backend, cfg.pg_timeout) == (False, None, None, 600)
    assert (cfg.grad_sync, cfg.bucket_mb, cfg.rounds, cfg.array_size) == ("auto", 25.0, 3, 1_000_000)
    assert (cfg.scatter_reduce_fault_rank, cfg.local_rank_arg, cfg.restart) == (None, None, 0)
    assert parse_config(["--max-steps", "5"], env={}).epochs is None  # epochs default only without --max-steps
    assert parse_config(["--max-steps", "5", "--epochs", "2"], env={}).epochs == 2


def test_flags_beat_the_environment_and_bad_settings_are_refused():
    env = {"TORCHDAG_PG_TIMEOUT": "7", "TORCHDAG_DEVICE": "cuda", "TORCHDAG_BACKEND": "nccl"}
    assert parse_config([], env=env).pg_timeout == 7
    assert parse_config(["--pg-timeout", "9"], env=env).pg_timeout == 9
    for bad in ("0", "-3", "ten", "1.5"):
        with pytest.raises(LaunchError, match="TORCHDAG_PG_TIMEOUT must be"):
            parse_config([], env={"TORCHDAG_PG_TIMEOUT": bad})
    assert parse_config([], env={"TORCHDAG_PG_TIMEOUT": ""}).pg_timeout == 600  # empty: unset
    for spelling in ("--local-rank", "--local_rank"):  # both launchers' spellings
        assert parse_config([spelling, "3"], env={}).local_rank_arg == 3
    for flag, value in (
        ("--device", "tpu"),
        ("--backend", "mpi"),
        ("--grad-sync", "zero"),
        ("--checkpoint-storage", "s3"),
        ("--type", "llm"),
    ):
        with pytest.raises(SystemExit):
            parse_config([flag, value], env={})
    with pytest.raises(SystemExit):
        parse_config(["--max-step", "5"], env={})  # no abbreviations


def test_a_run_with_the_defaults_is_what_the_table_says(tmp_path):
    """Two ranks, defaults but --max-steps 25: 4096 samples / 2 ranks / 32 = 64 steps per
    epoch, a loss line at steps 1, 10, 20 and the last, one checkpoint (at the end, K = 0)
    holding SGD's lr 0.05 and momentum 0.9 and the 10 -> 50 -> 10 model, and metrics that
    echo --parameter."""
    ck, metrics = tmp_path / "ck", tmp_path / "m.json"
    parameter = "lr: 1e-3 # ü"
    codes = run_ranks(
        tmp_path,
        ["--max-steps", "25", "--parameter", parameter, "--checkpoint-dir", str(ck), "--metrics-file", str(metrics)],
        world=2,
    )
    assert codes == [0, 0], output_of(tmp_path)
    lines = full_output_of(tmp_path).splitlines()
    (start,) = [line for line in lines if line.startswith("[trainer] training:")]
    assert start.startswith("[trainer] training: world_size 2, backend gloo, device cpu (")
    assert start.endswith(f"64 steps/epoch, steps 0->25, restart 0, parameter {parameter!r}"), start
    assert [line.split()[2] for line in lines if line.startswith("[trainer] step ")] == [
        "1/25",
        "10/25",
        "20/25",
        "25/25",
    ]
    m = read_json(metrics)
    assert (m["parameter"], m["batch_size"], m["world_size"], m["steps"], m["grad_sync"]) == (
        parameter,
        32,
        2,
        25,
        "ddp",
    )
    assert m["samples_per_second"] == pytest.approx(m["steps_per_second"] * 32 * 2)  # global batch = 32 x 2
    assert [step for step, _ in checkpoint.list_checkpoints(str(ck))] == [25]
    saved = checkpoint.load(checkpoint.path_for(str(ck), 25), 25)
    group = saved["optimizer"]["param_groups"][0]
    assert (group["lr"], group["momentum"]) == (0.05, 0.9)
    shapes = sorted(tuple(t.shape) for t in saved["model"].values())
    assert shapes == [(10,), (10, 50), (50,), (50, 10)]
    assert saved["config"] == {"seed": 0, "batch_size": 32, "dataset_size": 4096, "hidden": 50}


def run_one(tmp: Path, name: str, args: list[str]) -> dict:
    folder = tmp / name
    folder.mkdir()
    assert run_ranks(folder, args + ["--metrics-file", str(folder / "m.json")]) == [0], output_of(folder)
    return {"metrics": read_json(folder / "m.json"), "log": full_output_of(folder)}


def test_epochs_steps_log_every_and_seed(tmp_path):
    """--epochs counts whole passes (256 samples / 16 = 16 steps each); with --max-steps
    too, whichever comes first; --log-every 0 logs the first and the last step only; the
    seed decides the data and the initial weights."""
    small = ["--dataset-size", "256", "--batch-size", "16", "--log-every", "0"]
    two_epochs = run_one(tmp_path, "epochs", small + ["--epochs", "2", "--seed", "3"])
    assert two_epochs["metrics"]["steps"] == 32
    assert [line.split()[2] for line in two_epochs["log"].splitlines() if line.startswith("[trainer] step ")] == [
        "1/32",
        "32/32",
    ]
    capped = run_one(tmp_path, "capped", small + ["--epochs", "2", "--max-steps", "10", "--seed", "3"])
    assert capped["metrics"]["steps"] == 10
    assert capped["metrics"]["first_loss"] == two_epochs["metrics"]["first_loss"]  # same seed, same first step
    other_seed = run_one(tmp_path, "seed", small + ["--epochs", "1", "--max-steps", "100", "--seed", "4"])
    assert other_seed["metrics"]["steps"] == 16  # one epoch ends first
    assert other_seed["metrics"]["first_loss"] != two_epochs["metrics"]["first_loss"]


def test_without_launcher_env_clear_error():
    r = run_direct(["--max-steps", "1"], clean_env())
    assert r.returncode == 2
    assert "missing launcher environment: RANK, LOCAL_RANK, WORLD_SIZE" in r.stderr
    assert "torchrun" in r.stderr and "KeyError" not in r.stderr


def test_inconsistent_launcher_env_clear_error():
    env = clean_env(RANK="3", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(free_port()))
    r = run_direct(["--max-steps", "1"], env)
    assert r.returncode == 2 and "RANK=3 not in [0, WORLD_SIZE=2)" in r.stderr, r.stderr


def test_unknown_argument_rejected():
    r = run_direct(["--max-step", "5"], clean_env())  # typo of --max-steps must not pass silently
    assert r.returncode == 2 and "unrecognized arguments: --max-step" in r.stderr
