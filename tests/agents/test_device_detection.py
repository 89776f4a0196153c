"""torchdag/agents/torchdag_device.py, the one device detection: preflight reads the device
files without torch, the trainer and torchdag_ddp the kind's torch module; all three take it
from this module (the trainer's torch path: tests/trainer/test_trainer.py, broken torch_npu)."""

from __future__ import annotations

import pytest

from torchdag.agents import preflight, torchdag_device


@pytest.fixture
def dev(tmp_path, monkeypatch):
    """A folder that stands in for /dev: the device files' prefixes point into it."""
    monkeypatch.setattr(torchdag_device, "DEVICE_FILES", {"npu": f"{tmp_path}/davinci", "cuda": f"{tmp_path}/nvidia"})
    for name in ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "TORCHDAG_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_only_numbered_device_files_count(dev, monkeypatch):
    for name in ("davinci0", "davinci1", "davinci12", "davinci_manager", "nvidiactl"):
        (dev / name).touch()
    assert torchdag_device.device_files("npu") == [f"{dev}/davinci0", f"{dev}/davinci1", f"{dev}/davinci12"]
    assert torchdag_device.device_files("cuda") == []
    assert torchdag_device.visible_devices("npu") == 3
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4, 5")  # the visibility variable limits them
    assert torchdag_device.visible_devices("npu") == 2


def test_the_order_is_npu_cuda_cpu_and_the_workflows_kind_wins(dev, monkeypatch):
    assert torchdag_device.kind_from_files() == "cpu"
    (dev / "nvidia0").touch()
    assert torchdag_device.kind_from_files() == "cuda"
    (dev / "davinci0").touch()
    assert torchdag_device.kind_from_files() == "npu"
    assert preflight.detect_device() == "npu"  # preflight's own answer is this module's
    monkeypatch.setenv("TORCHDAG_DEVICE", "cpu")
    assert preflight.detect_device() == "cpu"


def test_preflight_counts_with_it(dev, monkeypatch):
    (dev / "nvidia0").touch()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert preflight.check_devices("cuda", 2).fatal
    assert "1 visible cuda device(s) < nproc-per-node 2" in preflight.check_devices("cuda", 2).message


@pytest.mark.torch
def test_torch_side_on_this_machine():
    """No NPU here: torch_npu is not in this venv, so npu is not usable and says why; cpu always is."""
    import torch

    from torchdag.agents import torchdag_ddp

    ok, why = torchdag_device.usable("npu")
    assert not ok and why.startswith("ModuleNotFoundError: No module named 'torch_npu'")
    assert torchdag_device.usable("cpu") == (True, "cpu")
    kind, note = torchdag_device.detect()
    assert kind == ("cuda" if torch.cuda.is_available() else "cpu")
    assert note.startswith("npu not used (ModuleNotFoundError") and note.endswith("falling back to cuda/cpu")
    assert torchdag_ddp.device_of("cpu", 0) == torchdag_device.make_current("cpu", 0) == torch.device("cpu")
