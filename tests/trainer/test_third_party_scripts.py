"""Scripts torchdag did not write, through a rendered DAG under `make smoke` (CPU stand-ins):
pytorch/examples' multinode DDP script and one in the original hand-written jobs' style
(hccl hard-coded, tensors to local_rank), each with only the lines docs/byo.md documents
(marked `# torchdag`), on a mixed job: an Ascend node (trained on CPU, --cpu) and a CPU node
over gloo, gradients exchanged through torchdag_ddp.DDP's CPU buckets. The same scripts with
the Ascend node's rank on a device gloo refuses as it refuses NPU tensors:
tests/trainer/test_torchdag_ddp.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from localrun_helpers import REPO, Run, free_port, values_with

THIRD_PARTY = REPO / "tests" / "third_party"
MIXED = [{"name": "npu-a", "address": "198.18.0.1", "accelerator": "ascend910", "devices": 1, "master": True},
         {"name": "cpu-b", "address": "198.18.0.2", "devices": 1}]


def run_mixed(tmp_path: Path, script: Path, args: list[str], *extra_files: Path) -> str:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    for path in (script, *extra_files):
        shutil.copy(path, workspace / path.name)
    values = values_with(tmp_path, script=f"/workspace/{script.name}", args=args, nodes=MIXED, backend="gloo",
                         workingDir="/workspace", ascend={"mountDriver": False, "setEnvScript": ""},
                         timeouts={"rendezvous": 60, "processGroup": 68, "workflowDeadline": 600})
    run = Run(str(values), "--cpu", "--map", f"/workspace={workspace}", "--port", str(free_port()), "--timeout", "150")
    assert run.finish(170) == 0, run.text[-4000:]
    return run.text


def marked_lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.rstrip().endswith("# torchdag")
               or "# torchdag:" in line)


@pytest.mark.torch  # real torchrun jobs
def test_pytorch_examples_multinode_runs_a_mixed_job(tmp_path):
    folder = THIRD_PARTY / "pytorch_examples"
    assert marked_lines(folder / "multinode.py") == 4  # import, setup(), device(), DDP()
    text = run_mixed(tmp_path, folder / "multinode.py", ["2", "1", "--batch_size", "32"], folder / "datautils.py")
    assert "[GPU0] Epoch 1 | Batchsize: 32 | Steps: 32" in text and "[GPU1] Epoch 1 | Batchsize: 32 | Steps: 32" in text
    assert "Epoch 1 | Training snapshot saved at snapshot.pt" in text
    assert (tmp_path / "workspace" / "snapshot.pt").exists()


@pytest.mark.torch
def test_an_original_style_script_runs_a_mixed_job(tmp_path):
    script = THIRD_PARTY / "original_style.py"
    assert marked_lines(script) == 4  # import, setup(), device(), DDP()
    text = run_mixed(tmp_path, script, [])
    assert "[torchdag_ddp] init_process_group('hccl') skipped: the process group runs gloo (TORCHDAG_BACKEND)" in text
    assert "[original] rank 0/2: 20 steps, replicas equal: True" in text
    assert "[original] rank 1/2: 20 steps, replicas equal: True" in text
