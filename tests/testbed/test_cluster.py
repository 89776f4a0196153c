"""The local control plane (testbed/cluster, `make cluster-up`): real etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and Argo's workflow-controller as processes on
127.0.0.1. These tests check the cluster itself (ready when `up` returns, `up` again changes
nothing, a dead component restarted alone, Nodes from a values file, servers on loopback
only) and what the real servers make of torchdag's output without a kubelet: every golden
render taken by the API server's strict validation, and a rendered Workflow (created with
kubectl, through a registered WorkflowTemplate, or by `helm install`) taken by the real
controller, whose pods the real scheduler binds to the hosts the Workflow pins. Running the
pods is the process kubelet's part (its own tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cluster_helpers import alive

from crd_helpers import podgroup_from_workflow
from helpers import CASES, EXAMPLES_DIR, REPO
from testbed.cluster import procs
from testbed.cluster.layout import Layout
from testbed.cluster.up import COMPONENTS


def e2e(test):
    """A test on the local cluster: the go tier (the Go-built binaries), run by `make e2e`."""
    return pytest.mark.e2e(pytest.mark.go(test))


ARGO_CRDS = ("clusterworkflowtemplates", "cronworkflows", "workflowartifactgctasks", "workfloweventbindings",
             "workflows", "workflowtaskresults", "workflowtasksets", "workflowtemplates")
GOLDEN = sorted((REPO / "tests" / "golden").glob("*/*.yaml"))
GANG_CRDS = ("podgroups.scheduling.volcano.sh", "podgroups.scheduling.x-k8s.io")


def image_agents(tmp_path) -> Path:
    """A values file that leaves the helpers to the image: no kubelet runs in these tests, so the
    ConfigMap task would stay Pending and the node pods, which wait for it, never be created."""
    path = tmp_path / "image-agents.yaml"
    path.write_text("agents: {fromWorkflow: false}\n")
    return path


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


@e2e
def test_up_leaves_every_component_ready(local_cluster):
    assert local_cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    every = local_cluster.pids()
    # The control plane's own; the session's real nodes (kubelet-, containerd-, ... <node>) come and go.
    pids = {name: pid for name, pid in every.items() if name in (*COMPONENTS, "postgres")}
    assert sorted(pids) == sorted([*COMPONENTS, "postgres"])  # the database Argo offloads node status to
    crds = {crd["metadata"]["name"]: crd for crd in local_cluster.get("crd")["items"]}
    for name in [f"{plural}.argoproj.io" for plural in ARGO_CRDS] + list(GANG_CRDS):
        assert name in crds and _established(crds[name]), name
    for namespace in ("default", "argo"):
        local_cluster.get("serviceaccount", "default", "-n", namespace)
    # Argo's quick-start grant: the executor in `default` may report task results, nothing more.
    can = local_cluster.kubectl("auth", "can-i", "create", "workflowtaskresults.argoproj.io",
                                "--as=system:serviceaccount:default:default", "-n", "default", check=False)
    assert can.stdout.strip() == "yes"
    cannot = local_cluster.kubectl("auth", "can-i", "create", "pods",
                                   "--as=system:serviceaccount:default:default", "-n", "default", check=False)
    assert cannot.stdout.strip() == "no"
    # Every server of the control plane listens on loopback only; a real node's also on its own
    # address of 198.18.0.0/15 (its kubelet's API, docs/nodes.md), nowhere else.
    for name, pid in every.items():
        if name not in pids and not Path(f"/proc/{pid}/fd").exists():
            continue  # a stopped node's
        addresses = _listening(pid)
        if name in pids:
            assert addresses, f"{name} listens nowhere"
        allowed = ("127.0.0.1:", "::1:") if name in pids else ("127.0.0.1:", "::1:", "198.18.", "198.19.")
        assert all(address.startswith(allowed) for address in addresses), (name, addresses)


@e2e
def test_up_again_changes_nothing(local_cluster):
    before = local_cluster.pids()
    again = local_cluster.command("up")
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stdout
    assert local_cluster.pids() == before


@e2e
def test_up_restarts_only_a_component_that_died(local_cluster):
    before = local_cluster.pids()
    os.kill(before["kube-scheduler"], signal.SIGKILL)
    local_cluster.wait_for("the scheduler's end", lambda: not alive(before["kube-scheduler"]), timeout=30)
    again = local_cluster.command("up")
    assert again.returncode == 0, again.stderr
    after = local_cluster.pids()
    assert after["kube-scheduler"] != before["kube-scheduler"] and alive(after["kube-scheduler"])
    assert {k: v for k, v in after.items() if k != "kube-scheduler"} == \
        {k: v for k, v in before.items() if k != "kube-scheduler"}
    assert local_cluster.command("up").stdout.startswith("cluster already up")


@e2e
def test_nodes_of_a_values_file(local_cluster):
    values = EXAMPLES_DIR / "mixed-gloo.yaml"
    done = local_cluster.command("register", str(values))
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
        again = local_cluster.command("register", str(values), "--cpu", "8")
        assert again.returncode == 0, again.stderr
        assert local_cluster.get("node", "gpu-01")["status"]["allocatable"]["cpu"] == "8"
    finally:
        local_cluster.kubectl("delete", "node", *accelerators, "--ignore-not-found")


@e2e
def test_bad_values_are_refused_with_exit_2(local_cluster, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnodes: []\n")
    done = local_cluster.command("register", str(bad))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(bad) in done.stderr and "nodes" in done.stderr


def _bound_pods(cluster, namespace: str, workflow: str, count: int) -> list[dict]:
    """The Workflow's node pods (label torchdag.io/node-rank: not the schedule watch's) once the
    controller has made `count` and the scheduler bound each."""
    def bound():
        pods = cluster.get("pods", "-n", namespace, "-l",
                           f"workflows.argoproj.io/workflow={workflow},torchdag.io/node-rank")["items"]
        return pods if len(pods) == count and all(pod["spec"].get("nodeName") for pod in pods) else None

    return cluster.wait_for(f"{count} node pods of {workflow} bound to nodes", bound)


def _pinned(pod: dict) -> list[str]:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]


def _forget(cluster, namespace: str, workflow: str, nodes: list[str]) -> None:
    cluster.kubectl("delete", "workflow", "-n", namespace, workflow, "--wait=false", "--ignore-not-found")
    # No kubelet confirms these pods' end: remove them outright.
    cluster.kubectl("delete", "pods", "-n", namespace, "-l", f"workflows.argoproj.io/workflow={workflow}",
                    "--force", "--grace-period=0", "--ignore-not-found", check=False)
    cluster.kubectl("delete", "node", *nodes, "--ignore-not-found")


@e2e
def test_a_registered_workflowtemplate_runs_on_its_pinned_hosts(local_cluster, tmp_path):
    """The admins' other path: a WorkflowTemplate registered with kubectl, then a Workflow that
    references it (what `argo submit --from` creates); the case names a ServiceAccount and a
    PriorityClass, which the cluster must hold for its pods to be admitted."""
    values = CASES / "workflowtemplate-full.yaml"
    assert local_cluster.command("register", str(values)).returncode == 0
    # What the case's pods refer to: its ServiceAccount, PriorityClass and the claim `datasets`
    # (bound here to a volume nothing mounts: no kubelet).
    claim = {"accessModes": ["ReadWriteOnce"], "storageClassName": ""}
    local_cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer", "namespace": "ml"}},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "datasets"},
         "spec": {**claim, "capacity": {"storage": "1Gi"}, "hostPath": {"path": "/nonexistent/datasets"},
                  "claimRef": {"namespace": "ml", "name": "datasets"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "datasets", "namespace": "ml"},
         "spec": {**claim, "volumeName": "datasets", "resources": {"requests": {"storage": "1Gi"}}}}]))
    rendered = tmp_path / "template.yaml"
    subprocess.run([sys.executable, str(REPO / "render.py"), str(values), "-f", str(image_agents(tmp_path)), "-o",
                    str(rendered)], check=True)
    local_cluster.kubectl("apply", "-f", str(rendered))
    workflow = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": {"generateName": "full-", "namespace": "ml"},
                "spec": {"workflowTemplateRef": {"name": "full"}}}
    name = local_cluster.kubectl("create", "-f", "-", "-o", "name", stdin=yaml.safe_dump(workflow)).stdout
    name = name.strip().split("/")[-1]
    hosts = ["cpu-1", "cpu-2", "gpu-1", "npu-1"]
    try:
        pods = _bound_pods(local_cluster, "ml", name, 4)
        assert sorted(pod["spec"]["nodeName"] for pod in pods) == hosts
        for pod in pods:
            assert [pod["spec"]["nodeName"]] == _pinned(pod)
            assert pod["spec"]["serviceAccountName"] == "trainer" and pod["spec"]["priorityClassName"] == "high"
    finally:
        _forget(local_cluster, "ml", name, hosts)
        local_cluster.kubectl("delete", "workflowtemplate", "-n", "ml", "full", "--ignore-not-found")


@e2e
def test_helm_install_creates_the_rendered_workflow_and_it_is_taken(local_cluster, tmp_path):
    """The admins' path: `helm install` of the chart (rbac.create, its own ServiceAccount) into a
    fresh namespace creates the Workflow render.py writes, and the real controller takes it."""
    values = tmp_path / "values.yaml"
    values.write_text((EXAMPLES_DIR / "local.yaml").read_text()
                      + "serviceAccountName: trainer\nrbac: {create: true, createServiceAccount: true}\n"
                      + image_agents(tmp_path).read_text())  # no kubelet runs the ConfigMap task here
    assert local_cluster.command("register", str(values)).returncode == 0
    helm = [str(REPO / ".tools" / "bin" / "helm"), f"--kubeconfig={local_cluster.kubeconfig}", "-n", "helm-e2e"]
    installed = subprocess.run([*helm, "install", "training", str(REPO / "chart"), "-f", str(values),
                                "--create-namespace"], capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    name = None
    try:
        (workflow,) = local_cluster.get("workflows", "-n", "helm-e2e")["items"]
        name = workflow["metadata"]["name"]
        rendered = subprocess.run([sys.executable, str(REPO / "render.py"), str(values)], capture_output=True,
                                  text=True, check=True).stdout
        (ours,) = [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "Workflow"]
        manifest = subprocess.run([*helm, "get", "manifest", "training"], capture_output=True, text=True,
                                  check=True, timeout=60).stdout
        (sent,) = [doc for doc in yaml.safe_load_all(manifest) if doc and doc["kind"] == "Workflow"]
        # What helm created is what render.py writes. (The stored object differs by what Argo's
        # controller writes back into it: docs/e2e.md.)
        assert sent["spec"] == ours["spec"]
        assert workflow["metadata"]["annotations"]["meta.helm.sh/release-name"] == "training"
        pods = _bound_pods(local_cluster, "helm-e2e", name, 2)
        assert sorted(pod["spec"]["nodeName"] for pod in pods) == ["node-a", "node-b"]
        assert {pod["spec"]["serviceAccountName"] for pod in pods} == {"trainer"}
        can = local_cluster.kubectl("auth", "can-i", "create", "workflowtaskresults.argoproj.io", "-n", "helm-e2e",
                                    "--as=system:serviceaccount:helm-e2e:trainer", check=False)
        assert can.stdout.strip() == "yes"
    finally:
        if name:
            _forget(local_cluster, "helm-e2e", name, ["node-a", "node-b"])
        subprocess.run([*helm, "uninstall", "training"], capture_output=True, timeout=120)
        local_cluster.kubectl("delete", "node", "node-a", "node-b", "--ignore-not-found")


@e2e
def test_the_controller_runs_a_rendered_workflow_on_its_pinned_hosts(local_cluster, tmp_path):
    values = EXAMPLES_DIR / "local.yaml"
    assert local_cluster.command("register", str(values)).returncode == 0
    workflow = tmp_path / "workflow.yaml"
    subprocess.run([sys.executable, str(REPO / "render.py"), str(values), "-f", str(image_agents(tmp_path)), "-o",
                    str(workflow)], check=True)
    name = local_cluster.kubectl("create", "-f", str(workflow), "-o", "name").stdout.strip().split("/")[-1]
    try:
        # The real controller creates one pod per DAG task; the real scheduler binds each to
        # the host its node affinity names (no kubelet runs here: they stay Pending).
        pods = _bound_pods(local_cluster, "default", name, 2)
        for pod in pods:
            assert [pod["spec"]["nodeName"]] == _pinned(pod)
        assert sorted(pod["spec"]["nodeName"] for pod in pods) == ["node-a", "node-b"]
        assert {c["name"] for pod in pods for c in pod["spec"]["containers"]} == {"main", "wait"}
        assert local_cluster.get("workflow", name)["status"].get("phase") == "Running"
    finally:
        _forget(local_cluster, "default", name, ["node-a", "node-b"])


@e2e
def test_a_host_with_fewer_devices_than_asked_leaves_its_pod_pending_with_the_reason(local_cluster, tmp_path):
    """What the gang watch reports: the real scheduler's reason for a pod it cannot place."""
    registered = EXAMPLES_DIR / "cluster.yaml"  # two hosts, one Ascend 310P each
    asked = yaml.safe_load(registered.read_text())
    asked["nodes"][0]["devices"] = 2
    values = tmp_path / "asks-two.yaml"
    values.write_text(yaml.safe_dump(asked))
    assert local_cluster.command("register", str(registered)).returncode == 0
    workflow = tmp_path / "workflow.yaml"
    subprocess.run([sys.executable, str(REPO / "render.py"), "-q", str(values), "-f", str(image_agents(tmp_path)),
                    "-o", str(workflow)], check=True)
    name = local_cluster.kubectl("create", "-f", str(workflow), "-o", "name").stdout.strip().split("/")[-1]
    hosts = [node["name"] for node in asked["nodes"]]
    try:
        def refused():
            pods = local_cluster.get("pods", "-l", f"workflows.argoproj.io/workflow={name}")["items"]
            for pod in pods:
                for condition in pod.get("status", {}).get("conditions", []):
                    if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                        return pod, condition["message"]
            return None

        pod, message = local_cluster.wait_for("the scheduler's refusal", refused)
        assert _pinned(pod) == [hosts[0]] and not pod["spec"].get("nodeName")
        assert "Insufficient huawei.com/Ascend310P" in message, message
        # The other host has what its pod asks for: bound.
        local_cluster.wait_for(f"the pod for {hosts[1]} bound", lambda: [
            pod for pod in local_cluster.get("pods", "-l", f"workflows.argoproj.io/workflow={name}")["items"]
            if pod["spec"].get("nodeName") == hosts[1]])
    finally:
        _forget(local_cluster, "default", name, hosts)


