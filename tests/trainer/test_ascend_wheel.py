"""The real torch_npu wheel without CANN: what an Ascend-based training image does on a
GPU or CPU node, and on an NPU node that the local runner moves onto CPU (`--cpu`).

`make test` builds .venv-ascend (requirements-ascend-test.txt: torch==2.13.0, numpy,
PyYAML, then torch-npu==2.13.0 with --no-deps) and these tests run rendered Workflows
through the local runner *under that venv's Python*, so `torchrun` and `python3` are the
ones with torch_npu installed:

(a) the environment reproduces the crash: `import torch` fails in torch_npu's autoload;
(b) a rendered CPU job trains, because the Workflow sets TORCH_DEVICE_BACKEND_AUTOLOAD=0
    on non-Ascend nodes; the same file with that variable removed dies at torchrun's import;
(c) a rendered mixed Ascend + CPU job (backend gloo) trains with `--cpu`.

The venv lacks jsonschema, so the runner is given a file rendered by the dev venv's
render.py (the runner reads a rendered Workflow without rendering it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import REPO, free_port

ASCEND_VENV = REPO / ".venv-ascend"
ASCEND_PY = ASCEND_VENV / "bin" / "python"
AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"
CRASH = "RuntimeError: Failed to load the backend extension: torch_npu"

# `make test` builds .venv-ascend and says so (TORCHDAG_ASCEND_VENV_REQUIRED=1): there a
# missing venv fails these tests. Only a bare `pytest` without it skips them.
pytestmark = [pytest.mark.ascend, pytest.mark.torch, pytest.mark.skipif(
    not ASCEND_VENV.exists() and os.environ.get("TORCHDAG_ASCEND_VENV_REQUIRED") != "1",
    reason=".venv-ascend does not exist: `make test` (or `make ascend-venv`) builds it with the real torch_npu wheel",
)]

# What the runner's processes inherit: this shell's env without any AUTOLOAD setting, so
# only the rendered Workflow decides it (a pod does not inherit the developer's shell).
ENV = {k: v for k, v in os.environ.items() if k != AUTOLOAD}
ENV["OMP_NUM_THREADS"] = "1"


@pytest.fixture(scope="module", autouse=True)
def ascend_venv_complete() -> None:
    if not (ASCEND_VENV / ".installed").exists():
        pytest.fail(".venv-ascend exists but was not completely built (no .installed stamp): rerun `make ascend-venv`")




def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def render(values: dict, folder: Path, name: str) -> Path:
    """Render with the dev venv's pipeline (render.py), as a user would before submitting."""
    values_file = folder / f"{name}.values.yaml"
    values_file.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    out = folder / f"{name}.workflow.yaml"
    proc = subprocess.run([sys.executable, "render.py", str(values_file), "-o", str(out), "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return out


def workflow(path: Path) -> dict:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return next(d for d in docs if d.get("kind") == "Workflow")


def container_env(doc: dict) -> dict[str, dict[str, str]]:
    """Template name -> its container's env (name -> value)."""
    return {t["name"]: {e["name"]: e.get("value") for e in t["container"].get("env") or []}
            for t in doc["spec"]["templates"] if "container" in t}


def localrun(values_file: Path, cpu: bool = False, drop: str | None = None, timeout: float = 90) -> tuple[int, str]:
    """make smoke's runner with .venv-ascend's bin directory (torchrun, python3) first on every
    node's PATH (the runner itself needs the dev venv: the pipeline validates with jsonschema);
    `drop`: an env name taken out of every node's env. Returns (exit status, every line)."""
    from testbed.localrun import JobRunner, outcome_lines, prepare_job
    from testbed.runtime import Options
    from torchdag.pipeline import run

    job = prepare_job(run(values_file).plan, Options(cpu=cpu))
    lines = [f"{task.name}: {note}" for task in job.tasks for note in task.notes]
    for task in job.tasks:
        task.env = [(name, value) for name, value in task.env if name != drop]

    class Sink:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    outcome = JobRunner(job, out=Sink(), timeout=timeout, grace=1, base_env=ENV, bin_dir=str(ASCEND_PY.parent)).run()
    return outcome.code, "\n".join(lines + outcome_lines(outcome))


def test_the_wheel_breaks_import_torch_without_autoload_off():
    """(a) The venv reproduces the crash an Ascend image has on a node without CANN."""
    crash = subprocess.run([str(ASCEND_PY), "-c", "import torch"], env=ENV, capture_output=True, text=True, timeout=120)
    assert crash.returncode == 1, crash.stdout + crash.stderr
    assert CRASH in crash.stderr, tail(crash.stderr)
    assert f"{AUTOLOAD}=0" in crash.stderr
    assert "libhccl.so" in crash.stderr  # the cause: CANN's libraries are missing

    # With autoload off: torch imports, the wheel is the real 2.13.0 and only an explicit
    # `import torch_npu` fails, as a plain ImportError the trainer's device probe catches.
    probe = ("import importlib.metadata as m, torch\n"
             "print('torch-npu', m.version('torch-npu'))\n"
             "try:\n    import torch_npu\nexcept ImportError as err:\n    print('ImportError', err)\n")
    ok = subprocess.run([str(ASCEND_PY), "-c", probe], env=dict(ENV, **{AUTOLOAD: "0"}),
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, tail(ok.stdout + ok.stderr)
    assert "torch-npu 2.13.0\n" in ok.stdout, ok.stdout
    assert "ImportError libhccl.so" in ok.stdout, ok.stdout


def cpu_values(port: int) -> dict:
    """examples/local.yaml (2 CPU nodes x 2 processes) with a few steps and short waits."""
    values = yaml.safe_load((REPO / "examples" / "local.yaml").read_text(encoding="utf-8"))
    values["args"] = ["--type", "example", "--max-steps", "5", "--log-every", "1"]
    values["port"] = port
    values["timeouts"] = {"rendezvous": 30, "processGroup": 30, "workflowDeadline": 120}
    return values


def test_rendered_cpu_job_runs_beside_torch_npu(tmp_path):
    """(b) The rendered AUTOLOAD=0 is what lets torchrun start; without it the job dies at import."""
    rendered = render(cpu_values(free_port()), tmp_path, "cpu")
    doc = workflow(rendered)
    # the node templates (torchrun and the trainer import torch); the schedule watch's does not
    envs = {name: env for name, env in container_env(doc).items() if "TORCHDAG_BACKEND" in env}
    assert envs and all(env.get(AUTOLOAD) == "0" for env in envs.values()), envs

    code, out = localrun(tmp_path / "cpu.values.yaml", timeout=90)
    assert code == 0, tail(out)
    assert "[trainer] done: 5 steps" in out, tail(out)
    assert "result: every task exited 0" in out
    assert CRASH not in out

    # The counterfactual: the same nodes without the variable. torchrun itself dies
    # importing torch (before any trainer code), so the run fails within seconds.
    code, out = localrun(tmp_path / "cpu.values.yaml", drop=AUTOLOAD, timeout=30)
    assert code == 1, tail(out)
    assert CRASH in out, tail(out)
    assert "from torch.distributed.run import main" in out  # the launcher, not the trainer
    assert "[trainer]" not in out


def test_rendered_mixed_ascend_cpu_job_runs_on_cpu(tmp_path):
    """(c) An Ascend 910 node and a CPU node over gloo, the NPU node run on CPU (`--cpu`).

    The NPU node's rendered env has no AUTOLOAD setting: on the cluster CANN's set_env.sh
    is sourced and torch_npu loads. Here there is no CANN, so `--cpu` must also turn the
    autoload off for the nodes it moves onto CPU, or torchrun dies at import there."""
    port = free_port()
    values = {
        "name": "ascend-wheel-mixed",
        "image": "registry.example.com/torchdag/trainer:0.1.0",
        "script": "/opt/torchdag/trainer/train.py",
        "args": ["--type", "example", "--max-steps", "5", "--log-every", "1"],
        "port": port,
        "backend": "gloo",
        "preflight": {"enabled": True, "timeout": 30},
        "timeouts": {"rendezvous": 30, "processGroup": 68, "workflowDeadline": 120},  # 68: HCCL's step, at least
        "nodes": [
            {"name": "atlas-01", "address": "10.30.0.1", "nic": "enp189s0f0", "accelerator": "ascend910",
             "devices": 1, "master": True},
            {"name": "cpu-01", "address": "10.30.0.3", "nic": "eth0", "accelerator": "cpu", "devices": 1},
        ],
    }
    rendered = render(values, tmp_path, "mixed")
    envs = container_env(workflow(rendered))
    npu = next(env for env in envs.values() if env.get("TORCHDAG_DEVICE") == "npu")
    cpu = next(env for env in envs.values() if env.get("TORCHDAG_DEVICE") == "cpu")
    assert AUTOLOAD not in npu and cpu.get(AUTOLOAD) == "0", envs

    code, out = localrun(tmp_path / "mixed.values.yaml", cpu=True, timeout=90)
    hint = ("; the NPU node died importing torch: `--cpu` must set TORCH_DEVICE_BACKEND_AUTOLOAD=0 on the nodes it "
            "moves onto CPU (testbed/runtime/mapping.py onto_cpu)") if CRASH in out else ""
    assert code == 0, tail(out) + hint
    assert "node-0: TORCHDAG_DEVICE npu -> cpu (--cpu)" in out
    assert "preflight --device=npu -> --device=cpu" in out
    assert "[trainer] done: 5 steps" in out, tail(out)
    assert "result: every task exited 0" in out


def test_the_trainer_turns_autoload_off_itself_unless_told_otherwise(tmp_path):
    """docs/trainer.md, TORCH_DEVICE_BACKEND_AUTOLOAD: the trainer sets it to 0 before `import
    torch` unless it is set, so it starts beside the real wheel even when launched without
    the Workflow's env; its own guarded `import torch_npu` then degrades to the CPU. A
    user's explicit 1 wins, and the wheel's crash shows."""
    ranks = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
             "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1"}
    train = [str(ASCEND_PY), str(REPO / "trainer" / "train.py"), "--max-steps", "2", "--metrics-file"]
    unset = subprocess.run(train + [str(tmp_path / "m.json")], env=dict(ENV, MASTER_PORT=str(free_port()), **ranks),
                           capture_output=True, text=True, timeout=300)
    assert unset.returncode == 0, tail(unset.stdout + unset.stderr)
    assert "[trainer] npu not used (ImportError: libhccl.so" in unset.stdout, tail(unset.stdout)
    assert json.loads((tmp_path / "m.json").read_text())["device"] == "cpu"
    explicit = subprocess.run(train + [str(tmp_path / "m2.json")],
                              env=dict(ENV, MASTER_PORT=str(free_port()), **ranks, **{AUTOLOAD: "1"}),
                              capture_output=True, text=True, timeout=300)
    assert explicit.returncode != 0 and CRASH in explicit.stderr, tail(explicit.stdout + explicit.stderr)
