"""trainer/train.py under real torchrun processes on 127.0.0.1 (no mocks of torch.distributed)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from trainer import checkpoint
from trainer.config import LaunchError, ranks_from_env
from trainer.device import DeviceError, resolve
from trainer_helpers import (
    JOB_TIMEOUT,
    REPO,
    alive,
    children,
    clean_env,
    free_port,
    full_output_of,
    kill_node,
    output,
    output_of,
    read_json,
    reap,
    run_direct,
    run_nodes,
    signal_node,
    start,
    torchrun_cmd,
    wait_all,
)

pytestmark = pytest.mark.torch  # real torchrun jobs and the trainer's modules

def load_params(prefix: Path, world: int) -> list[dict]:
    return [torch.load(f"{prefix}.rank{r}", weights_only=True) for r in range(world)]


def assert_same_params(params: list[dict], atol: float = 0.0) -> None:
    for other in params[1:]:
        assert other.keys() == params[0].keys()
        for k in params[0]:
            if atol:
                torch.testing.assert_close(other[k], params[0][k], atol=atol, rtol=0)
            else:
                assert torch.equal(other[k], params[0][k]), k


def run_two_nodes(tmp: Path, train_args: list[str], nproc: int = 2, launcher_args=(), legacy=False,
                  env=None) -> list[int]:
    return run_nodes(tmp, train_args, 2, nproc, launcher_args, legacy, env)


# ------------------------------------------------------------ multi-node runs

@pytest.mark.parametrize("legacy", [False, True], ids=["torchrun", "distributed.launch"])
def test_two_nodes_two_procs_learn_and_agree(tmp_path, legacy):
    # launcher.type: launch is a supported setting: a torch without the module fails here.
    assert not legacy or importlib.util.find_spec("torch.distributed.launch") is not None, \
        "this torch has no torch.distributed.launch, which launcher.type: launch starts"
    metrics, params = tmp_path / "m.json", tmp_path / "params"
    codes = run_two_nodes(tmp_path, ["--type", "example", "--max-steps", "50", "--metrics-file", str(metrics),
                                     "--params-file", str(params)], legacy=legacy,
                          launcher_args=["--rdzv-conf=timeout=60"] if not legacy else ["--rdzv_conf=timeout=60"])
    logs = output_of(tmp_path)
    assert codes == [0, 0], logs
    m = read_json(metrics)
    assert m["world_size"] == 4 and m["steps"] == 50 and m["backend"] == "gloo" and m["device"] == "cpu"
    assert m["final_loss"] <= m["first_loss"] / 2, m
    assert m["samples_per_second"] > 0
    assert_same_params(load_params(params, 4))


def test_worker_killed_restarts_and_resumes_exactly(tmp_path):
    """SIGKILL node 1's training process mid-run (an OOM kill or crash; the
    node's torchrun agent survives, as a pod's main process does). With
    --max-restarts 1 both agents restart their workers, which resume from
    the newest checkpoint; the result must equal an uninterrupted run."""
    steps, every = 1500, 100
    common = ["--max-steps", str(steps), "--checkpoint-every", str(every), "--log-every", "0"]

    ref = tmp_path / "ref"
    ref.mkdir()
    codes = run_two_nodes(ref, common + ["--checkpoint-dir", str(ref / "ck"), "--params-file", str(ref / "p")],
                          nproc=1, launcher_args=["--rdzv-conf=timeout=60"])
    assert codes == [0, 0], output_of(ref)

    run = tmp_path / "run"
    run.mkdir()
    ck = run / "ck"
    args = common + ["--checkpoint-dir", str(ck), "--params-file", str(run / "p"),
                     "--metrics-file", str(run / "m.json")]
    port = free_port()
    la = ["--max-restarts=1", "--rdzv-conf=timeout=60"]
    procs = [start(torchrun_cmd(n, 2, 1, port, args, la), run / f"node{n}.log") for n in range(2)]
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while not checkpoint.list_checkpoints(str(ck)) or checkpoint.list_checkpoints(str(ck))[0][0] < 2 * every:
            assert time.monotonic() < deadline, output_of(run)
            assert procs[0].poll() is None and procs[1].poll() is None, output_of(run)
            time.sleep(0.01)
        seen = checkpoint.list_checkpoints(str(ck))[0][0]
        workers = children(procs[1].pid)
        assert workers, "node 1 has no worker to kill"
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        codes = wait_all(procs, JOB_TIMEOUT)
    finally:
        reap(*procs)
    assert codes == [0, 0], output_of(run)
    m = read_json(run / "m.json")
    assert m["steps"] == steps, m
    assert m["resumed_from_step"] is not None and seen <= m["resumed_from_step"] < steps, (seen, m)
    assert m["resumed_from_step"] % every == 0
    assert m["steps_this_run"] == steps - m["resumed_from_step"]
    assert "resumed from checkpoint" in full_output_of(run)
    resumed = load_params(run / "p", 2)
    assert_same_params(resumed)
    # Model, optimizer (momentum), step and data order all restored: the
    # interrupted run ends bit-identical to the uninterrupted one.
    assert_same_params([load_params(ref / "p", 2)[0], resumed[0]])


def start_two_nodes_until_checkpoint(tmp_path, args, env, ck):
    """Two 1-process nodes without restarts, returned once the first checkpoint exists."""
    port = free_port()
    la = ["--max-restarts=0", "--rdzv-conf=timeout=60"]
    procs = [start(torchrun_cmd(n, 2, 1, port, args, la), tmp_path / f"node{n}.log", env) for n in range(2)]
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while not checkpoint.list_checkpoints(str(ck)):
            assert time.monotonic() < deadline and procs[0].poll() is None, output_of(tmp_path)
            time.sleep(0.01)
    except BaseException:
        reap(*procs)
        raise
    return procs


def test_dead_node_fails_fast_then_job_retry_resumes(tmp_path):
    """SIGKILL a whole node (agent and worker: a lost pod). Without restarts
    the survivor must exit non-zero at once, not after the process-group
    timeout (the dead peer's sockets are reset). Re-running the job (what a
    workflow retry does) resumes from the newest checkpoint and ends at the
    exact step."""
    pg_timeout = 120  # far beyond the bounds below: a survivor that waits for it fails them
    env = clean_env(TORCHDAG_PG_TIMEOUT=str(pg_timeout))
    ck = tmp_path / "ck"
    args = ["--max-steps", "3000", "--checkpoint-every", "100", "--log-every", "0", "--checkpoint-dir", str(ck),
            "--metrics-file", str(tmp_path / "m.json")]
    procs = start_two_nodes_until_checkpoint(tmp_path, args, env, ck)
    try:
        survivors = children(procs[0].pid)
        assert survivors, output_of(tmp_path)
        kill_node(procs[1])
        killed_at = time.monotonic()
        while alive(survivors) and time.monotonic() - killed_at < JOB_TIMEOUT:
            time.sleep(0.01)
        ranks_gone = time.monotonic() - killed_at
        code = procs[0].wait(timeout=JOB_TIMEOUT)
        agent_gone = time.monotonic() - killed_at
    finally:
        reap(*procs)
    assert code != 0, output_of(tmp_path)
    # docs/trainer.md: survivors of a crashed peer exit "well under a second" (measured
    # 0.02-0.6 s); torchrun's own teardown adds 2-3 s. Margins for a busy 2-core machine.
    assert ranks_gone < 5, (ranks_gone, output_of(tmp_path))
    assert agent_gone < 20, (agent_gone, output_of(tmp_path))
    lost_at = checkpoint.list_checkpoints(str(ck))[0][0]
    assert lost_at < 3000, "the job finished before the node was killed"

    retry = tmp_path / "retry"
    retry.mkdir()
    codes = run_two_nodes(retry, args, nproc=1, launcher_args=["--rdzv-conf=timeout=60"], env=env)
    assert codes == [0, 0], output_of(retry)
    m = read_json(tmp_path / "m.json")
    assert m["steps"] == 3000 and m["resumed_from_step"] == lost_at, (lost_at, m)


def test_hung_peer_exits_within_pg_timeout(tmp_path):
    """SIGSTOP a whole node: its sockets stay open, as on a network cut or a
    wedged host. The survivor must give up after TORCHDAG_PG_TIMEOUT and exit
    non-zero instead of hanging (gloo's own default is 30 min)."""
    pg_timeout = 5
    env = clean_env(TORCHDAG_PG_TIMEOUT=str(pg_timeout))
    ck = tmp_path / "ck"
    args = ["--max-steps", "100000", "--checkpoint-every", "100", "--log-every", "0", "--checkpoint-dir", str(ck)]
    procs = start_two_nodes_until_checkpoint(tmp_path, args, env, ck)
    try:
        signal_node(procs[1], signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            code = procs[0].wait(timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"survivor still running {JOB_TIMEOUT}s after its peer hung:\n{output_of(tmp_path)}")
        took = time.monotonic() - stopped_at
    finally:
        reap(*procs)
    assert code != 0
    # docs/trainer.md: TORCHDAG_PG_TIMEOUT + about 0.5 s (5.4 s measured for 5), then
    # torchrun's teardown; it waited for the timeout (a hang gives no earlier sign).
    assert pg_timeout <= took < pg_timeout + 15, (took, output_of(tmp_path))
    assert "rank 0 failed" in output(procs[0]), output_of(tmp_path)
    # recording is on by default (TORCHDAG_RECORD): the collective it failed in, on the way out
    assert re.search(r"\[torchdag\] rank 0 failed in \S+ #\d+ of the default group after \d+ s", output(procs[0])), \
        output_of(tmp_path)


# ------------------------------------------------------- mixed-device path

def test_cpu_bucket_grad_sync_matches_ddp(tmp_path):
    """The mixed-device path (gloo through CPU buffers) on CPU ranks must
    train exactly like DDP: same data, same seed, same final parameters.
    A tiny bucket size forces several buckets."""
    results = {}
    for mode in ("ddp", "cpu-buckets"):
        d = tmp_path / mode
        d.mkdir()
        port = free_port()
        cmd = torchrun_cmd(0, 1, 3, port, ["--max-steps", "40", "--seed", "3", "--grad-sync", mode,
                                            "--bucket-mb", "0.001", "--params-file", str(d / "p"),
                                            "--metrics-file", str(d / "m.json")])
        proc = start(cmd, d / "node.log")
        try:
            assert wait_all([proc], JOB_TIMEOUT) == [0], output(proc)
        finally:
            reap(proc)
        results[mode] = (read_json(d / "m.json"), load_params(d / "p", 3))
    m_ddp, p_ddp = results["ddp"]
    m_mix, p_mix = results["cpu-buckets"]
    assert m_ddp["grad_sync"] == "ddp" and m_mix["grad_sync"] == "cpu-buckets"
    assert m_mix["grad_sync_seconds_per_step"] > 0
    assert_same_params(p_mix)
    assert_same_params([p_ddp[0], p_mix[0]], atol=1e-5)
    assert m_mix["final_loss"] == pytest.approx(m_ddp["final_loss"], rel=1e-4)
    assert m_mix["final_loss"] < m_mix["first_loss"] / 2


# ---------------------------------------------------------- scatter-reduce

def test_scatter_reduce_rounds_match_serial(tmp_path):
    port = free_port()
    # 3 ranks and an odd length: uneven chunks.
    proc = start(torchrun_cmd(0, 1, 3, port, ["--type", "scatter-reduce", "--rounds", "4", "--array-size",
                                               "100003", "--metrics-file", str(tmp_path / "m.json")]),
                 tmp_path / "node.log")
    try:
        assert wait_all([proc], JOB_TIMEOUT) == [0], output(proc)
    finally:
        reap(proc)
    lines = [ln for ln in output(proc).splitlines() if "scatter-reduce: round" in ln]
    assert len(lines) == 4 and all(ln.endswith("-> ok") for ln in lines), lines
    assert read_json(tmp_path / "m.json")["ok"] is True


def test_scatter_reduce_detects_a_wrong_chunk(tmp_path):
    port = free_port()
    proc = start(torchrun_cmd(0, 1, 2, port, ["--type", "scatter-reduce", "--rounds", "3", "--array-size", "1000",
                                               "--scatter-reduce-fault-rank", "1"]), tmp_path / "node.log")
    try:
        codes = wait_all([proc], JOB_TIMEOUT)
    finally:
        reap(proc)
    assert codes[0] != 0
    assert "round 1/3" in output(proc) and "MISMATCH" in output(proc)
    assert "round 2/3" not in output(proc)


# ------------------------------------------------- launch env and CLI errors

def test_ranks_from_env_rules():
    base = dict(RANK="1", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2", MASTER_ADDR="h", MASTER_PORT="29500")
    assert ranks_from_env(dict(base, LOCAL_RANK="1")).local_rank == 1
    assert ranks_from_env(base, local_rank_arg=1).local_rank == 1  # legacy --local-rank alone
    with pytest.raises(LaunchError, match="disagrees"):
        ranks_from_env(dict(base, LOCAL_RANK="0"), local_rank_arg=1)
    with pytest.raises(LaunchError, match="WORLD_SIZE must be an integer"):
        ranks_from_env(dict(base, LOCAL_RANK="0", WORLD_SIZE="four"))
    with pytest.raises(LaunchError, match="LOCAL_RANK=2 not in"):
        ranks_from_env(dict(base, LOCAL_RANK="2"))


# ------------------------------------------------- device / backend choice

def test_backend_resolution_and_overrides():
    p = resolve(0, device="cpu", env={})
    assert p.device == torch.device("cpu") and p.backend == "gloo" and not p.mixed
    assert resolve(0, env={"TORCHDAG_DEVICE": "cpu", "TORCHDAG_BACKEND": "gloo"}).backend == "gloo"
    with pytest.raises(DeviceError, match="backend 'nccl' cannot run on device 'cpu'"):
        resolve(0, env={"TORCHDAG_DEVICE": "cpu", "TORCHDAG_BACKEND": "nccl"})
    # The flag wins over the environment.
    assert resolve(0, device="cpu", backend="gloo", env={"TORCHDAG_BACKEND": "hccl"}).backend == "gloo"
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="device 'cuda' requested by TORCHDAG_DEVICE is not usable"):
            resolve(0, env={"TORCHDAG_DEVICE": "cuda"})


FAKE_RAISES = "raise RuntimeError('Failed to load the backend extension: torch_npu (libhccl.so missing)')\n"
FAKE_NO_DEVICE = (
    "import types, torch\n"
    "torch.npu = types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0)\n"
)


def fake_torch_npu(tmp: Path, body: str) -> dict[str, str]:
    pkg = tmp / "fake" / "torch_npu"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    return clean_env(PYTHONPATH=os.pathsep.join([str(tmp / "fake"), str(REPO)]))


PROBE = ("from trainer.device import resolve; p = resolve(0); "
         "print('RESULT', p.device, p.backend, '|', p.note)")


@pytest.mark.parametrize("body,reason", [(FAKE_RAISES, "RuntimeError: Failed to load the backend extension"),
                                         (FAKE_NO_DEVICE, "reports no NPU device")],
                         ids=["import-raises", "no-device"])
def test_broken_torch_npu_degrades_to_cpu(tmp_path, body, reason):
    env = fake_torch_npu(tmp_path, body)
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")][0]
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert line.startswith(f"RESULT {expected}")
    assert reason in line


def test_broken_torch_npu_under_torchrun_logs_once_and_trains(tmp_path):
    env = fake_torch_npu(tmp_path, FAKE_RAISES)
    proc = start(torchrun_cmd(0, 1, 2, free_port(), ["--max-steps", "5", "--device", "cpu"]), tmp_path / "a.log", env)
    try:
        assert wait_all([proc], JOB_TIMEOUT) == [0], output(proc)
    finally:
        reap(proc)
    # --device cpu: npu was never probed.
    assert "npu not used" not in output(proc)

    proc = start(torchrun_cmd(0, 1, 2, free_port(), ["--max-steps", "5"]), tmp_path / "b.log", env)
    try:
        assert wait_all([proc], JOB_TIMEOUT) == [0], output(proc)
    finally:
        reap(proc)
    lines = [ln for ln in output(proc).splitlines() if "npu not used" in ln]
    assert len(lines) == 1 and "RuntimeError" in lines[0], output(proc)  # once per node, not per rank


def test_explicit_npu_request_with_broken_torch_npu_is_an_error(tmp_path):
    env = fake_torch_npu(tmp_path, FAKE_RAISES)
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), TORCHDAG_DEVICE="npu")
    r = run_direct(["--max-steps", "1"], env)
    assert r.returncode == 2
    assert "device 'npu' requested by TORCHDAG_DEVICE is not usable on this node: RuntimeError" in r.stderr