@e2e
def test_the_api_server_takes_every_golden_render_and_its_podgroup(local_cluster):
    """Server-side dry run with strict field validation: Kubernetes' own validation and Argo's
    full CRD schema (and the gang schedulers' PodGroup CRDs) take what torchdag renders."""
    documents = {path: [doc for doc in yaml.safe_load_all(path.read_text()) if doc] for path in GOLDEN}
    namespaces = {doc["metadata"].get("namespace") for docs in documents.values() for doc in docs} - {None}
    local_cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}} for name in sorted(namespaces)]))
    refused, podgroups = [], 0
    for path, docs in documents.items():
        objects = list(docs)
        for doc in docs:
            podgroup = podgroup_from_workflow(doc) if doc["kind"] == "Workflow" else None
            if podgroup:
                podgroup["metadata"].setdefault("namespace", doc["metadata"].get("namespace", "default"))
                objects.append(podgroup)
                podgroups += 1
        done = local_cluster.kubectl("create", "--dry-run=server", "--validate=strict", "-f", "-",
                                     stdin=yaml.safe_dump_all(objects), check=False)
        if done.returncode:
            refused.append(f"{path.relative_to(REPO)}: {done.stderr.strip()}")
    assert not refused, "\n".join(refused)
    assert podgroups >= 2  # volcano and scheduler-plugins
    # The same check refuses what Argo's schema does not hold.
    workflow = documents[GOLDEN[0]][0]
    bad = {**workflow, "spec": {**workflow["spec"], "entrypoints": "train"}}
    done = local_cluster.kubectl("create", "--dry-run=server", "--validate=strict", "-f", "-",
                                 stdin=yaml.safe_dump(bad), check=False)
    assert done.returncode != 0 and 'unknown field "spec.entrypoints"' in done.stderr, done.stderr


@e2e
def test_the_gang_scheduler_names_are_served(local_cluster):
    """schedulerName volcano / scheduler-plugins-scheduler: the one kube-scheduler stands in
    (docs/e2e.md) and binds such pods like any other."""
    assert local_cluster.command("register", str(EXAMPLES_DIR / "local.yaml")).returncode == 0
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"stand-in-{name}"},
             "spec": {"schedulerName": name, "nodeSelector": {"kubernetes.io/hostname": "node-b"},
                      "containers": [{"name": "main", "image": "none"}]}}
            for name in ("volcano", "scheduler-plugins-scheduler")]
    local_cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(pods))
    try:
        for pod in pods:
            name = pod["metadata"]["name"]
            local_cluster.wait_for(f"{name} bound", lambda name=name: local_cluster.get("pod", name)["spec"].get(
                "nodeName") == "node-b", timeout=60)
    finally:
        local_cluster.kubectl("delete", "pod", *(p["metadata"]["name"] for p in pods), "--force", "--grace-period=0",
                              "--ignore-not-found", check=False)
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
