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
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import REPO
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

    def info(self, name: str) -> NodeInfo:
        """A running node's name, address, NIC and pod range."""
        return self.started.get(name) or self.manager.info(name)

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


def pod_log(cluster, namespace: str, pod: str, container: str = "main", timestamps: bool = False) -> str:
    """A container's log as `kubectl logs` gets it from the node's kubelet ("" if there is none);
    with `timestamps`, each line begins with the time the runtime read it (RFC 3339)."""
    done = cluster.kubectl("logs", "-n", namespace, pod, "-c", container, *(["--timestamps"] if timestamps else []),
                           check=False, timeout=60)
    return done.stdout if done.returncode == 0 else ""


def events(cluster, namespace: str, name: str) -> list[dict]:
    listed = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
                             "-o", "json", check=False)
    return json.loads(listed.stdout)["items"] if listed.returncode == 0 else []


def exec_in(cluster, namespace: str, pod: str, container: str, *argv: str) -> subprocess.CompletedProcess:
    """`kubectl exec` through the node's kubelet (and containerd's streaming server)."""
    return cluster.kubectl("exec", "-n", namespace, pod, "-c", container, "--", *argv, check=False, timeout=60)


@pytest.fixture(scope="module")
def real_nodes_cordoned(request):
    """For the process kubelet's modules: the session's real nodes take no new pods meanwhile.
    A Workflow's unpinned pods (the helpers' ConfigMap task, the watch) would otherwise be placed
    on a real node, out of the process kubelet's sight."""
    if os.environ.get("TORCHDAG_E2E") != "1":
        yield
        return
    cluster = request.getfixturevalue("local_cluster")
    cluster.kubectl("cordon", "-l", "torchdag.io/node=real", check=False)
    yield
    cluster.kubectl("uncordon", "-l", "torchdag.io/node=real", check=False)
