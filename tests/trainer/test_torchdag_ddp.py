"""torchdag_ddp (docs/byo.md's lines) on a device that gloo refuses as it refuses NPU tensors.

The device is tests/trainer/standin/torch_standin: a PyTorch PrivateUse1 backend, as torch_npu
is, that computes on host memory through the CPU's kernels; gloo gives its tensors the error
users get for NPU tensors ("No backend type associated with device type ..."), from the same
c10d code. Every job here is real torchrun processes on 127.0.0.1 that run the user's script
through torchdag/agents/record.py, as the Workflow's launcher does (the runner puts
torchdag_ddp on sys.path); TORCHDAG_DEVICE=standin selects the device as =npu selects an NPU.
The script is device_checks/torchdag_ddp_check.py: a BatchNorm model, every rank starting from
other weights, gradient accumulation under no_sync(), an evaluation forward now and then.

`make torch21-check` runs this module under torch 2.1 (the torch_npu 2.1 images' torch).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import REPO, free_port
from trainer_helpers import JOB_TIMEOUT, clean_env, output, reap, start, wait_all

pytestmark = [pytest.mark.torch, pytest.mark.xdist_group("torchdag_ddp")]  # one worker shares the references

STANDIN = REPO / "tests" / "trainer" / "standin"
AGENTS = REPO / "torchdag" / "agents"
RECORD = AGENTS / "record.py"
HELPER = AGENTS / "torchdag_ddp.py"
CHECK = REPO / "device_checks" / "torchdag_ddp_check.py"
THIRD_PARTY = REPO / "tests" / "third_party"
REFUSED = "No backend type associated with device type standin"


@pytest.fixture(scope="module")
def standin_env() -> dict[str, str]:
    """The environment of a job that may use the stand-in, its library built (once per torch
    version and source) before any rank needs it."""
    env = clean_env(PYTHONPATH=str(STANDIN), TORCHDAG_BACKEND="gloo", TORCHDAG_PG_TIMEOUT="60")
    built = subprocess.run([sys.executable, "-c", "import torch_standin; print(torch_standin.build())"],
                           env=env, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-4000:]
    return env


def run_job(tmp: Path, env: dict[str, str], devices: list[str], nproc: int, script: list[str],
            cwd: Path | None = None) -> tuple[list[int], str]:
    """One torchrun "node" per entry of `devices` (its TORCHDAG_DEVICE), nproc ranks each, all
    running `record.py SCRIPT...`; their exit statuses and their logs."""
    port = free_port()
    procs = []
    try:
        for node, kind in enumerate(devices):
            command = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={len(devices)}",
                       f"--node-rank={node}", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
                       f"--master-port={port}", str(RECORD), *script]
            procs.append(start(command, tmp / f"node{node}.log", dict(env, TORCHDAG_DEVICE=kind), cwd=cwd))
        codes = wait_all(procs, JOB_TIMEOUT)
    finally:
        reap(*procs)
    return codes, "\n".join(output(p) for p in procs)


def train(tmp: Path, env: dict[str, str], devices: list[str], nproc: int, *extra: str) -> tuple[list[dict], list[dict]]:
    """The check script's job; every rank's state (parameters and buffers) and facts."""
    out = tmp / "out"
    out.mkdir(parents=True)
    codes, logs = run_job(tmp, env, devices, nproc, [str(CHECK), "train", str(out), *extra])
    assert codes == [0] * len(devices), logs[-6000:]
    world = len(devices) * nproc
    states = [torch.load(out / f"rank{r}.pt") for r in range(world)]
    facts = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    return states, facts


_cpu_references: dict[int, list[dict]] = {}


def cpu_ddp(tmp_path_factory, env: dict[str, str], world: int) -> list[dict]:
    """The same script on the CPU alone: torch's DistributedDataParallel over gloo."""
    if world not in _cpu_references:
        states, facts = train(tmp_path_factory.mktemp(f"cpu{world}"), env, ["cpu"], world)
        assert {f["exchange"] for f in facts} == {"DistributedDataParallel"}
        _cpu_references[world] = states
    return _cpu_references[world]


