"""Real nodes of the local cluster: for each, a kubelet (built from the control plane's own
k8s.io/kubernetes module), a containerd of its own (Debian's 1.6, runc) and, for Ascend
nodes, the test bed's Ascend device plugin (tools/ascend-device-plugin). Several run on this
machine: each has its own folder (`/var/lib/torchdag-nodes/<slot>.<k>`: containerd's root,
state and socket, the kubelet's root, CNI state, device files), its own bridge and address
(network.py), its own cgroup root and its own kubelet ports, and a mount namespace of its own
(`node-<name>`, a process that holds it) in which the kubelet's fixed paths are the node's:
/var/lib/kubelet (the kubelet opens its device-plugin socket at
/var/lib/kubelet/device-plugins/kubelet.sock whatever its --root-dir), /var/log/pods,
/var/log/containers and /run/containerd. Its containerd, kubelet and device plugin run in
it; the mounts they make (containers' root filesystems, pods' volumes, network namespaces)
never reach the machine's, and go when the node stops.

The cluster around them gets two services the nodes need (services()): the kubernetes
Service's ClusterIP (forward.py) and CoreDNS on the cluster DNS address.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from torchdag import REPO_ROOT

from ..cluster import procs
from ..cluster.layout import Layout, binary
from ..images.store import Store
from . import configs, network
from .containerd import Containerd, cri_settings

NODES_HOME = Path(os.environ.get("TORCHDAG_NODES_HOME", "/var/lib/torchdag-nodes"))
CGROUP_V1 = Path("/sys/fs/cgroup")
CGROUP_PARENT = "torchdag"
READY_TIMEOUT_S = 180.0
KUBELET = "kubelet"
PLUGIN = "ascend-device-plugin"
COREDNS = "coredns"
SLEEP = Path("/usr/bin/sleep")
# The node's own copy of each of the machine's paths, in its mount namespace: node folder -> path.
NODE_PATHS = {"kubelet": "/var/lib/kubelet", "log-pods": "/var/log/pods", "log-containers": "/var/log/containers",
              "run-containerd": "/run/containerd"}


class NodeError(RuntimeError):
    pass


@dataclass
class NodeSpec:
    """What a node is: its name, labels, Ascend devices (resource name -> count) and, if it
    should have them, the address and NIC a values file gives it (taken where this machine
    allows: network.adoptable; else the cluster's own)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)
    address: str = ""
    nic: str = ""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    address: str  # the Node's InternalIP, on its bridge
    nic: str  # the bridge: hostNetwork pods' NIC on this node
    pod_subnet: str


def specs_from_values(values_path: str) -> list[NodeSpec]:
    """A real node for each node of a values file (torchdag's own loader: a bad file is refused
    as `make check` refuses it): its name, the values' nodeSelector labels, its Ascend devices
    through the device plugin, its address and NIC if this machine can give them."""
    from torchdag import pipeline
    from torchdag.catalog import resource_name
    from torchdag.plan import make_plan

    values = pipeline.validate(pipeline.load(values_path))
    specs = []
    for node in make_plan(values).nodes:
        resource = resource_name(node.accelerator, values)
        devices = {resource: node.devices} if resource and resource.startswith("huawei.com/") else {}
        labels = {**{k: str(v) for k, v in values["nodeSelector"].items()}, "torchdag.io/accelerator": node.accelerator}
        specs.append(NodeSpec(node.name, labels, devices, node.address, node.nic))
    return specs


def slot_of(layout: Layout) -> network.Slot:
    """The cluster's network slot, claimed on first use (kept in state.json)."""
    return network.claim(layout.root, layout.read_state(), layout.write_state)


class RealNodes:
    def __init__(self, layout: Layout, say=print):
        self.layout = layout
        self.say = say

    # -- names and places ---------------------------------------------------------------------
    @property
    def slot(self) -> network.Slot:
        return slot_of(self.layout)

    def home(self, k: int) -> Path:
        return NODES_HOME / f"{self.slot.index}.{k}"

    def nodes(self) -> dict[str, dict]:
        return self.layout.read_state().get("nodes", {})

    def info(self, name: str) -> NodeInfo:
        node = self.nodes()[name]
        return NodeInfo(name, node["address"], node["bridge"], str(self.slot.pod_subnet(node["k"])))

    def _containerd(self, k: int, sandbox_image: str = "") -> Containerd:
        home = self.home(k)
        cri = cri_settings(sandbox_image=sandbox_image, cni_conf_dir=home / "cni" / "net.d", runc_root=home / "runc")
        # Pods' network namespaces under the node's state folder, where stopping the node finds them.
        cri["netns_mounts_under_state_dir"] = True
        return Containerd(home / "containerd", home / "containerd.sock", cri)

    def running(self, name: str) -> bool:
        return procs.running(self.layout, f"kubelet-{name}", binary(KUBELET)) is not None

    # -- the cluster's services ---------------------------------------------------------------
    def services(self) -> None:
        """The service bridge, the kubernetes Service's proxy and CoreDNS (each only if not running)."""
        slot = self.slot
        network.setup_services(slot)
        port = procs.ports(self.layout, ("apiserver",))["apiserver"]
        if procs.running(self.layout, "service-proxy", Path(sys.executable)) is None:
            procs.start(self.layout, "service-proxy",
                        [sys.executable, "-m", "testbed.node.forward", f"{slot.service_ip}:443", f"127.0.0.1:{port}"],
                        env={"PYTHONPATH": str(REPO_ROOT)})
        coredns = binary(COREDNS)
        if not coredns.is_file():
            raise NodeError(f"{coredns} is not built: run `make go-tools`")
        if procs.running(self.layout, COREDNS, coredns) is None:
            corefile = self.layout.root / "Corefile"
            corefile.write_text(configs.corefile(slot=slot, kubeconfig=self.layout.kubeconfig))
            procs.start(self.layout, COREDNS, [str(coredns), "-conf", str(corefile)])

    # -- starting -----------------------------------------------------------------------------
    def start(self, specs: list[NodeSpec], store: Store | None = None) -> list[NodeInfo]:
        """Start these nodes (each only if it is not running; a running one gets the images it
        lacks) and wait until each is Ready with its devices."""
        if not specs:
            return []
        for binary_name in (KUBELET, PLUGIN):
            if not binary(binary_name).is_file():
                raise NodeError(f"{binary(binary_name)} is not built: run `make cluster-up`")
        store = store or Store(say=self.say)
        names = store.ensure()
        self.services()
        for spec in specs:
            self._start_one(spec, store, names)
        for spec in specs:
            self._wait_ready(spec)
        return [self.info(spec.name) for spec in specs]

    def _assign(self, spec: NodeSpec) -> dict:
        slot = self.slot  # claimed (and saved) first: the state read below must hold it when written back
        state = self.layout.read_state()
        nodes = state.setdefault("nodes", {})
        if spec.name not in nodes:
            taken = {node["k"] for node in nodes.values()}
            free = [k for k in range(network.MAX_NODES) if k not in taken]
            if not free:
                raise NodeError(f"a cluster has at most {network.MAX_NODES} real nodes: {', '.join(nodes)}")
            k = free[0]
            address, bridge = slot.node_ip(k), slot.bridge(k)
            if spec.address or spec.nic:
                refused = network.adoptable(spec.address, spec.nic)
                if refused:
                    self.say(f"node {spec.name}: not {spec.address} on {spec.nic or '-'} ({refused}): "
                             f"{address} on {bridge}")
                else:
                    address, bridge = spec.address, spec.nic
            nodes[spec.name] = {"k": k, "port": procs.free_port(), "healthz": procs.free_port(),
                                "address": address, "bridge": bridge}
        nodes[spec.name].update(labels=spec.labels, devices=spec.devices)
        self.layout.write_state(state)
        return nodes[spec.name]

    def _start_one(self, spec: NodeSpec, store: Store, names: dict[str, str]) -> None:
        node = self._assign(spec)
        k, slot = node["k"], self.slot
        kubelet_exe = binary(KUBELET)
        if procs.running(self.layout, f"kubelet-{spec.name}", kubelet_exe):
            # Running: it gets what the store has gained since (this checkout's new images).
            store.load_into(self._containerd(k), names)
            return
        home = self.home(k)
        # Orphans of an earlier run whose pid files went: a kubelet or plugin of this folder is one
        # now (none runs by its pid file), and so is everything of it when its containerd is not running.
        containerd_runs = procs.running(self.layout, f"containerd-{spec.name}", Path("/usr/bin/containerd"))
        for folder in [home] if containerd_runs is None else [home / "kubelet.yaml", home / "dev"]:
            for pid in kill_naming(folder):
                self.say(f"node {spec.name}: stopped an orphan of an earlier run (pid {pid})")
        network.setup_node(slot, k, node["bridge"], node["address"])
        cgroup_root = f"/{CGROUP_PARENT}/{slot.index}.{k}"
        _make_cgroup_root(cgroup_root)
        pause = next(public for public, ref in names.items() if "/pause:" in public)
        containerd = self._containerd(k, pause)
        if not containerd.root.exists():
            store.clone(containerd.root)
        for folder in ("cni/net.d", "cni/ipam", "runc", "dev", *NODE_PATHS):
            (home / folder).mkdir(parents=True, exist_ok=True)
        (home / "cni" / "net.d" / "10-torchdag.conflist").write_text(
            configs.cni_conflist(slot=slot, k=k, bridge=node["bridge"], ipam_dir=home / "cni" / "ipam"))
        containerd.write_config()
        holder = self._namespace(spec.name, home)
        enter = ["nsenter", f"--mount=/proc/{holder}/ns/mnt", "--"]
        if procs.running(self.layout, f"containerd-{spec.name}", Path("/usr/bin/containerd")) is None:
            pid = procs.start(self.layout, f"containerd-{spec.name}", [*enter, *containerd.argv()])
            containerd.wait_serving(lambda: procs.alive(pid), self.layout.log(f"containerd-{spec.name}"))
        store.load_into(containerd, names)  # a node started again may lack what the store gained
        kubelet_yaml = home / "kubelet.yaml"
        kubelet_yaml.write_text(configs.kubelet_config(
            slot=slot, address=node["address"], port=node["port"], healthz_port=node["healthz"],
            runtime_socket=containerd.socket, cgroup_root=cgroup_root, client_ca=self.layout.cert("ca.crt")))
        labels = {"torchdag.io/node": "real", **spec.labels}
        self._start_entered(f"kubelet-{spec.name}", Path(kubelet_exe), [
            *enter, str(kubelet_exe), f"--config={kubelet_yaml}", f"--kubeconfig={self.layout.kubeconfig}",
            f"--hostname-override={spec.name}", f"--node-ip={node['address']}",
            "--node-labels=" + ",".join(f"{key}={value}" for key, value in sorted(labels.items())), "--v=1"])
        if spec.devices:
            self._start_entered(f"{PLUGIN}-{spec.name}", binary(PLUGIN), [
                *enter, str(binary(PLUGIN)), f"--dev-dir={home / 'dev'}",
                *[f"--resource={name}={count}" for name, count in sorted(spec.devices.items())]])
        devices = "".join(f", {name}={count}" for name, count in sorted(spec.devices.items()))
        self.say(f"node {spec.name}: address {node['address']}, nic {node['bridge']}, pods {slot.pod_subnet(k)}"
                 f"{devices} (kubelet, containerd{', Ascend device plugin' if spec.devices else ''})")

    def _start_entered(self, component: str, exe: Path, argv: list[str]) -> int:
        """Start argv (nsenter or unshare ... EXE ...) and wait until its process is EXE: until
        then procs.running would take the pid file for a stale one and remove it (on a loaded
        machine that took long enough for a node to be declared dead at its start)."""
        pid = procs.start(self.layout, component, argv)
        deadline = time.monotonic() + 30
        while _exe(pid) != str(exe.resolve()):
            if not procs.alive(pid) or time.monotonic() > deadline:
                raise NodeError(f"{component} did not start; {self.layout.log(component)} ends:\n"
                                + _tail(self.layout.log(component)))
            time.sleep(0.05)
        return pid

    def _namespace(self, name: str, home: Path) -> int:
        """The node's mount namespace (its holder's pid): the node's folders over the machine's
        fixed paths, mounts private to the node."""
        pid = procs.running(self.layout, f"node-{name}", SLEEP)
        if pid is not None:
            return pid
        binds = " && ".join(f"mkdir -p {path} && mount --bind {home / folder} {path}"
                            for folder, path in NODE_PATHS.items())
        # Until its mounts are made it is unshare, then sh; then sleep.
        return self._start_entered(f"node-{name}", SLEEP, ["unshare", "--mount", "--propagation", "private", "--",
                                                          "sh", "-c", f"set -e; {binds}; exec {SLEEP} infinity"])

    def _wait_ready(self, spec: NodeSpec) -> None:
        from ..kube import Kube

        kube = Kube(str(self.layout.kubeconfig))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if procs.running(self.layout, f"kubelet-{spec.name}", binary(KUBELET)) is None:
                raise NodeError(f"the kubelet of {spec.name} exited; {self.layout.log(f'kubelet-{spec.name}')} ends:\n"
                                + _tail(self.layout.log(f"kubelet-{spec.name}")))
            node = kube.get_or_none(f"/api/v1/nodes/{spec.name}") or {}
            status = node.get("status", {})
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
            allocatable = status.get("allocatable", {})
            devices = all(allocatable.get(name) == str(count) for name, count in spec.devices.items())
            tainted = any(t["key"].startswith("node.kubernetes.io/not-ready") for t in node.get("spec", {}).get(
                "taints", []))
            if ready and devices and not tainted:
                return
            if time.monotonic() > deadline:
                raise NodeError(f"node {spec.name} not Ready with its devices after {READY_TIMEOUT_S:.0f}s "
                                f"(ready {ready}, allocatable {allocatable}); "
                                f"{self.layout.log(f'kubelet-{spec.name}')} ends:\n"
                                + _tail(self.layout.log(f"kubelet-{spec.name}")))
            time.sleep(0.5)

    # -- stopping -----------------------------------------------------------------------------
    def stop(self, name: str) -> None:
        """Stop a node as a machine that goes away: its kubelet, its plugin, every container,
        containerd, its mount namespace; then remove its cgroups, folder and bridge."""
        state = self.layout.read_state()
        node = state.get("nodes", {}).get(name)
        if node is None:
            return
        k = node["k"]
        procs.stop(self.layout, f"kubelet-{name}", binary(KUBELET), grace=10.0)
        procs.stop(self.layout, f"{PLUGIN}-{name}", binary(PLUGIN), grace=5.0)
        containerd = self._containerd(k)
        if containerd.serving():
            _kill_containers(containerd)
        procs.stop(self.layout, f"containerd-{name}", Path("/usr/bin/containerd"), grace=10.0)
        kill_naming(self.home(k))  # shims outlive containerd; and any orphan of an earlier run
        _remove_cgroup_root(f"/{CGROUP_PARENT}/{self.slot.index}.{k}")
        procs.stop(self.layout, f"node-{name}", SLEEP, grace=5.0)  # its mounts go with it
        home = self.home(k)
        _unmount_under(home)
        shutil.rmtree(home, ignore_errors=True)
        network.remove_node(self.slot, k, node.get("bridge"))
        state = self.layout.read_state()
        state.get("nodes", {}).pop(name, None)
        self.layout.write_state(state)

    def stop_all(self) -> list[str]:
        """Every node, then the services and the network slot (`make cluster-down`)."""
        state = self.layout.read_state()
        stopped = []
        for name in list(state.get("nodes", {})):
            self.stop(name)
            stopped.append(f"node {name}")
        if procs.stop(self.layout, "service-proxy", Path(sys.executable), grace=5.0):
            stopped.append("service-proxy")
        if procs.stop(self.layout, COREDNS, binary(COREDNS), grace=5.0):
            stopped.append("coredns")
        if "slot" in state:
            network.release(network.Slot(state["slot"]))
        return stopped


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _v1_hierarchies() -> list[Path]:
    """Every cgroup v1 hierarchy mounted under /sys/fs/cgroup (the kubelet's cgroupfs driver uses them)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] == "cgroup" and fields[4].startswith(str(CGROUP_V1) + "/"):
            found.append(Path(fields[4]))
    return found


def _make_cgroup_root(root: str) -> None:
    """The node's cgroup root in every hierarchy (the kubelet requires it to exist). cpuset's
    new groups start with no CPUs and no memory nodes: they get their parent's."""
    for hierarchy in _v1_hierarchies():
        path = hierarchy
        for part in root.strip("/").split("/"):
            parent, path = path, path / part
            path.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (path / name).exists() and not (path / name).read_text().strip():
                    (path / name).write_text((parent / name).read_text())


def _remove_cgroup_root(root: str) -> None:
    for hierarchy in _v1_hierarchies():
        top = hierarchy / root.strip("/")
        if not top.exists():
            continue
        for path in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
            for _ in range(20):
                try:
                    procs_file = path / "cgroup.procs"
                    for pid in procs_file.read_text().split() if procs_file.exists() else []:
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def _kill_containers(containerd: Containerd) -> None:
    """SIGKILL every task of the node's containerd and delete it, as a machine's power going off would."""
    listed = containerd.ctr("tasks", "ls", "-q", check=False).stdout.split()
    for task in listed:
        containerd.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False, timeout=30)
    for task in listed:
        for _ in range(50):
            if containerd.ctr("tasks", "delete", task, check=False, timeout=30).returncode == 0:
                break
            time.sleep(0.1)


def kill_naming(folder: Path) -> list[int]:
    """SIGKILL every process whose command line names a path under the node's folder (its
    kubelet's config, its containerd's socket and its shims, its plugin's device folder),
    whatever the pid files say. An orphan kubelet whose pid file had
    gone once kept its cgroup root, and removed the pods of the next cluster's node there. The
    pids killed."""
    prefix = str(folder).rstrip("/").encode()
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # a path under the folder, alone or as a flag's value (--config=FOLDER/kubelet.yaml)
        if any(re.search(rb"(^|=)" + re.escape(prefix) + rb"(/|$)", arg) for arg in argv):
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
            except ProcessLookupError:
                pass
    return killed


def _unmount_under(folder: Path) -> None:
    """Every mount under the node's folder (overlay root filesystems, pods' volumes, network
    namespaces), deepest first."""
    prefix = str(folder.resolve()) + "/"
    for _ in range(3):
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        under = sorted({m for m in mounts if m.startswith(prefix)}, key=lambda m: -m.count("/"))
        if not under:
            return
        for mount in under:
            subprocess.run(["umount", "-l", mount], capture_output=True)
