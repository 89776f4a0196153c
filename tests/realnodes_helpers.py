"""Real nodes for the e2e tests (a pytest plugin: conftest.py loads it).

`real_nodes` (session scope) adds nodes made of the kubelet, containerd and runc
(testbed/node) to the pytest process's local cluster, as a module asks for them, and keeps
them for the session: tests share nodes, each test its own namespace. Starting a node costs
its kubelet's registration (seconds); the images are built once per machine (`make images`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from helpers import REPO, free_port
from testbed.cluster.layout import Layout
from testbed.images import recipes
from testbed.node.nodes import NodeInfo, NodeSpec, RealNodes

BIN = REPO / ".tools" / "bin"
NODE_BINARIES = ("kubelet", "ascend-device-plugin", "coredns")
USER_IMAGE = recipes.USER_IMAGE
TORCHDAG_IMAGE = recipes.TORCHDAG_IMAGE
NO_PYTHON_IMAGE = recipes.NO_PYTHON_IMAGE
# The CPU nodes every job may use, and the Ascend nodes (device plugin) a module may ask for.
CPU_NODES = ("cpu-0", "cpu-1", "cpu-2")
ASCEND = {
    "a910-8": {"huawei.com/Ascend910": 8},
    "a310p-4": {"huawei.com/Ascend310P": 4},
    "a310p-2": {"huawei.com/Ascend310P": 2},
}


@dataclass
class Nodes:
    cluster: object  # cluster_helpers.LocalCluster
    started: dict[str, NodeInfo] = field(default_factory=dict)

    @property
    def manager(self) -> RealNodes:
        return RealNodes(Layout.of(str(self.cluster.dir)), say=lambda line: None)

    def ensure(self, *names: str) -> list[NodeInfo]:
        """These nodes running (started now if they are not), in the order asked."""
        missing = [name for name in names if name not in self.started]
        if missing:
            specs = [NodeSpec(name, labels={"torchdag.io/accelerator": "npu" if name in ASCEND else "cpu"},
                              devices=ASCEND.get(name, {})) for name in missing]
            for info in self.manager.start(specs):
                self.started[info.name] = info
        return [self.started[name] for name in names]

    def cpu(self, count: int = 3) -> list[NodeInfo]:
        return self.ensure(*CPU_NODES[:count])

    def stop(self, name: str) -> None:
        """The node goes away as a machine does: its kubelet, containerd and containers stop."""
        self.manager.stop(name)
        self.started.pop(name, None)

    def kubelet_log(self, name: str) -> str:
        path = Path(self.cluster.dir) / "logs" / f"kubelet-{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="session")
def real_nodes(local_cluster) -> Nodes:
    missing = [name for name in NODE_BINARIES if not (BIN / name).is_file()]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)}: run `make go-tools` first")
    if os.geteuid() != 0:
        pytest.fail("real nodes need root (containerd, runc, mounts, cgroups, bridges)")
    yield Nodes(local_cluster)
    # `cluster down` (local_cluster's teardown) stops every node and what it made.


def pod_log(cluster, namespace: str, pod: str, container: str = "main") -> str:
    """A container's log as `kubectl logs` gets it from the node's kubelet ("" if there is none)."""
    done = cluster.kubectl("logs", "-n", namespace, pod, "-c", container, check=False, timeout=60)
    return done.stdout if done.returncode == 0 else ""


def events(cluster, namespace: str, name: str) -> list[dict]:
    listed = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
                             "-o", "json", check=False)
    return json.loads(listed.stdout)["items"] if listed.returncode == 0 else []


def exec_in(cluster, namespace: str, pod: str, container: str, *argv: str) -> subprocess.CompletedProcess:
    """`kubectl exec` through the node's kubelet (and containerd's streaming server)."""
    return cluster.kubectl("exec", "-n", namespace, pod, "-c", container, "--", *argv, check=False, timeout=60)


FINISHED = ("Succeeded", "Failed", "Error")


@dataclass
class RealJob:
    """One rendered job on the local cluster's real nodes: a namespace of its own, the folder
    of the test (mounted into its pods as a hostPath volume at the same path, as a shared
    filesystem would be), and the nodes it runs on."""

    cluster: object
    nodes: Nodes
    dir: Path
    namespace: str
    hosts: list[NodeInfo] = field(default_factory=list)

    def use(self, *names: str) -> list[NodeInfo]:
        self.hosts = self.nodes.ensure(*names)
        return self.hosts

    def values(self, nodes: list[dict], args: list[str], extra: str = "", **top) -> Path:
        """A values file for this job's namespace: node i runs on host i (its name, address and
        NIC, those of the real node); the test's folder mounted at its own path."""
        if len(self.hosts) < len(nodes):
            self.use(*CPU_NODES[:len(nodes)])
        for node, host in zip(nodes, self.hosts):
            node.update(name=host.name, address=host.address, nic=host.nic)
        body = {"name": "e2e", "namespace": self.namespace, "image": TORCHDAG_IMAGE,
                "script": "/opt/torchdag/trainer/train.py", "args": args, "port": free_port(),
                "timeouts": {"rendezvous": 60, "processGroup": 68, "workflowDeadline": 900},
                "workflow": {"podGC": ""},  # the pods (and their logs) stay until the test's namespace goes
                "volumes": [{"name": "e2e-work", "mountPath": str(self.dir),
                             "hostPath": {"path": str(self.dir), "type": "Directory"}}],
                "nodes": nodes, **top}
        path = self.dir / "values.yaml"
        path.write_text(yaml.safe_dump(body, sort_keys=False) + extra, encoding="utf-8")
        return path

    def render(self, values: Path) -> Path:
        out = self.dir / f"{values.stem}-workflow.yaml"
        done = subprocess.run([sys.executable, str(REPO / "render.py"), str(values), "-o", str(out)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return out

    def submit(self, workflow: Path) -> str:
        return self.cluster.kubectl("create", "-f", str(workflow), "-o", "name").stdout.strip().split("/")[-1]

    def workflow(self, name: str) -> dict:
        return self.cluster.get("workflow", name, "-n", self.namespace)

    def pods(self, name: str) -> list[dict]:
        return self.cluster.get("pods", "-n", self.namespace, "-l", f"workflows.argoproj.io/workflow={name}")["items"]

    def log(self, pod: dict, container: str = "main") -> str:
        return pod_log(self.cluster, self.namespace, pod["metadata"]["name"], container)

    def wait_finished(self, name: str, timeout: float) -> dict:
        def finished():
            wf = self.workflow(name)
            return wf if (wf.get("status") or {}).get("phase") in FINISHED else None
        try:
            return self.cluster.wait_for(f"workflow {name} to finish", finished, timeout=timeout, every=1)
        except pytest.fail.Exception:
            print(self.explain(name))
            raise

    def explain(self, name: str) -> str:
        """The Workflow's status, each pod's state, events and log tail, the kubelets' log tails."""
        wf = self.workflow(name)
        parts = [json.dumps(wf.get("status", {}), indent=1)[:3000]]
        for pod in self.pods(name):
            pod_name = pod["metadata"]["name"]
            states = {c["name"]: c.get("state") for c in pod["status"].get("containerStatuses", [])}
            said = [f"{e.get('reason')}: {e.get('message')}" for e in events(self.cluster, self.namespace, pod_name)]
            parts.append(f"--- pod {pod_name} on {pod['spec'].get('nodeName')}: {pod['status'].get('phase')} "
                         f"{json.dumps(states)[:800]}\nevents: {said[-8:]}\n{self.log(pod)[-1500:]}")
        for host in self.hosts:
            parts.append(f"--- kubelet {host.name}:\n" + self.nodes.kubelet_log(host.name)[-1500:])
        return "\n".join(parts)


@pytest.fixture
def real_job(local_cluster, real_nodes, tmp_path, request):
    """A namespace of this test, with the executor's Role (e2e_helpers.EXECUTOR_RULES) bound to
    its default ServiceAccount, and the test's folder open to the pods' users; afterwards the
    namespace and everything in it deleted."""
    from e2e_helpers import EXECUTOR_RULES, unique

    namespace = unique("rn")
    local_cluster.kubectl("create", "namespace", namespace)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "torchdag-executor", "namespace": namespace}, "rules": EXECUTOR_RULES}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "torchdag-executor", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "torchdag-executor"},
               "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]}
    local_cluster.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                "items": [role, binding]}))
    local_cluster.wait_for("the default ServiceAccount", lambda: local_cluster.kubectl(
        "get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0)
    tmp_path.chmod(0o777)  # the trainer image's user is uid 1000
    made = RealJob(local_cluster, real_nodes, tmp_path, namespace)
    yield made
    local_cluster.kubectl("delete", "workflows", "--all", "-n", namespace, "--wait=false", check=False)
    local_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
