"""A stand-in accelerator for the tests: `import torch_standin` registers the device `standin`
the way `import torch_npu` registers `npu`.

Both are PyTorch PrivateUse1 backends (open registration, renamed with
torch.utils.rename_privateuse1_backend) with a device module, torch.standin as torch.npu. The
stand-in computes on host memory with the CPU's kernels (standin.cpp), so a model
trained on it gives the CPU's numbers; and gloo refuses its tensors as it refuses NPU tensors,
from the same c10d code: "No backend type associated with device type standin". A script
selects it as it selects an NPU: TORCHDAG_DEVICE=standin (torchdag_ddp imports torch_<kind>
for a kind torch does not know, as torch_npu for npu).

The library is compiled once per torch version and source (c++, torch's own headers: about
15 s of CPU) into TORCH_STANDIN_CACHE (default ~/.cache/torchdag-standin); TORCH_STANDIN_TRACE=1
prints each operator that runs on the CPU's kernels, TORCH_STANDIN_DEVICES (default 4) is the
device count.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import types
from pathlib import Path

import torch

# The device's name; TORCH_STANDIN_NAME=npu makes it answer to torch_npu's (for a one-off
# run of a helper that knows only npu, cuda and cpu).
NAME = os.environ.get("TORCH_STANDIN_NAME") or "standin"
SOURCE = Path(__file__).with_name("standin.cpp")


def cache_dir() -> Path:
    root = os.environ.get("TORCH_STANDIN_CACHE") or Path.home() / ".cache" / "torchdag-standin"
    return Path(root)


def library_path() -> Path:
    key = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode() + sys.version.encode()).hexdigest()[:16]
    return cache_dir() / f"torch-{torch.__version__.split('+')[0]}-{key}" / "libtorch_standin.so"


def build() -> Path:
    """The compiled library (built here under a lock when missing: ranks import it at once)."""
    target = library_path()
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        from torch.utils import cpp_extension

        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        torch_lib = Path(torch.__file__).parent / "lib"
        partial = target.with_suffix(f".tmp{os.getpid()}")
        command = [os.environ.get("CXX", "c++"), "-shared", "-fPIC", "-O1", "-std=c++17",
                   f"-D_GLIBCXX_USE_CXX11_ABI={abi}", str(SOURCE), "-o", str(partial),
                   *(f"-I{p}" for p in cpp_extension.include_paths()),
                   f"-L{torch_lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_lib}"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"torch_standin: compiling {SOURCE.name} failed:\n{done.stderr[-4000:]}")
        os.replace(partial, target)
    return target


def _device_module() -> types.ModuleType:
    """torch.standin: the calls a device module answers (torch.npu's, torch.cuda's)."""
    ops = torch.ops.standin
    module = types.ModuleType(f"torch.{NAME}")
    module.is_available = lambda: True
    module.device_count = lambda: int(ops.device_count())
    module.current_device = lambda: int(ops.current_device())

    def set_device(device) -> None:
        index = torch.device(device).index if not isinstance(device, int) else device
        ops.set_device(0 if index is None else index)

    module.set_device = set_device

    class device:
        def __init__(self, device):
            self.index = torch.device(NAME, device).index if isinstance(device, int) else torch.device(device).index

        def __enter__(self):
            self.previous = module.current_device()
            set_device(self.index if self.index is not None else self.previous)

        def __exit__(self, *exc):
            set_device(self.previous)

    module.device = device
    module.synchronize = lambda device=None: None
    module.is_initialized = lambda: True
    module._is_in_bad_fork = lambda: False
    module.manual_seed_all = lambda seed: None
    return module


def _register() -> None:
    if torch._C._get_privateuse1_backend_name() == NAME:
        return
    torch.ops.load_library(str(build()))
    torch.utils.rename_privateuse1_backend(NAME)
    torch._register_device_module(NAME, _device_module())
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


_register()
