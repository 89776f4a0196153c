"""The pod network on a real control plane (go and torch tiers): a namespace that enforces
Pod Security baseline, Argo's real controller and executor, the process kubelet
(docs/kubelet.md) running the pods. A pod-network job trains to the end there, its Service
applied by argoexec and owned by the Workflow, its EndpointSlice (the real controller's)
naming exactly the run's node pods by their hostnames; a host-network job is refused with
Kubernetes' own message. Stand-in: the kubelet runs every pod on this machine and maps the
master's address to 127.0.0.1 (as `make smoke` does), so the DNS name itself is resolved in
tests/agents/test_preflight_dns.py, not here: no cluster DNS runs."""

from __future__ import annotations

import pytest
import yaml
from e2e_helpers import post_roles
from kubelet_cluster_helpers import KubeletProcess, delete_nodes, dump, kubeconfig_for, register_nodes, unique, wait_for

from helpers import REPO, free_port
from testbed.kube import Kube
from torchdag import pipeline
from torchdag.rbac import role_files

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
# the control plane and Argo from Go; real torchrun
# Its own process kubelet and Nodes (issue 43 moves it to real nodes next); the real nodes take no pods meanwhile.
pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e, pytest.mark.long,
              pytest.mark.usefixtures("real_nodes_cordoned")]
ARGOEXEC = REPO / ".tools" / "bin" / "argoexec"


@pytest.fixture(scope="module")
def kube(request):
    return Kube(str(kubeconfig_for(request)))


@pytest.fixture
def baseline(request, kube, tmp_path):
    """Three Nodes of this test, a namespace enforcing Pod Security baseline whose default
    ServiceAccount may do what the Workflow needs, and the kubelet serving the Nodes."""
    nodes = [unique("pn-a"), unique("pn-b"), unique("pn-c")]
    namespace = unique("pn")
    register_nodes(kube, nodes[:1], extra={"huawei.com/Ascend910": "8"})  # the mixed job's Ascend node
    register_nodes(kube, nodes[1:])
    for index, node in enumerate(nodes):  # addresses of their own: an EndpointSlice refuses loopback ones
        kube.request("PATCH", f"/api/v1/nodes/{node}/status", content_type="application/merge-patch+json", body={
            "status": {"addresses": [{"type": "InternalIP", "address": f"198.18.7.{index + 1}"}]}})
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace, "labels": {
        "pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    wait_for("the default ServiceAccount", lambda: kube.get_or_none(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/default"))
    # --cpu: an Ascend pod trains on CPU here (make smoke's stand-in), each change in the kubelet's log; the
    # pods run torchdag's image, which the kubelet maps (its Dockerfile's files), and nothing else of the checkout
    kubelet = KubeletProcess(kubeconfig_for(request), nodes, tmp_path / "state", "--argoexec", str(ARGOEXEC), "--cpu",
                             "--no-checkout-map", "--torchdag-image")
    yield nodes, namespace, kubelet
    kubelet.stop()
    try:
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
    except Exception:  # noqa: BLE001 -- already gone
        pass
    delete_nodes(kube, nodes)


