"""The pod network with an Ascend node on a real control plane (go and torch tiers): a job
mixing an Ascend node and a CPU node on the pod network, in a namespace that enforces Pod
Security baseline, under Argo's real controller and executor, run by the process kubelet
(docs/kubelet.md). It stays on the process kubelet: its Ascend rank needs torch_npu and an NPU,
which no node here has; the kubelet's `--cpu` stands in (as `make smoke` does) and maps the
master's address to 127.0.0.1. The pod network on real nodes (CoreDNS, the CNI bridge, the
headless Service's EndpointSlice, a host-network job refused): tests/e2e/test_network_nodes.py."""

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
# Its own process kubelet and Nodes (an Ascend rank: see above); the real nodes take no pods meanwhile.
pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e, pytest.mark.long,
              pytest.mark.usefixtures("real_nodes_cordoned")]
ARGOEXEC = REPO / ".tools" / "bin" / "argoexec"


@pytest.fixture(scope="module")
def kube(request):
    return Kube(str(kubeconfig_for(request)))


@pytest.fixture
def baseline(request, kube, tmp_path):
    """Two Nodes of this test (one Ascend), a namespace enforcing Pod Security baseline whose default
    ServiceAccount may do what the Workflow needs, and the kubelet serving the Nodes."""
    nodes = [unique("pn-a"), unique("pn-b")]
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
