"""The cluster's processes: ports, pid files, starting and stopping.

A component is running when its pid file names a live process whose executable is the
component's binary (a pid file left by a crash, or whose pid was reused by another program,
is stale and removed). Each process leads a session of its own, so stopping it never touches
the shell that started it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from torchdag.errors import TorchdagError

from .layout import Layout


class ClusterError(TorchdagError):
    """Something the user can act on (torchdag/errors.py prints it; exit status 1)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ports(layout: Layout, names: tuple[str, ...]) -> dict[str, int]:
    """The cluster's ports, picked once and kept in state.json until `down`: a component
    restarted alone comes back where its clients (and the kubeconfig) expect it."""
    state = layout.read_state()
    chosen = state.get("ports", {})
    missing = [name for name in names if name not in chosen]
    if missing:
        taken = set(chosen.values())
        for name in missing:
            port = free_port()
            while port in taken:
                port = free_port()
            chosen[name] = port
            taken.add(port)
        state["ports"] = chosen
        layout.write_state(state)
    return chosen


def _executable(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return None


def running(layout: Layout, component: str, exe: Path) -> int | None:
    """The component's pid when its process is alive, else None (a stale pid file is removed)."""
    pid_file = layout.pid_file(component)
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        pid_file.unlink(missing_ok=True)
        return None
    if _executable(pid) == str(exe.resolve()) and not _zombie(pid):
        return pid
    pid_file.unlink(missing_ok=True)
    return None


def _zombie(pid: int) -> bool:
    try:
        # /proc/PID/stat: "pid (comm) state ...": comm may hold spaces, the state follows the last ")".
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def start(layout: Layout, component: str, argv: list[str], env: dict[str, str] | None = None,
          preexec_fn=None) -> int:
    """Start one component in the background, its output appended to logs/<component>.log
    (`preexec_fn`: run in the child before the exec, e.g. to enter a mount namespace)."""
    layout.logs.mkdir(parents=True, exist_ok=True)
    with open(layout.log(component), "ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=layout.root,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
    layout.pid_file(component).write_text(f"{proc.pid}\n")
    return proc.pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def stop(layout: Layout, component: str, exe: Path, grace: float = 10.0) -> str:
    """SIGTERM the component (its whole session), SIGKILL after `grace` seconds: "terminated",
    "killed after {grace}s", or "" when it was not running."""
    pid = running(layout, component, exe)
    if pid is None:
        return ""
    how = "terminated"
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        how = f"killed after {grace:.0f}s"
        _signal_group(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.05)
    layout.pid_file(component).unlink(missing_ok=True)
    return how


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # The process leads its own session (start_new_session), so its group id is its pid.
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