def assert_same(states: list[dict], reference: dict, atol: float) -> None:
    for rank, state in enumerate(states):
        assert state.keys() == reference.keys()
        for name, value in reference.items():
            where = f"rank {rank} {name}"
            torch.testing.assert_close(state[name], value, atol=atol, rtol=0, msg=lambda m, at=where: f"{at}: {m}")


def test_the_lines_before_issue_44_fail_in_ddps_constructor(tmp_path, standin_env):
    """docs/byo.md's lines as of 89a622e: DDP(model.to(device), device_ids=...), then
    exchange_on_cpu(model). DDP's constructor checks the shapes and broadcasts rank 0's
    parameters over gloo before any hook exists, and gloo refuses the device's tensors."""
    out = tmp_path / "out"
    out.mkdir()
    codes, logs = run_job(tmp_path, standin_env, ["standin"], 2, [str(CHECK), "train", str(out), "--lines", "89a622e"])
    assert codes != [0], logs[-4000:]
    assert f"RuntimeError: {REFUSED}" in logs, logs[-4000:]
    assert "_verify_param_shape_across_processes" in logs and "in __init__" in logs, logs[-4000:]
    assert "[check]" not in logs  # no rank trained a step


@pytest.mark.parametrize("world", [2, 3])
def test_the_lines_train_as_ddp_does_on_the_cpu(tmp_path, tmp_path_factory, standin_env, world):
    """20 steps of 2 micro-batches: every rank ends with the parameters and buffers of torch's
    DDP on the CPU (same script, TORCHDAG_DEVICE=cpu), to 1e-6."""
    states, facts = train(tmp_path, standin_env, ["standin"], world)
    assert [f["device"] for f in facts] == [f"standin:{r}" for r in range(world)]
    assert {f["exchange"] for f in facts} == {"CpuBucketDDP"} and facts[0]["steps"] == 20
    assert {f["exchanges"] for f in facts} == {20}  # one per step: none for the micro-batches under no_sync()
    assert_same(states, cpu_ddp(tmp_path_factory, standin_env, world)[0], atol=1e-6)


def test_a_job_of_the_device_and_the_cpu_trains_as_ddp_does_on_the_cpu(tmp_path, tmp_path_factory, standin_env):
    """One node's rank on the stand-in, the other's on the CPU: both take the CPU buckets
    (the ranks agree on it when DDP() is called), and end where all-CPU DDP ends."""
    states, facts = train(tmp_path, standin_env, ["standin", "cpu"], 1)
    assert [f["device"] for f in facts] == ["standin:0", "cpu"]
    assert {f["exchange"] for f in facts} == {"CpuBucketDDP"}
    assert_same(states, cpu_ddp(tmp_path_factory, standin_env, 2)[0], atol=1e-6)


def marked(path: Path) -> list[str]:
    """The lines docs/byo.md asks for, as a script marks them (`# torchdag`)."""
    return [line.strip() for line in path.read_text().splitlines() if "# torchdag" in line]


@pytest.mark.parametrize("script", ["pytorch_examples/multinode.py", "original_style.py"])
def test_scripts_of_others_run_a_job_of_the_device_and_the_cpu(tmp_path, standin_env, script):
    """pytorch/examples' multinode script and one in the original jobs' style, changed by the
    documented lines alone, on the stand-in beside the CPU."""
    path = THIRD_PARTY / script
    for source in path.parent.glob("*.py"):
        shutil.copy(source, tmp_path / source.name)
    args = ["2", "1", "--batch_size", "32"] if path.name == "multinode.py" else []
    codes, logs = run_job(tmp_path, standin_env, ["standin", "cpu"], 1, [path.name, *args], cwd=tmp_path)
    assert codes == [0, 0], logs[-6000:]
    assert any("torchdag_ddp.DDP(" in line for line in marked(path))
    if path.name == "multinode.py":
        assert "[GPU0] Epoch 1 | Batchsize: 32 | Steps: 32" in logs and "[GPU1] Epoch 1" in logs
        snapshot = torch.load(tmp_path / "snapshot.pt", map_location="cpu")  # rank 0's, saved from the device
        assert snapshot["EPOCHS_RUN"] == 1 and set(snapshot["MODEL_STATE"]) == {"weight", "bias"}
    else:
        assert "init_process_group('hccl') skipped: the process group runs gloo" in logs
        assert "[original] rank 0/2: 20 steps, replicas equal: True" in logs
        assert "[original] rank 1/2: 20 steps, replicas equal: True" in logs


