"""A container's processes on this machine: what `make smoke` (testbed.localrun) and the
process kubelet (testbed.kubelet) share, so both start the same processes.

- mapping.py: the local mappings (addresses, NICs, image paths, `--cpu`'s stand-ins) and
  the process environment;
- expand.py: Kubernetes' `$(VAR)` expansion;
- procs.py: a node's or pod's whole process tree, found through /proc and stopped whole.
"""

from .expand import kube_command, kube_container_env, kube_expand
from .mapping import (
    CHECKOUT,
    DEFAULT_MAPS,
    DEVICE_FILES,
    Options,
    device_of,
    local_devices,
    localize,
    parse_map,
    process_env,
    torchdag_image_maps,
)
from .procs import MARKER_ENV, ProcessTree, process_table

__all__ = [
    "CHECKOUT", "DEFAULT_MAPS", "DEVICE_FILES", "MARKER_ENV", "Options", "ProcessTree", "device_of", "kube_command",
    "kube_container_env", "kube_expand", "local_devices", "localize", "parse_map", "process_env", "process_table",
    "torchdag_image_maps",
]
