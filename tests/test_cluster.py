"""The local control plane (torchdag/cluster, `make cluster-up`): real etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and Argo's workflow-controller as processes on
127.0.0.1. These tests check the cluster itself: ready when `up` returns, `up` again changes
nothing, Nodes from a values file, and a rendered Workflow taken by the real controller,
whose pods the real scheduler binds to the hosts the Workflow pins. Running the pods is the
process kubelet's part (its own tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import EXAMPLES_DIR, REPO
from torchdag.cluster import procs
from torchdag.cluster.layout import Layout
from torchdag.cluster.up import COMPONENTS

ARGO_CRDS = ("clusterworkflowtemplates", "cronworkflows", "workflowartifactgctasks", "workfloweventbindings",
             "workflows", "workflowtaskresults", "workflowtasksets", "workflowtemplates")
GANG_CRDS = ("podgroups.scheduling.volcano.sh", "podgroups.scheduling.x-k8s.io")


def _established(crd: dict) -> bool:
    return any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"].get("conditions", []))


def _listening(pid: int) -> list[str]:
    """The local addresses of the process's listening TCP sockets ("ip:port")."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.append(f"{_ip(address, width)}:{int(port, 16)}")
    return found


def _ip(hexed: str, width: int) -> str:
    if width == 8:
        return ".".join(str(int(hexed[i:i + 2], 16)) for i in range(6, -1, -2))
    words = [hexed[i:i + 8] for i in range(0, 32, 8)]  # four little-endian 32-bit words
    raw = b"".join(bytes.fromhex(word)[::-1] for word in words)
    import ipaddress

    return str(ipaddress.IPv6Address(raw))


@pytest.mark.go
def test_up_leaves_every_component_ready(local_cluster):
    assert local_cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    pids = local_cluster.pids()
    assert sorted(pids) == sorted(COMPONENTS)
    crds = {crd["metadata"]["name"]: crd for crd in local_cluster.get("crd")["items"]}
    for name in [f"{plural}.argoproj.io" for plural in ARGO_CRDS] + list(GANG_CRDS):
        assert name in crds and _established(crds[name]), name
    for namespace in ("default", "argo"):
        local_cluster.get("serviceaccount", "default", "-n", namespace)
    # Every server of the cluster listens on loopback only.
    for name, pid in pids.items():
        addresses = _listening(pid)
        assert addresses, f"{name} listens nowhere"
        assert all(address.startswith(("127.0.0.1:", "::1:")) for address in addresses), (name, addresses)


@pytest.mark.go
def test_up_again_changes_nothing(local_cluster):
    before = local_cluster.pids()
    again = local_cluster.command("up")
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stdout
    assert local_cluster.pids() == before


@pytest.mark.go
def test_nodes_of_a_values_file(local_cluster):
    values = EXAMPLES_DIR / "mixed-gloo.yaml"
    done = local_cluster.command("nodes", str(values))
    assert done.returncode == 0, done.stderr
    try:
        nodes = {node["metadata"]["name"]: node for node in local_cluster.get("nodes")["items"]}
        accelerators = {"atlas-01": ("huawei.com/Ascend910", "2"), "gpu-01": ("nvidia.com/gpu", "1"), "cpu-01": None}
        for name, accelerator in accelerators.items():
            node = nodes[name]
            assert node["metadata"]["labels"]["kubernetes.io/hostname"] == name
            expected = {"cpu": "64", "memory": "256Gi", "pods": "110"}
            if accelerator:
                expected[accelerator[0]] = accelerator[1]
            assert node["status"]["allocatable"] == expected
            assert node["status"]["capacity"] == expected
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True"
            assert not node["spec"].get("taints")
        # Registering again brings existing Nodes up to date (their status included).
        again = local_cluster.command("nodes", str(values), "--cpu", "8")
        assert again.returncode == 0, again.stderr
        assert local_cluster.get("node", "gpu-01")["status"]["allocatable"]["cpu"] == "8"
    finally:
        local_cluster.kubectl("delete", "node", *accelerators, "--ignore-not-found")


@pytest.mark.go
def test_bad_values_are_refused_with_exit_2(local_cluster, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnodes: []\n")
    done = local_cluster.command("nodes", str(bad))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(bad) in done.stderr and "nodes" in done.stderr


@pytest.mark.go
def test_the_controller_runs_a_rendered_workflow_on_its_pinned_hosts(local_cluster, tmp_path):
    values = EXAMPLES_DIR / "local.yaml"
    assert local_cluster.command("nodes", str(values)).returncode == 0
    workflow = tmp_path / "workflow.yaml"
    subprocess.run([sys.executable, str(REPO / "render.py"), str(values), "-o", str(workflow)], check=True)
    name = local_cluster.kubectl("create", "-f", str(workflow), "-o", "name").stdout.strip().split("/")[-1]
    try:
        # The real controller creates one pod per DAG task; the real scheduler binds each to
        # the host its node affinity names (no kubelet runs here: they stay Pending).
        def bound():
            pods = local_cluster.get("pods", "-l", f"workflows.argoproj.io/workflow={name}")["items"]
            return pods if len(pods) == 2 and all(pod["spec"].get("nodeName") for pod in pods) else None

        pods = local_cluster.wait_for("both pods bound to a node", bound)
        for pod in pods:
            terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            pinned = terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
            assert [pod["spec"]["nodeName"]] == pinned
        assert sorted(pod["spec"]["nodeName"] for pod in pods) == ["node-a", "node-b"]
        assert {c["name"] for pod in pods for c in pod["spec"]["containers"]} == {"main", "wait"}
        phase = local_cluster.get("workflow", name)["status"].get("phase")
        assert phase == "Running"
    finally:
        local_cluster.kubectl("delete", "workflow", name, "--wait=false", "--ignore-not-found")
        # No kubelet confirms these pods' end: remove them outright.
        local_cluster.kubectl("delete", "pods", "-l", f"workflows.argoproj.io/workflow={name}", "--force",
                              "--grace-period=0", "--ignore-not-found", check=False)
        local_cluster.kubectl("delete", "node", "node-a", "node-b", "--ignore-not-found")


def test_a_stale_pid_file_is_not_a_running_component(tmp_path):
    layout = Layout(tmp_path)
    kubectl = REPO / ".tools" / "bin" / "kubectl"
    # Our own pid is alive but is no kube-apiserver: the file is stale and goes.
    layout.pid_file("kube-apiserver").write_text(f"{os.getpid()}\n")
    assert procs.running(layout, "kube-apiserver", kubectl) is None
    assert not layout.pid_file("kube-apiserver").exists()
    layout.pid_file("etcd").write_text("not a pid\n")
    assert procs.running(layout, "etcd", kubectl) is None
    assert not layout.pid_file("etcd").exists()


def test_ports_are_picked_once(tmp_path):
    layout = Layout(tmp_path)
    first = procs.ports(layout, ("a", "b"))
    assert len(set(first.values())) == 2
    assert procs.ports(layout, ("a", "b")) == first
    assert yaml.safe_load(layout.state.read_text())["ports"] == first
