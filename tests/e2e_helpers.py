"""Rendered Workflows under the real Argo controller on the local cluster, their pods run by
the process kubelet (tests/e2e/; `make e2e`). Each test gets Nodes and a namespace
of its own, so the tests of one cluster never see each other's pods."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubelet_cluster_helpers import KubeletProcess

from helpers import REPO, free_port

ARGOEXEC = REPO / ".tools" / "bin" / "argoexec"
FINISHED = ("Succeeded", "Failed", "Error")
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


@dataclass
class Job:
    """One rendered job on the local cluster: its values, Nodes, namespace and kubelet."""

    cluster: object  # cluster_helpers.LocalCluster
    dir: Path
    namespace: str
    hosts: list[str]
    kubelet: KubeletProcess | None = None
    used: int = 0  # how many of the hosts the values file names

    def values(self, nodes: list[dict], args: list[str], extra: str = "") -> Path:
        """A values file for this job's namespace and hosts (`nodes[i]['name']` is filled in)."""
        for node, host in zip(nodes, self.hosts):
            node["name"] = host
        self.used = len(nodes)
        body = {"name": "e2e", "namespace": self.namespace, "image": "registry.example.com/torchdag/trainer:0.1.0",
                "script": "/opt/torchdag/trainer/train.py", "args": args, "port": free_port(),
                "timeouts": {"rendezvous": 60, "processGroup": 68, "workflowDeadline": 900}, "nodes": nodes}
        path = self.dir / "values.yaml"
        path.write_text(yaml.safe_dump(body, sort_keys=False) + extra, encoding="utf-8")
        return path

    def render(self, values: Path) -> Path:
        out = self.dir / "workflow.yaml"
        done = subprocess.run([sys.executable, str(REPO / "render.py"), str(values), "-o", str(out)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return out

    def start(self, values: Path, *kubelet_args: str, hosts_from: Path | None = None) -> None:
        """Register the values file's nodes (`make cluster-nodes`; or those of `hosts_from`,
        hosts that offer other than the job asks) and serve them."""
        done = self.cluster.command("nodes", str(hosts_from or values))
        assert done.returncode == 0, done.stdout + done.stderr
        self.kubelet = KubeletProcess(self.cluster.kubeconfig, self.hosts[:self.used], self.dir / "kubelet",
                                      "--argoexec", str(ARGOEXEC), *kubelet_args)

    def submit(self, workflow: Path) -> str:
        return self.cluster.kubectl("create", "-f", str(workflow), "-o", "name").stdout.strip().split("/")[-1]

    def workflow(self, name: str) -> dict:
        return self.cluster.get("workflow", name, "-n", self.namespace)

    def pods(self, name: str) -> list[dict]:
        return self.cluster.get("pods", "-n", self.namespace, "-l",
                                f"workflows.argoproj.io/workflow={name}")["items"]

    def wait_finished(self, name: str, timeout: float) -> dict:
        def finished():
            if self.kubelet and self.kubelet.proc.poll() is not None:
                pytest.fail(f"the kubelet exited ({self.kubelet.proc.returncode}):\n{self.explain(name)}")
            wf = self.workflow(name)
            return wf if (wf.get("status") or {}).get("phase") in FINISHED else None
        try:
            return self.cluster.wait_for(f"workflow {name} to finish", finished, timeout=timeout, every=1)
        except pytest.fail.Exception:
            print(self.explain(name))
            raise

    def log(self, pod: dict, container: str = "main") -> str:
        path = self.dir / "kubelet" / "logs" / self.namespace / pod["metadata"]["name"] / f"{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def explain(self, name: str) -> str:
        """What a failed assertion needs: the Workflow's status, each pod's phase and log tail,
        the kubelet's log."""
        wf = self.workflow(name)
        parts = [json.dumps(wf.get("status", {}), indent=1)[:3000]]
        for pod in self.pods(name):
            parts.append(f"--- pod {pod['metadata']['name']} on {pod['spec'].get('nodeName')}: "
                         f"{pod['status'].get('phase')}\n{self.log(pod)[-1500:]}")
        if self.kubelet:
            parts.append("--- kubelet:\n" + self.kubelet.text()[-3000:])
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


def rank_of(pod: dict) -> int | None:
    label = pod["metadata"].get("labels", {}).get("torchdag.io/node-rank")
    return int(label) if label is not None else None


def pinned_host(pod: dict) -> str:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]


def checkpoint_nodes(log: str) -> set[int]:
    """Node ranks that logged a node-local checkpoint ('[trainer] node N: checkpoint ...')."""
    return {int(n) for n in re.findall(r"^\[trainer\] node (\d+): checkpoint ", log, re.M)}


@pytest.fixture
def job(local_cluster, tmp_path, request):
    """Three hosts and a namespace of this test, with the executor's Role bound to the
    namespace's default ServiceAccount; afterwards the kubelet stopped, everything deleted."""
    namespace = unique("e2e")
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
    made = Job(local_cluster, tmp_path, namespace, [unique("host") for _ in range(3)])
    yield made
    if made.kubelet:
        made.kubelet.stop()
    local_cluster.kubectl("delete", "workflows", "--all", "-n", namespace, "--wait=false", check=False)
    local_cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--force", "--grace-period=0", check=False)
    local_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    local_cluster.kubectl("delete", "node", *made.hosts, "--ignore-not-found", check=False)
