"""What changes so a container's processes run on this machine, shared by `make smoke`
(testbed.localrun, from the Plan) and the process kubelet (from a pod), so both start the
same processes.

Every change is returned as a note and printed: node addresses -> 127.0.0.1, NICs -> lo,
image paths -> this checkout (`--map SRC=DST`, then `/opt/torchdag=<checkout>`), the
rendezvous port (`--port`) and, with `--cpu`, GPU/NPU nodes onto CPU. A path under one of the
container's volume mounts is never mapped: the volume hides the image's files there, as in a
real container. `torchdag_image_maps()` is what torchdag's own image holds (the Dockerfile's
COPY lines), for a kubelet that maps that image and nothing else of the checkout.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

CHECKOUT = Path(__file__).resolve().parent.parent.parent
DEFAULT_MAPS = [("/opt/torchdag", str(CHECKOUT))]
DOCKERFILE = CHECKOUT / "Dockerfile"

NIC_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
ADDRESS_FLAGS = ("--master_addr", "--master-addr")
ENDPOINT_FLAGS = ("--rdzv-endpoint", "--rdzv_endpoint")  # HOST:PORT of a dynamic (c10d) rendezvous
PORT_FLAGS = ("--master_port", "--master-port")
DEVICE_FILES = {"cuda": ("/dev", re.compile(r"^nvidia\d+$"), "NVIDIA GPU"),
                "npu": ("/dev", re.compile(r"^davinci\d+$"), "Ascend NPU")}
# What a pod would not inherit from this shell: a stray GLOO_SOCKET_IFNAME or RANK here
# would silently change what the container's env means.
_NOT_INHERITED = re.compile(
    r"^(TORCHDAG_|GLOO_|NCCL_|HCCL_|TP_SOCKET_|TORCHELASTIC_|PET_|MASTER_ADDR$|MASTER_PORT$|RANK$|"
    r"WORLD_SIZE$|LOCAL_RANK$|LOCAL_WORLD_SIZE$|GROUP_RANK$|ROLE_RANK$|NODE_RANK$|ASCEND_|CUDA_VISIBLE_DEVICES$|TORCH_DEVICE_BACKEND_AUTOLOAD$)"
)


@dataclass
class Options:
    """How a container is made to run here (localize)."""

    maps: list[tuple[str, str]] = field(default_factory=list)  # user --map, before DEFAULT_MAPS
    address: str | None = "127.0.0.1"  # None: keep the rendered addresses (netns tests)
    nic: str | None = "lo"  # None: keep the rendered NIC names
    port: int | None = None  # rendezvous port override
    cpu: bool = False  # run GPU/NPU nodes on CPU instead of refusing them
    checkout_map: bool = True  # DEFAULT_MAPS last; False: a pod has only what its image and Workflow give it


def process_env(base: dict[str, str], bin_dir: str, env: list[tuple[str, str]]) -> dict[str, str]:
    """A container's process environment here: this shell's, less what a pod would not
    inherit, bin_dir (the venv: torchrun, python) first on PATH, then the container's env."""
    out = {k: v for k, v in base.items() if not _NOT_INHERITED.match(k)}
    out["PATH"] = os.pathsep.join([bin_dir] + [p for p in base.get("PATH", "").split(os.pathsep) if p and p != bin_dir])
    out.update(env)
    return out


