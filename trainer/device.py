"""The one place that decides the device and the process-group backend.

Resolution order for the device kind: ``--device`` flag, then
``TORCHDAG_DEVICE``, then auto-detection (npu when torch_npu imports and an
NPU is present, else cuda, else cpu).  The backend: ``--backend`` flag, then
``TORCHDAG_BACKEND``, then the native backend of the device kind
(npu->hccl, cuda->nccl, cpu->gloo).
"""

from __future__ import annotations

import dataclasses
import os

import torch

from trainer.errors import TrainerError

DEVICE_KINDS = ("npu", "cuda", "cpu")
BACKENDS = ("hccl", "nccl", "gloo")
NATIVE_BACKEND = {"npu": "hccl", "cuda": "nccl", "cpu": "gloo"}


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
        gradients go through CPU buffers (see trainer/mixed.py)."""
        return self.backend == "gloo" and self.kind != "cpu"


def _try_import_torch_npu() -> tuple[bool, str]:
    """Import torch_npu, turning *any* failure into (False, reason).

    Off-Ascend the wheel raises ImportError (missing libhccl.so) or, through
    torch's autoload hook, RuntimeError; neither may take the trainer down when
    the node simply has no NPU.
    """
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure means "no NPU"
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    npu = getattr(torch, "npu", None)
    if npu is None:
        return False, "torch_npu imported but did not register torch.npu"
    try:
        count = int(npu.device_count()) if npu.is_available() else 0
    except Exception as exc:  # noqa: BLE001 - a broken driver is "no NPU"
        return False, f"torch.npu query failed: {type(exc).__name__}: {exc}"
    if count < 1:
        return False, "torch_npu imported but reports no NPU device"
    return True, f"{count} NPU(s)"


def npu_available() -> tuple[bool, str]:
    return _try_import_torch_npu()


def cuda_available() -> tuple[bool, str]:
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return True, f"{torch.cuda.device_count()} CUDA device(s)"
    return False, "no CUDA device"


def _available(kind: str) -> tuple[bool, str]:
    if kind == "npu":
        return npu_available()
    if kind == "cuda":
        return cuda_available()
    return True, "cpu"


def device_count(kind: str) -> int:
    if kind == "npu":
        return int(torch.npu.device_count())  # type: ignore[attr-defined]
    if kind == "cuda":
        return torch.cuda.device_count()
    return 1


def resolve(
    local_rank: int,
    device: str | None = None,
    backend: str | None = None,
    env: dict[str, str] | None = None,
) -> Placement:
    """Pick device and backend for this rank and make the device current."""
    env = os.environ if env is None else env
    kind = device or env.get("TORCHDAG_DEVICE") or None
    source = "--device" if device else ("TORCHDAG_DEVICE" if kind else "auto")
    note = ""
    if kind is not None:
        kind = kind.strip().lower()
        if kind not in DEVICE_KINDS:
            raise DeviceError(f"unknown device kind {kind!r} (from {source}); use one of {', '.join(DEVICE_KINDS)}")
        ok, why = _available(kind)
        if not ok:
            # An explicit request that cannot be met is an error, not a silent
            # fallback: a CPU rank in an hccl/nccl job would only fail later,
            # and more obscurely.
            raise DeviceError(f"device {kind!r} requested by {source} is not usable on this node: {why}")
    else:
        ok, why = npu_available()
        if ok:
            kind = "npu"
        else:
            note = f"npu not used ({why}); falling back to cuda/cpu"
            kind = "cuda" if cuda_available()[0] else "cpu"

    bk = backend or env.get("TORCHDAG_BACKEND") or NATIVE_BACKEND[kind]
    bk = bk.strip().lower()
    if bk not in BACKENDS:
        raise DeviceError(f"unknown backend {bk!r}; use one of {', '.join(BACKENDS)}")
    if bk != "gloo" and bk != NATIVE_BACKEND[kind]:
        raise DeviceError(
            f"backend {bk!r} cannot run on device {kind!r}: hccl needs npu, nccl needs cuda; "
            "use backend gloo to mix device kinds"
        )

    if kind == "cpu":
        dev = torch.device("cpu")
    else:
        count = device_count(kind)
        if local_rank >= count:
            raise DeviceError(
                f"LOCAL_RANK {local_rank} but only {count} {kind} device(s) visible; "
                "lower --nproc-per-node or fix the device visibility env"
            )
        dev = torch.device(kind, local_rank)
        if kind == "npu":
            torch.npu.set_device(dev)  # type: ignore[attr-defined]
        else:
            torch.cuda.set_device(dev)
    return Placement(device=dev, backend=bk, source=source, note=note)
