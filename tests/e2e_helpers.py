"""Rendered Workflows under the real Argo controller on the local cluster, their pods run by
real nodes (the kubelet, containerd and runc: tests/realnodes_helpers.py, testbed/node) from
images built here (testbed/images). Each test gets a namespace of its own, so the tests of one
cluster never see each other's pods; the nodes are the session's (tests/e2e/; `make e2e`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from realnodes_helpers import CPU_NODES, TORCHDAG_IMAGE, Nodes, events, pod_log

from helpers import REPO, free_port
from testbed.node.nodes import NodeInfo

# What Argo's executor and the gang watch need, as docs/gang.md's Role grants it.
EXECUTOR_RULES = [
    {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},  # agents.fromWorkflow
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "create", "patch"]},  # network.mode: pod
    {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["get", "patch"]},
    {"apiGroups": ["scheduling.volcano.sh", "scheduling.x-k8s.io"], "resources": ["podgroups"],
     "verbs": ["get", "create", "patch", "delete"]},
]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


FINISHED = ("Succeeded", "Failed", "Error")


@dataclass
class Job:
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

    def values(self, nodes: list[dict], args: list[str], extra: str = "", work: bool = True, **top) -> Path:
        """A values file for this job's namespace: node i runs on host i (its name and, on the host
        network, its address and NIC: those of the real node); the test's folder mounted at its
        own path (unless `work` is false: Pod Security baseline refuses hostPath volumes)."""
        if len(self.hosts) < len(nodes):
            self.use(*CPU_NODES[:len(nodes)])
        pod_network = (top.get("network") or {}).get("mode") == "pod"
        for node, host in zip(nodes, self.hosts):
            # On the host network a node's address and NIC are its host's; a pod has its own.
            node.update(name=host.name, **({} if pod_network else {"address": host.address, "nic": host.nic}))
        body = {"name": "e2e", "namespace": self.namespace, "image": TORCHDAG_IMAGE,
                "script": "/opt/torchdag/trainer/train.py", "args": args, "port": free_port(),
                "timeouts": {"rendezvous": 60, "processGroup": 68, "workflowDeadline": 900},
                "workflow": {"podGC": ""},  # the pods (and their logs) stay until the test's namespace goes
                "volumes": [{"name": "e2e-work", "mountPath": str(self.dir),
                             "hostPath": {"path": str(self.dir), "type": "Directory"}}] if work else [],
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


MAX_WORKFLOW_SIZE = 1048576  # Argo v4.0.5's workflow/packer default: json.Marshal(wf), spec and status


def json_size(obj: dict) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def padded(workflow: dict, size: int) -> dict:
    """The Workflow with a parameter nothing reads, standing for a larger job's spec: its JSON
    `size` bytes before any status, so that its status takes it past Argo's MAX_WORKFLOW_SIZE
    at the bytes left."""
    out = json.loads(json.dumps(workflow))
    params = out["spec"].setdefault("arguments", {}).setdefault("parameters", [])
    params.append({"name": "pad", "value": ""})
    params[-1]["value"] = "x" * (size - json_size(out))
    assert json_size(out) == size
    return out


def nodes_of(workflow: dict) -> dict:
    """status.nodes, or what Argo packed into status.compressedNodes (gzip, base64)."""
    import base64
    import gzip

    status = workflow.get("status") or {}
    if status.get("compressedNodes"):
        return json.loads(gzip.decompress(base64.b64decode(status["compressedNodes"])))
    return status.get("nodes") or {}


@pytest.fixture
def job(local_cluster, real_nodes, tmp_path, request):
    """A namespace of this test, with the executor's Role (e2e_helpers.EXECUTOR_RULES) bound to
    its default ServiceAccount, and the test's folder open to the pods' users; afterwards the
    namespace and everything in it deleted."""
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
    made = Job(local_cluster, real_nodes, tmp_path, namespace)
    yield made
    local_cluster.kubectl("delete", "workflows", "--all", "-n", namespace, "--wait=false", check=False)
    local_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def rank_of(pod: dict) -> int | None:
    label = pod["metadata"].get("labels", {}).get("torchdag.io/node-rank")
    return int(label) if label is not None else None


def pinned_host(pod: dict) -> str:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]


def checkpoint_nodes(log: str) -> set[int]:
    """Node ranks that logged a node-local checkpoint ('[trainer] node N: checkpoint ...')."""
    return {int(n) for n in re.findall(r"^\[trainer\] node (\d+): checkpoint ", log, re.M)}