HCCL_STAND_IN = """
import sys, torch, torch.distributed as dist
# What torch_npu does for hccl: a backend registered by name (here gloo underneath, on the CPU).
def gloo(store, rank, size, timeout):
    return dist.ProcessGroupGloo(store, rank, size, timeout)
dist.Backend.register_backend("hccl", gloo, devices=["cpu"])
import torchdag_ddp
device = torchdag_ddp.setup()
model = torchdag_ddp.DDP(torch.nn.Linear(3, 2).to(device), device_ids=[0])
# one write: the two ranks share the job's output, and print() writes each word on its own
sys.stdout.write(f"backend {dist.get_backend()} exchange {type(model).__name__} device_ids {model.device_ids}\\n")
"""


def test_under_any_backend_but_gloo_ddp_is_torchs_own(tmp_path, standin_env):
    """Under hccl or nccl, DDP() is DistributedDataParallel itself, and it asks the ranks
    nothing (no gather). Shown with a backend registered under the name hccl, as torch_npu
    registers it; device_ids on a CPU module go, as DDP wants."""
    (tmp_path / "script.py").write_text(HCCL_STAND_IN)
    codes, logs = run_job(tmp_path, dict(standin_env, TORCHDAG_BACKEND="hccl"), ["cpu"], 2, ["script.py"], cwd=tmp_path)
    assert codes == [0], logs[-4000:]
    assert logs.count("backend hccl exchange DistributedDataParallel device_ids None") == 2, logs[-4000:]


@pytest.mark.parametrize(("env", "attempt"), [
    ({}, 0),
    ({"TORCHDAG_RESTART": "2"}, 2),  # job recovery: the whole job's third attempt
    ({"TORCHDAG_RESTART": "1", "TORCHELASTIC_RESTART_COUNT": "0"}, 1),  # node recovery: a lost node's replacement
    ({"TORCHDAG_RESTART": "0", "TORCHELASTIC_RESTART_COUNT": "1"}, 1),  # node recovery: a survivor's new workers
    ({"TORCHDAG_RESTART": "", "TORCHELASTIC_RESTART_COUNT": "3"}, 3),  # launcher.maxRestarts, in place
])
def test_restart_says_whether_to_resume_under_either_recovery(monkeypatch, env, attempt):
    from torchdag.agents import torchdag_ddp

    for name in ("TORCHDAG_RESTART", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert torchdag_ddp.restart() == attempt


def test_the_helper_is_python_3_8():
    """310P images ship Python 3.8 with torch_npu 2.1: the helper parses as 3.8's grammar."""
    ast.parse(HELPER.read_text(), feature_version=(3, 8))


NO_NUMPY = """
import os, sys
sys.modules["numpy"] = None  # as in an image of python3 and PyPI's torch alone: torch runs without numpy
sys.path.insert(0, sys.argv[1])
import torch
import torch.distributed as dist
import torchdag_ddp

dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=0, world_size=1)
try:
    torch.tensor([1.0]).numpy()
except RuntimeError as err:
    print(f"numpy: {err}")
print("exchange:", torchdag_ddp.choose_exchange(torch.device("cpu")))
model = torchdag_ddp.DDP(torch.nn.Linear(2, 1))
print("wrapped:", type(model).__name__)
dist.destroy_process_group()
"""


def test_the_exchange_is_chosen_without_numpy(tmp_path):
    """PyPI's torch does not install numpy, and torch's object collectives need it; the helper's
    one gather of the ranks' device kinds must not (a user's image with python3 and torch only)."""
    script = tmp_path / "no_numpy.py"
    script.write_text(NO_NUMPY)
    done = subprocess.run([sys.executable, str(script), str(AGENTS), str(free_port())], capture_output=True,
                          text=True, timeout=120, env=clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "numpy: Numpy is not available" in done.stdout, done.stdout  # the test stands where the image stands
    assert "exchange: ('ddp', ['cpu'])" in done.stdout and "wrapped: DistributedDataParallel" in done.stdout