def submit(kube: Kube, tmp_path, namespace: str, values: dict) -> str:
    # A port of its own: the kubelet maps every master's address to 127.0.0.1, where other tests'
    # ranks listen too (the default 29500 once collided with one of them: rank 0 exit 1, the rest hung).
    values = {"port": free_port(), **values}
    path = tmp_path / f"{values['name']}.yaml"
    path.write_text(yaml.safe_dump(values))
    rendered = pipeline.run(path)
    post_roles(kube, namespace, role_files(rendered.plan))  # what the docs tell the user to apply for it
    doc = next(d for d in yaml.safe_load_all(rendered.text) if d and d.get("kind") == "Workflow")
    created = kube.request("POST", f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows", body=doc)
    return created["metadata"]["name"]


def workflow_of(kube: Kube, namespace: str, name: str) -> dict:
    return kube.get_or_none(f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows/{name}")


def ended(kube: Kube, namespace: str, name: str):
    wf = workflow_of(kube, namespace, name)
    return wf if wf and (wf.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Error") else None


def test_a_pod_network_job_trains_to_the_end_where_baseline_is_enforced(kube, baseline, tmp_path):
    nodes, namespace, kubelet = baseline
    values = {"name": "podnet", "namespace": namespace, "image": "registry.example.com/torchdag/trainer:0.1.0",
              "script": "/opt/torchdag/trainer/train.py", "args": ["--max-steps", "150"],
              "network": {"mode": "pod"}, "podSecurity": "baseline", "workflow": {"podGC": ""},
              "nodes": [{"name": node} for node in nodes]}
    name = submit(kube, tmp_path, namespace, values)

    def slice_of_three():
        slices = kube.request("GET", f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
                                     f"?labelSelector=kubernetes.io/service-name={name}")["items"]
        endpoints = [e for s in slices for e in s.get("endpoints") or []]
        return endpoints if len(endpoints) == 3 else None

    endpoints = wait_for("the run's Service to select its three node pods", slice_of_three, timeout=240,
                         kubelet=kubelet)
    pods = {p["metadata"]["name"]: p for p in kube.request("GET", f"/api/v1/namespaces/{namespace}/pods?"
                                                                   f"labelSelector=torchdag.io/run={name}")["items"]}
    assert sorted(e["hostname"] for e in endpoints) == ["node-0", "node-1", "node-2"]
    assert sorted(e["targetRef"]["name"] for e in endpoints) == sorted(pods)
    for pod in pods.values():  # Argo applied the template's podSpecPatch
        rank = pod["metadata"]["labels"]["torchdag.io/node-rank"]
        assert pod["spec"]["hostname"] == f"node-{rank}" and pod["spec"]["subdomain"] == name
        assert "hostNetwork" not in pod["spec"]

    wf = wait_for(f"Workflow {name} to end", lambda: ended(kube, namespace, name), timeout=300, kubelet=kubelet)
    assert wf["status"]["phase"] == "Succeeded", dump(wf["status"]) + kubelet.text()[-3000:]
    service = kube.get_or_none(f"/api/v1/namespaces/{namespace}/services/{name}")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {"torchdag.io/run": name}
    (owner,) = service["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Workflow", name, wf["metadata"]["uid"])
    logs = kubelet.state_dir / "logs" / namespace
    master = [p.read_text() for p in logs.glob(f"{name}-cpu-x1-*/main.log") if "[trainer] done: 150 steps" in
              p.read_text()]
    assert master, sorted(str(p) for p in logs.rglob("*.log"))
    assert "preflight: ok: master name" in master[0]


def test_a_mixed_ascend_and_cpu_pod_network_job_succeeds_where_baseline_is_enforced(kube, baseline, tmp_path):
    nodes, namespace, kubelet = baseline
    values = {"name": "podmix", "namespace": namespace, "image": "registry.example.com/torchdag/trainer:0.1.0",
              "script": "/opt/torchdag/trainer/train.py", "args": ["--max-steps", "20"], "backend": "gloo",
              "network": {"mode": "pod"}, "podSecurity": "baseline", "ascend": {"mountDriver": False},
              "nodes": [{"name": nodes[0], "accelerator": "ascend910", "devices": 1},
                        {"name": nodes[1], "accelerator": "cpu", "nic": "net1"}]}
    name = submit(kube, tmp_path, namespace, values)
    wf = wait_for(f"Workflow {name} to end", lambda: ended(kube, namespace, name), timeout=300, kubelet=kubelet)
    assert wf["status"]["phase"] == "Succeeded", dump(wf["status"]) + kubelet.text()[-3000:]
    # HCCL_IF_IP came from the downward API (the pod's IP, its Node's here), then this machine's stand-in
    assert "-ascend910-x1-" in kubelet.text() and "main: HCCL_IF_IP 198.18.7.1 -> 127.0.0.1" in kubelet.text()


def test_a_host_network_job_is_refused_in_kubernetes_words(kube, baseline, tmp_path):
    nodes, namespace, kubelet = baseline
    values = {"name": "hostnet", "namespace": namespace, "image": "registry.example.com/torchdag/trainer:0.1.0",
              "script": "/opt/torchdag/trainer/train.py", "nodes": [{"name": node, "nic": "em1"} for node in nodes[:2]]}
    name = submit(kube, tmp_path, namespace, values)
    wf = wait_for(f"Workflow {name} to end", lambda: ended(kube, namespace, name), timeout=120, kubelet=kubelet)
    assert wf["status"]["phase"] in ("Failed", "Error")
    # The Workflow's hostNetwork covers every pod it makes: the first, the helpers' ConfigMap
    # task, is refused, and the tasks after it are omitted.
    refused = {n["displayName"]: n.get("message", "") for n in wf["status"]["nodes"].values()
               if n.get("type") == "Pod" and n.get("phase") in ("Failed", "Error")}
    assert "agents" in refused and all('is forbidden: violates PodSecurity "baseline:latest": host namespaces '
                                       '(hostNetwork=true)' in message for message in refused.values()), refused
