"""One containerd: its configuration, start and stop, and `ctr` against it.

Every containerd here has a root, a state folder and a socket of its own, so several run on
one machine (one per node, and one that imports images into the image store). Debian's
containerd 1.6 and runc; the CRI settings this machine needs are set here, each with its
reason.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

CONTAINERD = Path("/usr/bin/containerd")
CTR = Path("/usr/bin/ctr")
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
NAMESPACE = "k8s.io"  # the CRI's containerd namespace: images must be there for the kubelet to see them
START_TIMEOUT_S = 60.0
# Plugins a node never uses: other snapshotters (none has its kernel support or tools here),
# the "opt" plugin (it installs into /opt/containerd) and tracing.
DISABLED = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
            "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
            "io.containerd.snapshotter.v1.native", "io.containerd.tracing.processor.v1.otlp"]


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_toml(config: dict) -> str:
    """containerd's configuration (TOML) from nested dicts: scalars first, then tables."""
    lines: list[str] = []

    def table(prefix: str, body: dict) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in body.items() if isinstance(v, dict)}
        if prefix and scalars:
            lines.append(f"\n[{prefix}]")
        for key, value in scalars.items():
            lines.append(f"{key} = {_toml(value)}")
        for key, value in tables.items():
            name = f'"{key}"' if "." in key else key
            table(f"{prefix}.{name}" if prefix else name, value)

    table("", config)
    return "\n".join(lines).lstrip("\n") + "\n"


def config(root: Path, state: Path, socket: Path, cri: dict | None = None) -> dict:
    """The configuration of a containerd with its own root, state and socket. `cri`: the CRI
    plugin's settings (a node's); None leaves the CRI plugin out (the image store's importer)."""
    body: dict = {
        "version": 2,
        "root": str(root),
        "state": str(state),
        "oom_score": 0,
        "disabled_plugins": [*DISABLED, *([] if cri else ["io.containerd.grpc.v1.cri"])],
        "grpc": {"address": str(socket)},
        # The debug and metrics servers stay off: nothing listens beyond the socket.
        "debug": {"address": "", "level": "info"},
        "metrics": {"address": ""},
        "plugins": {
            "io.containerd.snapshotter.v1.overlayfs": {
                "root_path": str(root / "io.containerd.snapshotter.v1.overlayfs")},
            # The image store keeps unpacked snapshots, not layer blobs (testbed/images/store.py):
            # "shared" lets a node's metadata take a blob its content store already holds.
            "io.containerd.metadata.v1.bolt": {"content_sharing_policy": "shared"},
        },
    }
    if cri:
        body["plugins"]["io.containerd.grpc.v1.cri"] = cri
    return body


def cri_settings(*, sandbox_image: str, cni_conf_dir: Path, runc_root: Path) -> dict:
    """The CRI plugin of a node's containerd."""
    return {
        "sandbox_image": sandbox_image,
        # This machine grants every capability but CAP_SYS_RESOURCE, so lowering a process's
        # oom_score_adj is denied: the kubelet asks -998 for the pod sandbox, and runc then
        # fails ("can't get final child's PID from pipe: EOF"). With this set containerd never
        # asks for less than its own score.
        "restrict_oom_score_adj": True,
        # No AppArmor or SELinux on this kernel; nothing to pull from (images are imported).
        "disable_apparmor": True,
        "enable_selinux": False,
        # Exec, attach and port-forward streams: on loopback only, a port of the kernel's choosing
        # (the kubelet proxies the API server's requests to it).
        "stream_server_address": "127.0.0.1",
        "stream_server_port": "0",
        "disable_tcp_service": True,
        # The devices a plugin hands out keep their owner and mode (HwHiAiUser, 0660), as on a node.
        "device_ownership_from_security_context": False,
        "containerd": {
            "snapshotter": "overlayfs",
            "default_runtime_name": "runc",
            "runtimes": {"runc": {
                "runtime_type": "io.containerd.runc.v2",
                # cgroupfs, as the kubelet's cgroupDriver: no systemd runs here. runc's own state
                # under the node's folder, so nodes never share it.
                "options": {"SystemdCgroup": False, "BinaryName": shutil.which("runc") or "runc",
                            "Root": str(runc_root)},
            }},
        },
        "cni": {"bin_dir": str(CNI_BIN), "conf_dir": str(cni_conf_dir), "max_conf_num": 1},
    }


class Containerd:
    """A containerd process of the test bed: configuration written beside its root."""

    def __init__(self, home: Path, socket: Path, cri: dict | None = None, root: Path | None = None):
        self.home = home
        self.root = root or home / "root"
        self.state = home / "state"
        self.socket = socket
        self.config_path = home / "containerd.toml"
        self.cri = cri
        self.proc: subprocess.Popen | None = None

    def write_config(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(render_toml(config(self.root, self.state, self.socket, self.cri)))

    def argv(self) -> list[str]:
        return [str(CONTAINERD), "--config", str(self.config_path)]

    def ctr(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        done = subprocess.run([str(CTR), "--address", str(self.socket), "--namespace", NAMESPACE, *args],
                              capture_output=True, text=True, timeout=timeout)
        if check and done.returncode:
            raise RuntimeError(f"ctr {' '.join(args[:3])}: {done.stderr.strip() or done.stdout.strip()}")
        return done

    def serving(self) -> bool:
        return self.socket.exists() and self.ctr("version", check=False, timeout=10).returncode == 0

    def wait_serving(self, alive, log: Path | None = None, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not self.serving():
            if not alive():
                tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
                raise RuntimeError(f"containerd ({self.config_path}) exited:\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"containerd ({self.config_path}) not serving after {timeout:.0f}s")
            time.sleep(0.2)

    # -- a short-lived containerd of this process (the image store's importer) -------------
    def __enter__(self) -> Containerd:
        self.write_config()
        log = self.home / "containerd.log"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.wait_serving(lambda: self.proc.poll() is None, log)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.state, ignore_errors=True)
        self.socket.unlink(missing_ok=True)
