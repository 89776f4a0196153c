"""A container's CPU limit, applied as the kubelet applies it: through the CPU cgroup's CFS
quota (cgroup v1, as mounted here).

The kubelet gives each container with `resources.limits.cpu` a cgroup whose
cpu.cfs_quota_us is the limit's millicores x cpu.cfs_period_us / 1000 (period 100 ms, the
kubelet's cpuCFSQuotaPeriod; at least 1 ms, as its milliCPUToQuota), so the container's
processes together run at most that long each period: a container limited to 500m gets
half a core however many cores are idle. Here the container's first process joins its
cgroup before it runs the command (`sh -c 'echo $$ > cgroup.procs; exec ...'`), so
everything it starts is in it; the cgroup is removed when the pod's processes are gone.
Without root, or without a cgroup v1 cpu hierarchy, the limit is not applied (said so).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from kubernetes.utils import parse_quantity

CPU_ROOTS = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpu,cpuacct"))
PARENT = "torchdag-kubelet"
PERIOD_US = 100_000
MIN_QUOTA_US = 1_000
JOIN = 'echo $$ > "$0" || exit 126; exec "$@"'


def cpu_root() -> Path | None:
    return next((root for root in CPU_ROOTS if (root / "cpu.cfs_quota_us").exists()), None)


def quota_us(limit: str, period_us: int = PERIOD_US) -> int:
    """The kubelet's milliCPUToQuota: millicores (rounded up) x period / 1000, at least 1 ms."""
    millicores = math.ceil(parse_quantity(str(limit)) * 1000)
    return max(millicores * period_us // 1000, MIN_QUOTA_US)


def cpu_limit_of(pod: dict, container: str) -> str | None:
    spec = pod.get("spec") or {}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if c.get("name") == container:
            return (((c.get("resources") or {}).get("limits") or {}).get("cpu")) or None
    return None


class CpuCgroup:
    """One container's cgroup under <cpu root>/torchdag-kubelet/pod<uid>/<container>."""

    def __init__(self, path: Path, quota: int):
        self.path, self.quota = path, quota

    @classmethod
    def for_container(cls, uid: str, container: str, limit: str, notes: list[str]) -> CpuCgroup | None:
        root = cpu_root()
        if root is None:
            notes.append(f"cpu limit {limit}: not applied (no cgroup v1 cpu hierarchy on this machine)")
            return None
        if os.geteuid() != 0:
            notes.append(f"cpu limit {limit}: not applied (not root: no cgroup of its own)")
            return None
        path = root / PARENT / f"pod{uid}" / container
        quota = quota_us(limit)
        try:
            path.mkdir(parents=True, exist_ok=True)
            (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError as err:
            notes.append(f"cpu limit {limit}: not applied ({path}: {err.strerror})")
            return None
        notes.append(f"cpu limit {limit}: CFS quota {quota} us every {PERIOD_US} us (cgroup {path})")
        return cls(path, quota)

    def wrap(self, argv: list[str]) -> list[str]:
        """argv started inside this cgroup (and all it starts)."""
        return ["/bin/sh", "-c", JOIN, str(self.path / "cgroup.procs"), *argv]

    def remove(self, wait_s: float = 5.0) -> None:
        """The cgroup, its pod's folder and ours, each when empty (a process that lingers
        keeps it: tried for wait_s)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.2)
        for folder in (self.path.parent, self.path.parent.parent):
            try:
                folder.rmdir()
            except OSError:
                return
