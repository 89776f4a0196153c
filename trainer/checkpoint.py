"""Atomic checkpoints: model + optimizer + step + RNG state.

Rank 0 writes ``ckpt-<step>.pt`` through a temp file in the same directory,
fsyncs it, renames it over the final name and fsyncs the directory, so a
crash at any moment leaves either the previous set of checkpoints or the new
one -- never a torn file under a ``ckpt-*.pt`` name.
"""

from __future__ import annotations

import os
import random
import re
import tempfile

import torch

_NAME = re.compile(r"^ckpt-(\d{8,})\.pt$")


def path_for(directory: str, step: int) -> str:
    return os.path.join(directory, f"ckpt-{step:08d}.pt")


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """(step, path) of complete checkpoints, newest first; temp files are ignored."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        m = _NAME.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(directory, name)))
    return sorted(found, reverse=True)


def rng_state(device: torch.device) -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["device"] = torch.cuda.get_rng_state(device)
    elif device.type == "npu":
        state["device"] = torch.npu.get_rng_state(device)  # type: ignore[attr-defined]
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    random.setstate(_as_python_random_state(state["python"]))
    torch.set_rng_state(state["torch"])
    if "device" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["device"], device)
    elif "device" in state and device.type == "npu":
        torch.npu.set_rng_state(state["device"], device)  # type: ignore[attr-defined]


def _as_python_random_state(value):
    # torch.load(weights_only=True) may hand tuples back as lists.
    version, internal, gauss = value
    return (version, tuple(internal), gauss)


def save(directory: str, step: int, payload: dict, keep: int) -> str:
    """Write payload atomically as the checkpoint for ``step``; prune old ones."""
    os.makedirs(directory, exist_ok=True)
    final = path_for(directory, step)
    fd, tmp = tempfile.mkstemp(prefix=f".ckpt-{step:08d}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)
    for _, old in list_checkpoints(directory)[keep:]:
        try:
            os.unlink(old)
        except FileNotFoundError:
            pass
    return final


def _fsync_dir(directory: str) -> None:
    # Makes the rename itself durable; not every filesystem allows it.
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def load_newest(directory: str, log=print) -> dict | None:
    """The newest checkpoint that loads, or None. A file that fails to load
    (e.g. written by a foreign tool under our name) is skipped with a warning."""
    for step, path in list_checkpoints(directory):
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - fall back to an older checkpoint
            log(f"warning: skipping unreadable checkpoint {path}: {type(exc).__name__}: {exc}")
            continue
        if payload.get("step") != step:
            log(f"warning: skipping {path}: it records step {payload.get('step')}")
            continue
        payload["path"] = path
        return payload
    return None