# --------------------------------------------------------------- checkpoints

def test_checkpoint_atomic_and_newest_complete_wins(tmp_path):
    d = str(tmp_path)
    for step in (10, 20, 30):
        checkpoint.save(d, step, {"step": step, "w": torch.full((3,), float(step))}, keep=2)
    assert [s for s, _ in checkpoint.list_checkpoints(d)] == [30, 20]  # pruned to 2
    # A leftover temp file from a crash mid-write is never taken for a checkpoint.
    (tmp_path / ".ckpt-00000040.abc.tmp").write_bytes(b"torn")
    assert checkpoint.load_newest(d)["step"] == 30
    # A damaged newest file falls back to the previous complete one.
    Path(checkpoint.path_for(d, 30)).write_bytes(b"not a checkpoint")
    warnings = []
    payload = checkpoint.load_newest(d, log=warnings.append)
    assert payload["step"] == 20 and torch.equal(payload["w"], torch.full((3,), 20.0))
    assert warnings and "skipping unreadable checkpoint" in warnings[0]
    assert checkpoint.load_newest(str(tmp_path / "absent")) is None


def test_rng_state_round_trip(tmp_path):
    state = checkpoint.rng_state(torch.device("cpu"))
    checkpoint.save(str(tmp_path), 1, {"step": 1, "rng": [state]}, keep=1)
    expected = torch.rand(4)
    torch.rand(100)  # move the stream on
    checkpoint.set_rng_state(checkpoint.load_newest(str(tmp_path))["rng"][0], torch.device("cpu"))
    assert torch.equal(torch.rand(4), expected)
