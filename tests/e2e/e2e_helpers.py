"""Rendered Workflows under the real Argo controller on the local cluster (tests/e2e/; `make
e2e`). Each test gets a namespace of its own, so the tests of one cluster never see each
other's pods, and the namespace's default ServiceAccount has exactly the Roles the docs tell
the user to apply for the job's features (docs/rbac/, as the render header names them),
applied from those files.

`job` runs a test's jobs on real nodes (the kubelet, containerd and runc: realnodes_helpers.py,
testbed/node) from images built here (testbed/images); the nodes are the session's, and the
test's folder is mounted into its pods as a hostPath volume at its own path.

`kubelet_job` runs them on the process kubelet, for the modules that stay on it (each says
why); while they run, the real nodes are cordoned. As the user's cluster has it, that kubelet
maps only what the job's image holds (torchdag's image: the Dockerfile's files; a user's
image: its own folder), never the rest of the checkout (`--no-checkout-map`)."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from kubelet_cluster_helpers import KubeletProcess
from realnodes_helpers import CPU_NODES, TORCHDAG_IMAGE, Nodes, events, pod_log

from helpers import REPO, free_port
from testbed.node.nodes import NodeInfo
from torchdag import pipeline
from torchdag.rbac import role_files

ARGOEXEC = REPO / ".tools" / "bin" / "argoexec"
FINISHED = ("Succeeded", "Failed", "Error")


def post_roles(kube, namespace: str, files: list[str]) -> None:
    """What `kubectl apply -n NAMESPACE -f FILE` does with docs/rbac/ files, through the API
    (testbed.kube.Kube): each Role and RoleBinding created in the namespace, once."""
    paths = {"Role": "roles", "RoleBinding": "rolebindings"}
    for path in files:
        for doc in yaml.safe_load_all((REPO / path).read_text(encoding="utf-8")):
            url = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{paths[doc['kind']]}"
            if not kube.get_or_none(f"{url}/{doc['metadata']['name']}"):
                kube.request("POST", url, body=doc)


def wait_workflow_end(job, name: str, timeout: float, check=lambda: None) -> dict:
    """The Workflow once it has ended (FINISHED), polled every second with check() first (it
    fails the test when what serves the job has gone); past the timeout, job.explain(name)
    printed and the test failed."""
    def finished():
        check()
        wf = job.workflow(name)
        return wf if (wf.get("status") or {}).get("phase") in FINISHED else None
    try:
        return job.cluster.wait_for(f"workflow {name} to finish", finished, timeout=timeout, every=1)
    except pytest.fail.Exception:
        print(job.explain(name))
        raise


def grant(cluster, namespace: str, values: Path) -> list[str]:
    """Apply the Roles the docs tell the user to apply for this job, from the docs' own files
    (docs/rbac/, the ones render.py's header names), to the namespace's default
    ServiceAccount, as `kubectl apply -n NS -f` does. Returns the files."""
    files = role_files(pipeline.run(values).plan)
    cluster.kubectl("apply", "-n", namespace, *[f"--filename={REPO / path}" for path in files])
    return files


def job_port() -> int:
    """A free port on 127.0.0.1 for a job's master, outside the ports HCCL takes on Ascend nodes
    (60000-60015), which render.py refuses for a job with Ascend nodes."""
    while True:
        port = free_port()
        if not 60000 <= port <= 60015:
            return port


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
                "script": "/opt/torchdag/trainer/train.py", "args": args, "port": job_port(),
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

    def start(self, values: Path, *kubelet_args: str, hosts_from: Path | None = None,
              image_maps: list[tuple[str, str]] | None = None, rbac: bool = True,
              checkout_map_because: str = "", serve: bool = True) -> None:
        """Register the values file's nodes (`python -m testbed.cluster register`; or those of `hosts_from`,
        hosts that offer other than the job asks), grant the job's Roles (unless rbac is off)
        and serve the nodes. The kubelet maps what the image holds: torchdag's (the Dockerfile's
        files) unless `image_maps` names a user's image's own folders; the rest of the checkout
        only for a test that says why (`checkout_map_because`). `serve=False`: a kubelet of the
        test module's own serves every job's Nodes (pods not pinned to a host, such as the
        scheduling watch, may run on any job's)."""
        if rbac:
            self.grant(values)
        done = self.cluster.command("register", str(hosts_from or values))
        assert done.returncode == 0, done.stdout + done.stderr
        if not serve:
            return
        if checkout_map_because:
            print(f"the kubelet maps /opt/torchdag onto the checkout: {checkout_map_because}")
            maps = []
        else:
            maps = ["--no-checkout-map", *(["--torchdag-image"] if image_maps is None else [])]
            maps += [f"--map={src}={dst}" for src, dst in image_maps or []]
        self.kubelet = KubeletProcess(self.cluster.kubeconfig, self.hosts[:self.used], self.dir / "kubelet",
                                      "--argoexec", str(ARGOEXEC), *maps, *kubelet_args)

    def grant(self, values: Path) -> list[str]:
        return grant(self.cluster, self.namespace, values)

    def submit(self, workflow: Path) -> str:
        return self.cluster.kubectl("create", "-f", str(workflow), "-o", "name").stdout.strip().split("/")[-1]

    def workflow(self, name: str) -> dict:
        return self.cluster.get("workflow", name, "-n", self.namespace)

    def pods(self, name: str) -> list[dict]:
        return self.cluster.get("pods", "-n", self.namespace, "-l",
                                f"workflows.argoproj.io/workflow={name}")["items"]

    def wait_finished(self, name: str, timeout: float) -> dict:
        def kubelet_alive():
            if self.kubelet and self.kubelet.proc.poll() is not None:
                pytest.fail(f"the kubelet exited ({self.kubelet.proc.returncode}):\n{self.explain(name)}")
        return wait_workflow_end(self, name, timeout, kubelet_alive)

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


@dataclass
class NodeJob:
    """One rendered job on the local cluster's real nodes: a namespace of its own, the folder
    of the test (mounted into its pods as a hostPath volume at the same path, as a shared
    filesystem would be), and the nodes it runs on."""

    cluster: object
    nodes: Nodes
    dir: Path
    namespace: str
    hosts: list[NodeInfo] = field(default_factory=list)
    rbac: bool = True  # grant the Roles the docs tell the user to apply (Job.grant), as each values file is written

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
                "script": "/opt/torchdag/trainer/train.py", "args": args, "port": job_port(),
                "timeouts": {"rendezvous": 60, "processGroup": 68, "workflowDeadline": 900},
                "workflow": {"podGC": ""},  # the pods (and their logs) stay until the test's namespace goes
                "volumes": [{"name": "e2e-work", "mountPath": str(self.dir),
                             "hostPath": {"path": str(self.dir), "type": "Directory"}}] if work else [],
                "nodes": nodes, **top}
        path = self.dir / "values.yaml"
        path.write_text(yaml.safe_dump(body, sort_keys=False) + extra, encoding="utf-8")
        if self.rbac:
            grant(self.cluster, self.namespace, path)
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
        return wait_workflow_end(self, name, timeout)

    def explain(self, name: str) -> str:
        """The Workflow's status, each pod's state, events and log tail, the kubelets' log tails."""
        wf = self.workflow(name)
        parts = [json.dumps(wf.get("status", {}), indent=1)[:3000]]
        for pod in self.pods(name):
            pod_name = pod["metadata"]["name"]
            states = {c["name"]: c.get("state") for c in pod["status"].get("containerStatuses", [])}
            said = [f"{e.get('reason')}: {e.get('message')}" for e in events(self.cluster, self.namespace, pod_name)]
            log = self.log(pod)
            # the first error lines too: a rank's own exception is often far above torchrun's summary
            errors = [line for line in log.splitlines() if re.search(r"Error|Traceback|error:", line)][:8]
            parts.append(f"--- pod {pod_name} on {pod['spec'].get('nodeName')}: {pod['status'].get('phase')} "
                         f"{json.dumps(states)[:800]}\nevents: {said[-8:]}\nfirst errors: {errors}\n{log[-1500:]}")
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


