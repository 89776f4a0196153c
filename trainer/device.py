"""The one place that decides the device and the process-group backend.

The device kind: ``--device``, then ``TORCHDAG_DEVICE``, then auto-detection (npu when
torch_npu imports and an NPU is present, else cuda, else cpu: torchdag/agents/torchdag_device.py,
which preflight and the user helper torchdag_ddp detect with too). The backend: ``--backend``,
then ``TORCHDAG_BACKEND``, then the device kind's native backend. Both TORCHDAG_* come from
the rendered Workflow; the kinds, their backends and which backend runs on which kind come
from the same catalogue (torchdag/catalog.yaml `devices` and `backends`), which the image
carries beside trainer/ as a checkout does. A kind's torch module (torch.npu, registered
by torch_npu, or torch.cuda) is its one device handle, as torchtitan's `device_module`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import torch
import yaml

from torchdag.agents import torchdag_device
from trainer.errors import TrainerError

CATALOG = Path(__file__).resolve().parent.parent / "torchdag" / "catalog.yaml"


@functools.lru_cache(maxsize=None)
def catalog() -> dict:
    """The catalogue's `devices` (kind -> facts, the native `backend` among them) and `backends`."""
    entries = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))
    return {"devices": entries["devices"], "backends": entries["backends"]}


def backend_names() -> list[str]:
    """The backends a trainer runs: each device kind's native one (gloo is cpu's)."""
    return list(dict.fromkeys(entry["backend"] for entry in catalog()["devices"].values()))


class DeviceError(TrainerError):
    """The requested device/backend cannot be used on this node."""


@dataclasses.dataclass(frozen=True)
class Placement:
    device: torch.device  # this rank's compute device, e.g. cuda:1
    backend: str  # process-group backend
    source: str  # how the device kind was chosen, for the startup log line
    note: str = ""  # why auto-detection skipped npu, logged once per node

    @property
    def kind(self) -> str:
        return self.device.type

    @property
    def mixed(self) -> bool:
        """gloo on an accelerator: DDP cannot hand NPU tensors to gloo, so
        gradients go through CPU buckets (torchdag/agents/torchdag_ddp.py)."""
        return self.backend == "gloo" and self.kind != "cpu"


def resolve(
    local_rank: int,
    device: str | None = None,
    backend: str | None = None,
    env: dict[str, str] | None = None,
) -> Placement:
    """Pick device and backend for this rank and make the device current."""
    env = os.environ if env is None else env
    devices, backends = catalog()["devices"], catalog()["backends"]
    kind = device or env.get("TORCHDAG_DEVICE") or None
    source = "--device" if device else ("TORCHDAG_DEVICE" if kind else "auto")
    note = ""
    if kind is not None:
        kind = kind.strip().lower()
        if kind not in devices:
            raise DeviceError(f"unknown device kind {kind!r} (from {source}); use one of {', '.join(devices)}")
        ok, why = torchdag_device.usable(kind)
        if not ok:
            # An explicit request that cannot be met is an error, not a silent
            # fallback: a CPU rank in an hccl/nccl job would only fail later,
            # and more obscurely.
            raise DeviceError(f"device {kind!r} requested by {source} is not usable on this node: {why}")
    else:
        kind, note = torchdag_device.detect()

    bk = (backend or env.get("TORCHDAG_BACKEND") or devices[kind]["backend"]).strip().lower()
    if bk not in backend_names():
        raise DeviceError(f"unknown backend {bk!r}; use one of {', '.join(backend_names())}")
    if kind not in backends[bk].get("devices", [kind]):
        raise DeviceError(f"backend {bk!r} cannot run on device {kind!r}: it needs "
                          f"{' or '.join(backends[bk]['devices'])}; use backend gloo to mix device kinds")

    if kind == "cpu":
        return Placement(device=torch.device("cpu"), backend=bk, source=source, note=note)
    count = int(torchdag_device.device_module(kind).device_count())
    if local_rank >= count:
        raise DeviceError(
            f"LOCAL_RANK {local_rank} but only {count} {kind} device(s) visible; "
            "lower --nproc-per-node or fix the device visibility env"
        )
    return Placement(device=torchdag_device.make_current(kind, local_rank), backend=bk, source=source, note=note)