def torchdag_image_maps(dockerfile: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(path in torchdag's training image, the checkout's file or folder it was copied from):
    the Dockerfile's `COPY SRC DST` lines, the folders first, so an image path maps only where
    the image really has it."""
    maps = []
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "COPY" and not words[1].startswith("--"):
            source, target = words[1], words[2]
            if source.endswith("/") or (CHECKOUT / source).is_dir():
                maps.append((target.rstrip("/"), str(CHECKOUT / source.rstrip("/"))))
            else:
                maps.append((target.rstrip("/") + ("/" + Path(source).name if target.endswith("/") else ""),
                             str(CHECKOUT / source)))
    return sorted(maps, key=lambda pair: -len(pair[0]))


def holds_files(path: str) -> bool:
    """A file, or a folder with a file somewhere below: empty folders are mount points the
    process kubelet left (/opt/torchdag/torchdag/agents, for a Workflow's helpers), not the image's."""
    return os.path.isfile(path) or os.path.isdir(path) and any(files for _, _, files in os.walk(path))


def under(path: str, folders: tuple[str, ...]) -> bool:
    """Whether a path is one of the folders or below one."""
    return any(path == folder.rstrip("/") or path.startswith(folder.rstrip("/") + "/") for folder in folders)


def map_path(word: str, maps: list[tuple[str, str]], mounted: tuple[str, ...] = ()) -> str:
    """An absolute path that does not exist here, through the first prefix map that fits;
    never one under a volume mount of the container (the volume, not the image, has it)."""
    if not word.startswith("/") or holds_files(word) or under(word, mounted):
        return word
    for src, dst in maps:
        src = src.rstrip("/")
        if src and (word == src or word.startswith(src + "/")):
            return str(Path(dst).resolve()) + word[len(src):]
    return word


def map_word(word: str, maps: list[tuple[str, str]], mounted: tuple[str, ...] = ()) -> str:
    """A path word, or the value of `--flag=/path`."""
    if word.startswith("-") and "=" in word:
        flag, _, value = word.partition("=")
        return f"{flag}={map_path(value, maps, mounted)}"
    return map_path(word, maps, mounted)


def replace_flag(words: list[str], flags: tuple[str, ...], new: Callable[[str], str | None]) -> list[tuple[str, str]]:
    """Rewrite `--flag=V` and `--flag V` in place; returns the (old, new) values changed."""
    changed = []
    for i, word in enumerate(words):
        for flag in flags:
            if word.startswith(flag + "="):
                old = word[len(flag) + 1:]
                value = new(old)
                if value is not None and value != old:
                    words[i] = f"{flag}={value}"
                    changed.append((old, value))
            elif word == flag and i + 1 < len(words):
                old = words[i + 1]
                value = new(old)
                if value is not None and value != old:
                    words[i + 1] = value
                    changed.append((old, value))
    return changed


def map_nic_list(value: str, nic: str) -> str:
    """`=eth0` -> `=lo`, `eth0,eth1` -> `lo`; NCCL's `^exclude` items are kept."""
    out: list[str] = []
    for item in value.split(","):
        mapped = item if item.startswith("^") or not item else ("=" + nic if item.startswith("=") else nic)
        if mapped not in out:
            out.append(mapped)
    return ",".join(out)


def device_of(env: dict[str, str], container: dict) -> str:
    """What a pod's container computes on (the process kubelet has only the pod to go by)."""
    if env.get("TORCHDAG_DEVICE") in ("cpu", "cuda", "npu"):
        return env["TORCHDAG_DEVICE"]
    # A Workflow torchdag did not write: the resource limit names the device (catalogue).
    from torchdag.catalog import accelerator, accelerator_kinds

    limits = ((container.get("resources") or {}).get("limits") or {})
    for kind in accelerator_kinds():
        entry = accelerator(kind)
        if entry["resource"] and entry["resource"] in limits:
            return entry["device"]
    return "npu" if any(k.startswith("huawei.com/") for k in limits) else "cpu"


def local_devices(kind: str) -> int:
    folder, pattern, _ = DEVICE_FILES[kind]
    try:
        return sum(1 for name in os.listdir(folder) if pattern.match(name))
    except OSError:
        return 0


def onto_cpu(command: list[str], env_map: dict[str, str], device: str, notes: list[str]) -> list[str]:
    """--cpu: a GPU/NPU node trains on CPU (gloo); the Ascend set_env wrapper goes when
    its script does not exist here. Changes env_map in place; returns the command."""
    # render.py's wrapper: /bin/bash -c '<source $1, exec the rest>' torchdag-set-env SCRIPT launcher...
    wrapped = command[:2] == ["/bin/bash", "-c"] and len(command) > 4 and command[3] == "torchdag-set-env"
    if wrapped and not os.path.exists(command[4]):
        notes.append(f"dropped the set_env wrapper: {command[4]} does not exist here")
        command = command[5:]
    for i, word in enumerate(command):
        if word == f"--device={device}":
            command[i] = "--device=cpu"
            notes.append(f"preflight --device={device} -> --device=cpu")
    env_map["TORCHDAG_DEVICE"] = "cpu"
    notes.append(f"TORCHDAG_DEVICE {device} -> cpu (--cpu)")
    if env_map.get("TORCH_DEVICE_BACKEND_AUTOLOAD") != "0":
        # An NPU node counts on CANN being sourced; here there is none, and a torch_npu
        # wheel would break `import torch` in torchrun itself.
        env_map["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        notes.append("TORCH_DEVICE_BACKEND_AUTOLOAD=0 (--cpu: no CANN here; a torch_npu wheel would break torchrun)")
    if env_map.get("TORCHDAG_BACKEND") in ("nccl", "hccl"):
        notes.append(f"TORCHDAG_BACKEND {env_map['TORCHDAG_BACKEND']} -> gloo (--cpu)")
        env_map["TORCHDAG_BACKEND"] = "gloo"
    return command


def onto_this_host(launcher: list[str], env_map: dict[str, str], notes: list[str], *,
                   address: str | None, nic: str | None, port: int | None) -> None:
    """Addresses, NICs and the port of one node, in place (None: keep as rendered)."""
    if address is not None:
        for old, new in replace_flag(launcher, ADDRESS_FLAGS, lambda _: address):
            notes.append(f"master address {old} -> {new}")
        for old, new in replace_flag(launcher, ENDPOINT_FLAGS, lambda v: f"{address}:{port or v.rpartition(':')[2]}"):
            notes.append(f"rendezvous endpoint {old} -> {new}")
        # PET_LOCAL_ADDR: the address a c10d agent gives the others (status.podIP on a cluster)
        for key in ("MASTER_ADDR", "HCCL_IF_IP", "PET_LOCAL_ADDR"):
            if key in env_map and env_map[key] != address:
                notes.append(f"{key} {env_map[key]} -> {address}")
                env_map[key] = address
    if nic is not None:
        for key in NIC_ENV:
            if key in env_map:
                mapped = map_nic_list(env_map[key], nic)
                if mapped != env_map[key]:
                    notes.append(f"{key} {env_map[key]} -> {mapped}")
                    env_map[key] = mapped
        for old, new in replace_flag(launcher, ("--nic",), lambda v: None if v == "auto" else nic):
            notes.append(f"preflight --nic={old} -> --nic={new}")
    if port is not None:
        for old, new in replace_flag(launcher, PORT_FLAGS, lambda _: str(port)):
            notes.append(f"port {old} -> {new}")
        if "MASTER_PORT" in env_map:
            env_map["MASTER_PORT"] = str(port)


def localize(command: list[str], args: list[str], env_list: list[tuple[str, str]], working_dir: str | None,
             device: str, options: Options, notes: list[str],
             mounted: tuple[str, ...] = ()) -> tuple[list[str], list[tuple[str, str]], str, str]:
    """One container's command, args and env, already through Kubernetes' `$(VAR)`
    expansion, made to run on this machine: `--cpu`'s stand-ins for a `device` (cpu, cuda,
    npu) node, addresses, NICs and port (onto_this_host), image paths and the working
    directory; `mounted`: the container's volume mount paths, whose files no map replaces.
    Returns (argv, env, cwd, device); notes grow."""
    env_map = dict(env_list)
    if device != "cpu" and options.cpu:
        command = onto_cpu(list(command), env_map, device, notes)
        device = "cpu"
    launcher = list(command) + list(args)
    onto_this_host(launcher, env_map, notes, address=options.address, nic=options.nic, port=options.port)
    maps = list(options.maps) + (DEFAULT_MAPS if options.checkout_map else [])
    mapped = [map_word(word, maps, mounted) for word in launcher]
    for old, new in zip(launcher, mapped):
        if old != new:
            notes.append(f"path {old} -> {new}")
    cwd = os.getcwd()
    if working_dir:
        local_dir = map_path(working_dir, maps)
        if os.path.isdir(local_dir):
            cwd = local_dir
        else:
            notes.append(f"workingDir {working_dir} does not exist here: runs in {cwd}")
    names = dict(env_list)
    env_out = [(k, env_map[k]) for k in names] + [(k, v) for k, v in env_map.items() if k not in names]
    return mapped, env_out, cwd, device


def parse_map(text: str) -> tuple[str, str]:
    """`--map SRC=DST` (the local runner's and the process kubelet's option): the pair, or argparse's error."""
    src, sep, dst = text.partition("=")
    if not sep or not src.startswith("/") or not dst:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SRC=DST with an absolute SRC, e.g. /opt/torchdag=.")
    return src, dst
