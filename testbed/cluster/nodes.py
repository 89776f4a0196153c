"""Nodes for a values file: one per node of the job, as the rendered Workflow pins it.

Each Node is named by the node's `name` (the host the Workflow's node affinity asks for,
label kubernetes.io/hostname), carries the values' `nodeSelector` labels (so the job's pods
fit), and offers cpu, memory, pods and its accelerator's extended resource × devices under
the name the renderer requests (the catalogue's, or the values' `resourceNames`). It is
created Ready, as a kubelet registers its node; admission (TaintNodesByCondition) taints
every new Node `not-ready` until the node lifecycle controller sees it Ready and lifts the
taint: `register` returns once every Node is untainted, i.e. schedulable. No
kubelet heartbeats here: the node lifecycle controller marks a Node Unknown (and taints it)
about 50 s after its last heartbeat unless the process kubelet keeps it Ready.
"""

from __future__ import annotations

import datetime
import platform
import time
from concurrent.futures import ThreadPoolExecutor

from torchdag import pipeline
from torchdag.plan import make_plan

from .procs import ClusterError

# What a node offers besides its accelerators: generous, so a job's own requests fit; a
# values file states no machine sizes (change them with --cpu/--memory/--pods).
DEFAULT_CAPACITY = {"cpu": "64", "memory": "256Gi", "pods": "110"}
# What the node lifecycle controller (and admission, on create) puts on a Node not seen Ready.
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
SHOWN = 10  # nodes listed one by one after registering; beyond that the first ones and the last
KUBELET_VERSION = "v1.37.2"  # the control plane's release; no kubelet of it runs


def node_objects(values_path: str, capacity: dict[str, str] | None = None) -> list[dict]:
    """The Node objects for every node of the values file (rank order), status included."""
    values = pipeline.validate(pipeline.load(values_path))
    plan = make_plan(values)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    nodes = []
    shapes = {shape.name: shape for shape in plan.typed.shapes}
    for node in plan.typed.nodes:
        offered = {**DEFAULT_CAPACITY, **(capacity or {})}
        resource = shapes[node.shape].resources.accelerator_resource
        if resource:
            offered[resource] = str(node.devices)
        labels = {**plan.typed.job.node_selector, "kubernetes.io/hostname": node.host, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": arch, "torchdag.io/accelerator": node.accelerator}
        conditions = [_condition(kind, "False", reason, now) for kind, reason in
                      (("MemoryPressure", "KubeletHasSufficientMemory"), ("DiskPressure", "KubeletHasNoDiskPressure"),
                       ("PIDPressure", "KubeletHasSufficientPID"))]
        conditions.append(_condition("Ready", "True", "KubeletReady", now))
        nodes.append({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.host, "labels": {key: str(value) for key, value in labels.items()}},
            "spec": {},
            "status": {
                "capacity": offered,
                "allocatable": dict(offered),
                "conditions": conditions,
                "addresses": [{"type": "InternalIP", "address": node.address},
                              {"type": "Hostname", "address": node.host}],
                "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "operatingSystem": "linux", "architecture": arch,
                             "containerRuntimeVersion": "torchdag-process://0", "kernelVersion": platform.release(),
                             "osImage": "torchdag process kubelet", "machineID": "", "systemUUID": "",
                             "bootID": "", "kubeProxyVersion": ""},
            },
        })
    return nodes


def _condition(kind: str, status: str, reason: str, now: str) -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": reason,
            "lastHeartbeatTime": now, "lastTransitionTime": now}


def register(cluster, nodes: list[dict], say=print, workers: int = 16) -> None:
    """Create (or bring up to date) these Nodes in the running cluster: server-side apply of
    each, then of its status (a Node's status is kept on create, as a kubelet registers it; an
    existing Node's status changes only through the status subresource). Several at a time:
    thousands of Nodes register in a minute or so."""
    def one(node: dict) -> None:
        path = f"/api/v1/nodes/{node['metadata']['name']}"
        cluster.apply(path, node)
        cluster.apply(f"{path}/status", node)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, nodes))
    # The node lifecycle controller lifts each new Node's taint with a few requests of its own.
    _wait_untainted(cluster, {node["metadata"]["name"] for node in nodes}, timeout=120.0 + 0.05 * len(nodes))
    shown = nodes if len(nodes) <= SHOWN else [*nodes[:SHOWN - 1], nodes[-1]]
    for node in shown:
        if node is nodes[-1] and len(nodes) > SHOWN:
            say(f"... {len(nodes) - SHOWN} more")
        offered = ", ".join(f"{key}={value}" for key, value in node["status"]["allocatable"].items())
        say(f"node {node['metadata']['name']}: Ready, allocatable {offered}")
    say(f"{len(nodes)} node(s) registered")


def _wait_untainted(cluster, names: set[str], timeout: float = 120.0) -> None:
    """Wait until the node lifecycle controller has lifted the `not-ready` taint that admission
    (TaintNodesByCondition) puts on every new Node (or `unreachable`, on a Node whose heartbeats
    had stopped), as it does once it sees the Node Ready; taints of anyone else stay."""
    deadline = time.monotonic() + timeout
    while True:
        listed = cluster.api("/api/v1/nodes") or {"items": []}
        tainted = sorted(node["metadata"]["name"] for node in listed["items"] if node["metadata"]["name"] in names
                         and any(taint["key"] in LIFECYCLE_TAINTS for taint in node["spec"].get("taints", [])))
        if not tainted:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"Nodes still tainted after {timeout:.0f}s: {', '.join(tainted[:5])}"
                               f"{' ...' if len(tainted) > 5 else ''} (kube-controller-manager's log says why)")
        time.sleep(0.5)
