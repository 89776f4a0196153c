"""Process trees of local "nodes", tracked through /proc so a node can be stopped whole.

torchrun starts every worker in a session of its own, so signalling the agent's
process group misses the workers; and once the agent dies its workers are orphans
(re-parented to init) that keep training. So each node's tree is walked by parent pid
and remembered (pid + start time, against pid reuse), and every process of a node
carries a marker variable in its environment (inherited by all it starts), which finds
orphans the walk never saw. In a pod none of this arises: the container's processes
die together.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

MARKER_ENV = "TORCHDAG_LOCALRUN_TASK"


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, start time, state) of pid, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # comm may hold spaces and parentheses: the fields start after the last ')'.
    fields = raw[raw.rindex(b")") + 2:].split()
    return int(fields[1]), int(fields[19]), fields[0].decode()


def process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, start time, state) for every process we can see."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            info = _stat(int(entry.name))
            if info is not None:
                table[int(entry.name)] = info
    return table


class ProcessTree:
    """One node's processes: the root we started and everything it ever spawned."""

    def __init__(self, root: int, marker: str | None = None):
        self.root = root
        self.marker = f"{MARKER_ENV}={marker}".encode() if marker else None
        self.known: dict[int, int] = {}  # pid -> start time
        info = _stat(root)
        if info is not None:
            self.known[root] = info[1]

    def refresh(self, table: dict[int, tuple[int, int, str]] | None = None, scan_environ: bool = False) -> None:
        """Add the descendants of every live process we know (new children of orphans too)
        and, with scan_environ, every process carrying our marker."""
        table = process_table() if table is None else table
        if scan_environ and self.marker is not None:
            for pid, (_, start, _) in table.items():
                if self.known.get(pid) != start and self._marked(pid):
                    self.known[pid] = start
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        stack = [pid for pid in self.alive(table)]
        while stack:
            pid = stack.pop()
            for child in children.get(pid, []):
                if child not in self.known or self.known[child] != table[child][1]:
                    self.known[child] = table[child][1]
                    stack.append(child)

    def alive(self, table: dict[int, tuple[int, int, str]] | None = None) -> list[int]:
        """Known pids still running (zombies count as gone)."""
        table = process_table() if table is None else table
        return [pid for pid, start in self.known.items()
                if pid in table and table[pid][1] == start and table[pid][2] != "Z"]

    def signal(self, sig: int) -> list[int]:
        """Send sig to every live member (looked up afresh, orphans too); returns them."""
        self.refresh(scan_environ=True)
        hit = []
        for pid in self.alive():
            try:
                os.kill(pid, sig)
                hit.append(pid)
            except ProcessLookupError:
                pass
        if sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
            # A stopped process cannot act on the signal until it is continued.
            for pid in hit:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        return hit

    def _marked(self, pid: int) -> bool:
        try:
            data = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        return self.marker in data.split(b"\0")
