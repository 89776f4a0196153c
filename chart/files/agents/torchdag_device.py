"""Which accelerator this node has: the one module that detects it, for preflight.py, the user
helper torchdag_ddp.py and torchdag's trainer (trainer/device.py, which adds the backend).

Two ways to look, one order (npu, then cuda, then cpu):
- without torch, from the device files the container was given (/dev/davinciN, /dev/nvidiaN)
  and the visibility variables: preflight, which must not be broken by torch_npu;
- with torch, through each kind's device module, torch.npu (registered by torch_npu) or
  torch.cuda, as torchtitan's `device_module`: the trainer and torchdag_ddp.

Standard library; torch is imported by the functions that need it, not by this module. It
ships beside the other helpers (catalog `agents.files`), and they import it as a sibling.
"""

from __future__ import annotations

import glob
import importlib
import os
import re

AUTO_ORDER = ("npu", "cuda", "cpu")  # what auto-detection tries first; cpu is always there
DEVICE_FILES = {"npu": "/dev/davinci", "cuda": "/dev/nvidia"}  # + the device's index
VISIBLE_ENV = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}


# ------------------------------------------------------------ without torch

def device_files(kind: str) -> list[str]:
    """The kind's device files mounted into this container (none for cpu)."""
    prefix = DEVICE_FILES.get(kind)
    if prefix is None:
        return []
    return sorted(p for p in glob.glob(prefix + "[0-9]*") if re.fullmatch(re.escape(prefix) + r"\d+", p))


def visible_devices(kind: str) -> int:
    """Devices of this kind the container sees: its device files, limited by the kind's
    visibility variable; the CPU count for cpu."""
    if kind not in DEVICE_FILES:
        return os.cpu_count() or 1
    count = len(device_files(kind))
    raw = os.environ.get(VISIBLE_ENV[kind])
    return count if raw is None else min(count, len([x for x in raw.split(",") if x.strip()]))


def kind_from_files() -> str:
    """TORCHDAG_DEVICE (the rendered Workflow's), else the first kind whose device files are here."""
    return os.environ.get("TORCHDAG_DEVICE") or next(k for k in AUTO_ORDER if k == "cpu" or device_files(k))


# --------------------------------------------------------------- with torch

def device_module(kind: str):
    """torch.<kind>, the kind's one device handle; None for cpu. A kind torch does not know is
    registered by its package, torch_<kind> (torch_npu: torch.npu): its import is not guarded
    here (see usable()). Raises LookupError when that package registers nothing."""
    if kind == "cpu":
        return None
    import torch

    module = getattr(torch, kind, None)
    if module is None:
        importlib.import_module(f"torch_{kind}")
        module = getattr(torch, kind, None)
    if module is None:
        raise LookupError(f"torch.{kind} is not registered")
    return module


def usable(kind: str) -> tuple[bool, str]:
    """Whether this node has a device of this kind, and what was found (or why not). Off Ascend,
    torch_npu raises ImportError (missing libhccl.so) or, through torch's autoload hook,
    RuntimeError: neither may take the caller down when the node simply has no NPU."""
    if kind == "cpu":
        return True, "cpu"
    try:
        module = device_module(kind)
    except KeyboardInterrupt:
        raise
    except LookupError as exc:
        return False, str(exc)
    except BaseException as exc:  # noqa: BLE001 - any failure means "no such device"
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    try:
        count = int(module.device_count()) if module.is_available() else 0
    except Exception as exc:  # noqa: BLE001 - a broken driver is "no device"
        return False, f"torch.{kind} query failed: {type(exc).__name__}: {exc}"
    if count < 1:
        return False, f"torch.{kind} reports no {kind.upper()} device"
    return True, f"{count} {kind.upper()} device(s)"


def detect() -> tuple[str, str]:
    """The first usable kind in AUTO_ORDER, and why the first one was skipped ("" when it was not)."""
    note = ""
    for index, kind in enumerate(AUTO_ORDER[:-1]):  # the last, cpu, is always usable
        ok, why = usable(kind)
        if ok:
            return kind, note
        note = note or f"{kind} not used ({why}); falling back to {'/'.join(AUTO_ORDER[index + 1:])}"
    return AUTO_ORDER[-1], note


def make_current(kind: str, local_rank: int):
    """The torch.device `kind`:`local_rank`, made the current device (cpu: the CPU)."""
    import torch

    module = device_module(kind)
    if module is None:
        return torch.device("cpu")
    module.set_device(local_rank)
    return torch.device(kind, local_rank)
