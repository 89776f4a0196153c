"""Atomic checkpoints: model + optimizer + step + RNG state.

A writer (global rank 0, or every node's local rank 0 with node-local
storage) writes ``ckpt-<step>.pt`` through a temp file in the same directory,
fsyncs it, checks it, renames it over the final name and fsyncs the
directory, so a crash at any moment leaves either the previous set of
checkpoints or the new one -- never a torn file under a ``ckpt-*.pt`` name.

A checkpoint is an ordinary ``torch.save`` file (a zip archive). Two checks:

- ``check(path)``, cheap (reads only the zip's central directory at the end
  of the file): a truncated, partial or foreign file fails it. Pruning and
  the start-up scan use it, so a damaged file never takes a
  ``--keep-checkpoints`` slot from a good one.
- ``load(path, step)``, full: verifies the CRC of every entry (``torch.load``
  alone does not: a flipped bit in a tensor loads silently), loads the
  payload and checks the step it records. Resume uses it.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import tempfile
import zipfile

import torch

from trainer.errors import TrainerError

_NAME = re.compile(r"^ckpt-(\d{8,})\.pt$")
_TEMP = re.compile(r"^\.ckpt-\d{8,}\..*\.tmp$")


class Unreadable(TrainerError):
    """A checkpoint file that cannot be used; str() says why."""


def path_for(directory: str, step: int) -> str:
    return os.path.join(directory, f"ckpt-{step:08d}.pt")


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """(step, path) of every ``ckpt-*.pt`` name, newest first, readable or not;
    temp files are ignored."""
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


def check(path: str) -> str | None:
    """None when the file is a complete torch.save archive, else the reason.
    Cheap: reads the zip's central directory (at the end of the file), not the data."""
    try:
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if not any(i.filename == "data.pkl" or i.filename.endswith("/data.pkl") for i in infos):
        return "not a torch.save archive (no data.pkl)"
    for i in infos:
        if i.header_offset + i.compress_size > size:
            return f"entry {i.filename} extends past the end of the file ({size} bytes)"
    return None


@dataclasses.dataclass
class Scan:
    directory: str
    valid: list[tuple[int, str]]  # newest first
    bad: list[tuple[str, str]]  # (path, reason)
    temps_removed: list[str]


def scan(directory: str, remove_temps: bool = False) -> Scan:
    """Classify the checkpoints in directory with the cheap check. With
    remove_temps, delete temp files an interrupted save left behind (only
    safe while nobody writes: the trainer does it at start-up)."""
    removed = []
    if remove_temps:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            names = []
        for name in names:
            if _TEMP.match(name):
                try:
                    os.unlink(os.path.join(directory, name))
                    removed.append(os.path.join(directory, name))
                except FileNotFoundError:
                    pass
    valid, bad = [], []
    for step, path in list_checkpoints(directory):
        reason = check(path)
        if reason is None:
            valid.append((step, path))
        else:
            bad.append((path, reason))
    return Scan(directory, valid, bad, removed)


def load(path: str, step: int | None = None) -> dict:
    """The payload of a checkpoint, fully verified; raises Unreadable."""
    reason = check(path)
    if reason is not None:
        raise Unreadable(reason)
    try:
        with zipfile.ZipFile(path) as z:
            corrupt = z.testzip()
        if corrupt is not None:
            raise Unreadable(f"CRC mismatch in {corrupt}")
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Unreadable:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to load means unusable
        raise Unreadable(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(payload, dict) or "step" not in payload:
        raise Unreadable("not a torchdag checkpoint (no step)")
    if step is not None and payload["step"] != step:
        raise Unreadable(f"it records step {payload['step']}")
    payload["path"] = path
    return payload


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
        reason = check(tmp)
        if reason is not None:  # e.g. a full disk that did not raise
            raise OSError(f"checkpoint {tmp} is unreadable right after writing it: {reason}")
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)
    prune(directory, keep)
    return final


def prune(directory: str, keep: int) -> list[str]:
    """Keep the newest ``keep`` checkpoints that pass the cheap check. A
    damaged file never counts: it is deleted when it is older than the
    oldest one kept (it would have been pruned anyway), and left alone when
    newer (a later save of its step replaces it). Returns the deleted paths."""
    s = scan(directory)
    kept = s.valid[:keep]
    if not kept:
        return []
    oldest_kept = kept[-1][0]
    doomed = [p for _, p in s.valid[keep:]]
    doomed += [p for p, _ in s.bad if step_of(p) < oldest_kept]
    deleted = []
    for path in doomed:
        try:
            os.unlink(path)
            deleted.append(path)
        except FileNotFoundError:
            pass
    return deleted


def step_of(path: str) -> int:
    """The step in a ``ckpt-<step>.pt`` name."""
    return int(_NAME.match(os.path.basename(path)).group(1))


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
    """The newest checkpoint in one directory that loads, or None. Unreadable
    files are skipped with a warning (the trainer's resume uses scan/load
    itself, across nodes, and refuses to start over when all are bad)."""
    for step, path in list_checkpoints(directory):
        try:
            return load(path, step)
        except Unreadable as exc:
            log(f"warning: skipping unreadable checkpoint {path}: {exc}")
    return None