def started_processes(kubelet_log: str) -> list[tuple[str, list[str]]]:
    """(pod, argv) of each process the kubelet started (its `pid N (process, ...): ARGV > LOG` lines)."""
    line = r"^\[kubelet [\d:]+\] (\S+)/(\S+) \S+: pid \d+ \(process, device \w+\): (.*) > \S+$"
    found = re.findall(line, kubelet_log, re.M)
    return [(pod, shlex.split(argv)) for _, pod, argv in found]


def rank_of(pod: dict) -> int | None:
    label = pod["metadata"].get("labels", {}).get("torchdag.io/node-rank")
    return int(label) if label is not None else None


def pinned_host(pod: dict) -> str:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]


def checkpoint_nodes(log: str) -> set[int]:
    """Node ranks that logged a node-local checkpoint ('[trainer] node N: checkpoint ...')."""
    return {int(n) for n in re.findall(r"^\[trainer\] node (\d+): checkpoint ", log, re.M)}


@contextlib.contextmanager
def open_job(cluster, directory: Path, hosts: int = 3):
    """Hosts and a namespace of one job (Job.start grants the job's Roles to its default
    ServiceAccount); afterwards the kubelet stopped, everything deleted."""
    namespace = unique("e2e")
    cluster.kubectl("create", "namespace", namespace)
    cluster.wait_for("the default ServiceAccount", lambda: cluster.kubectl(
        "get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0)
    made = Job(cluster, directory, namespace, [unique("host") for _ in range(hosts)])
    try:
        yield made
    finally:
        if made.kubelet:
            made.kubelet.stop()
        cluster.kubectl("delete", "workflows", "--all", "-n", namespace, "--wait=false", check=False)
        # --wait=false: a gang scheduler's finalizer (Kueue's kueue.x-k8s.io/managed) may hold a pod a while
        cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--force", "--grace-period=0", "--wait=false",
                        check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "node", *made.hosts, "--ignore-not-found", check=False)


@pytest.fixture
def kubelet_job(local_cluster, tmp_path, request, real_nodes_cordoned):
    """Three hosts and a namespace of this test (open_job), served by the process kubelet."""
    with open_job(local_cluster, tmp_path) as made:
        yield made


@pytest.fixture
def job(local_cluster, real_nodes, tmp_path):
    """A namespace of this test on the session's real nodes, the test's folder open to the pods'
    users (the trainer image's user is uid 1000); afterwards the namespace and all in it deleted."""
    namespace = unique("rn")
    local_cluster.kubectl("create", "namespace", namespace)
    local_cluster.wait_for("the default ServiceAccount", lambda: local_cluster.kubectl(
        "get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0)
    tmp_path.chmod(0o777)
    yield NodeJob(local_cluster, real_nodes, tmp_path, namespace)
    local_cluster.kubectl("delete", "workflows", "--all", "-n", namespace, "--wait=false", check=False)
    local_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
