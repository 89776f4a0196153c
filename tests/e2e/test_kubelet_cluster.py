"""The process kubelet on a real control plane (go tier): the real scheduler binds, the
kubelet runs the pod's processes and reports them; Argo's real controller drives Workflows
through it. Nodes are the test's own (unique names), so an API server shared with other
work (TORCHDAG_TEST_KUBECONFIG) is left as it was."""

from __future__ import annotations

import time

import pytest
from kubelet_cluster_helpers import (
    KubeletProcess,
    delete_nodes,
    dump,
    kubeconfig_for,
    register_nodes,
    unique,
    wait_for,
)

from helpers import REPO
from testbed.kube import Kube

# The process kubelet's own tests stay on it (docs/kubelet.md: what it is for): the real nodes take no pods meanwhile.
pytestmark = [pytest.mark.go, pytest.mark.e2e, pytest.mark.usefixtures("real_nodes_cordoned")]
ARGOEXEC = REPO / ".tools" / "bin" / "argoexec"
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def kube(request):
    return Kube(str(kubeconfig_for(request)))


@pytest.fixture
def setup(request, kube, tmp_path):
    """Two Nodes of this test, a namespace whose default ServiceAccount may read pods and do
    what Argo's executor does, and the kubelet serving the Nodes."""
    nodes = [unique("kl-a"), unique("kl-b")]
    namespace = unique("kl")
    register_nodes(kube, nodes)
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    wait_for("the default ServiceAccount", lambda: kube.get_or_none(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/default"))
    rules = [{"apiGroups": [""], "resources": ["pods", "configmaps"], "verbs": ["get", "list", "create", "patch"]},
             {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]},
             {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["get", "patch"]}]
    kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
                 body={"metadata": {"name": "exec"}, "rules": rules})
    kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", body={
        "metadata": {"name": "exec"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                  "name": "exec"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]})
    # hand-written pods and Workflows that run nothing of torchdag: the checkout is not mapped
    kubelet = KubeletProcess(kubeconfig_for(request), nodes, tmp_path / "state", "--argoexec", str(ARGOEXEC),
                             "--no-checkout-map")
    yield kube, nodes, namespace, kubelet
    kubelet.stop()
    try:
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
    except Exception:  # noqa: BLE001
        pass
    delete_nodes(kube, nodes)


def pod_path(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def phase_of(kube: Kube, namespace: str, name: str, phases: tuple[str, ...]):
    pod = kube.get_or_none(pod_path(namespace, name))
    return pod if pod and (pod.get("status") or {}).get("phase") in phases else None


SELF_CHECK = """
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
url = "https://%s:%s/api/v1/namespaces/%s/pods/%s" % (os.environ["KUBERNETES_SERVICE_HOST"],
      os.environ["KUBERNETES_SERVICE_PORT"], open(sa + "/namespace").read(), os.environ["MY_POD"])
req = urllib.request.Request(url, headers={"Authorization": "Bearer " + open(sa + "/token").read()})
pod = json.load(urllib.request.urlopen(req, context=ssl.create_default_context(cafile=sa + "/ca.crt")))
print("env", os.environ["LABEL"], os.environ["NODE"], os.environ["MIXED"])
open("/dev/termination-log", "w").write("saw myself " + pod["status"]["phase"])
raise SystemExit(3)
"""


def test_pod_runs_with_downward_env_token_and_termination_message(setup):
    kube, nodes, namespace, kubelet = setup
    env = [{"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "LABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
           {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "MIXED", "value": "$(MY_POD)/$(NOT_SET)/$$(MY_POD)"}]
    kube.request("POST", pod_path(namespace), body={
        "metadata": {"name": "self", "labels": {"app": "demo"}},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": nodes[1]},
                 "containers": [{"name": "main", "image": "python", "command": ["python3", "-c", SELF_CHECK],
                                 "env": env}]}})
    pod = wait_for("pod self to end", lambda: phase_of(kube, namespace, "self", ("Succeeded", "Failed")),
                   kubelet=kubelet)
    assert pod["spec"]["nodeName"] == nodes[1], "the real scheduler placed it"
    assert pod["status"]["phase"] == "Failed", dump(pod["status"])
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term["message"]) == (3, "Error", "saw myself Running")
    assert pod["status"]["hostIP"] == "127.0.0.1"
    log = (kubelet.state_dir / "logs" / namespace / "self" / "main.log").read_text()
    assert log == f"env demo {nodes[1]} self/$(NOT_SET)/$(MY_POD)\n"
    lease = kube.get_or_none(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{nodes[0]}")
    assert lease and lease["spec"]["holderIdentity"] == nodes[0]


def test_deleted_pod_is_stopped_and_removed(setup):
    kube, nodes, namespace, kubelet = setup
    kube.request("POST", pod_path(namespace), body={
        "metadata": {"name": "sleeper"},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": nodes[0]},
                 "terminationGracePeriodSeconds": 3,
                 "containers": [{"name": "main", "image": "x", "command": ["sleep", "300"]}]}})
    pod = wait_for("pod sleeper Running", lambda: phase_of(kube, namespace, "sleeper", ("Running",)), kubelet=kubelet)
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].rsplit("/", 1)[1])
    begin = time.monotonic()
    kube.request("DELETE", pod_path(namespace, "sleeper"))
    wait_for("pod sleeper gone", lambda: kube.get_or_none(pod_path(namespace, "sleeper")) is None, timeout=30,
             kubelet=kubelet)
    assert time.monotonic() - begin < 10, "sleep exits on SIGTERM: no need to wait for the grace period"
    with pytest.raises(OSError):
        open(f"/proc/{pid}/stat").read()
    assert f"{namespace}/sleeper: deleted (processes gone)" in kubelet.text()


def workflow(name: str, node: str, templates: list[dict], dag: list[dict]) -> dict:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": name},
            "spec": {"entrypoint": "main", "nodeSelector": {"kubernetes.io/hostname": node},
                     "templates": [{"name": "main", "dag": {"tasks": dag}}, *templates]}}


def wf_path(namespace: str, name: str = "") -> str:
    return f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows" + (f"/{name}" if name else "")


def wf_done(kube: Kube, namespace: str, name: str):
    wf = kube.get_or_none(wf_path(namespace, name))
    return wf if wf and (wf.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Error") else None


def test_argo_workflow_resource_template_and_container(setup):
    kube, nodes, namespace, kubelet = setup
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: made-by-argoexec\ndata:\n  k: v\n"
    templates = [{"name": "cm", "resource": {"action": "create", "manifest": manifest}},
                 {"name": "hello", "container": {"image": "x", "command": ["python3", "-c"],
                                                 "args": ["print('hello from', '{{workflow.name}}')"]}}]
    kube.request("POST", wf_path(namespace), body=workflow("wf1", nodes[0], templates, [
        {"name": "cm", "template": "cm"}, {"name": "hello", "template": "hello", "depends": "cm"}]))
    wf = wait_for("Workflow wf1 to end", lambda: wf_done(kube, namespace, "wf1"), timeout=180, kubelet=kubelet)
    assert wf["status"]["phase"] == "Succeeded", dump(wf["status"]) + kubelet.text()[-3000:]
    assert kube.get_or_none(f"/api/v1/namespaces/{namespace}/configmaps/made-by-argoexec")["data"] == {"k": "v"}
    logs = kubelet.state_dir / "logs" / namespace
    assert any(p.read_text() == "hello from wf1\n" for p in logs.glob("wf1-hello-*/main.log"))
    assert "unwrapped Argo's emissary" in kubelet.text()


def test_argo_terminate_signals_the_running_pod(setup):
    kube, nodes, namespace, kubelet = setup
    script = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\ntime.sleep(300)"
    templates = [{"name": "sleep", "container": {"image": "x", "command": ["python3", "-c", script]}}]
    kube.request("POST", wf_path(namespace), body=workflow("wf2", nodes[1], templates,
                                                           [{"name": "sleep", "template": "sleep"}]))

    def running_pod():
        pods = kube.request("GET", pod_path(namespace), query={"labelSelector": "workflows.argoproj.io/workflow=wf2"})
        return next((p for p in pods["items"] if (p.get("status") or {}).get("phase") == "Running"), None)

    pod = wait_for("wf2's pod Running", running_pod, timeout=120, kubelet=kubelet)
    kube.request("PATCH", wf_path(namespace, "wf2"), body={"spec": {"shutdown": "Terminate"}}, content_type=MERGE)
    wf = wait_for("Workflow wf2 to end", lambda: wf_done(kube, namespace, "wf2"), timeout=90, kubelet=kubelet)
    assert wf["status"]["phase"] == "Failed" and "Terminate" in wf["status"].get("message", ""), dump(wf["status"])
    name = pod["metadata"]["name"]
    ended = wait_for("the pod to end", lambda: phase_of(kube, namespace, name, ("Failed", "Succeeded")),
                     timeout=60, kubelet=kubelet)
    main = next(c for c in ended["status"]["containerStatuses"] if c["name"] == "main")
    assert main["state"]["terminated"]["exitCode"] == 143, dump(ended["status"])
    assert "workflow shutdown with strategy Terminate" in kubelet.text()


def create_pinned_pod(kube: Kube, namespace: str, node: str) -> None:
    """A pod named after its Node, pinned there, running `true`."""
    kube.request("POST", pod_path(namespace), body={
        "metadata": {"name": node},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                 "automountServiceAccountToken": False,
                 "containers": [{"name": "main", "image": "x", "command": ["true"]}]}})


@pytest.mark.parametrize("bound_first", [False, True], ids=["pod-after-node-served", "pod-bound-before"])
def test_selector_serves_nodes_registered_later(kube, request, tmp_path, bound_first):
    """A Node that comes to match --selector is served, and its pod runs: one created after,
    or one the scheduler bound before the kubelet served the Node (the pod watch passed it
    by as not ours; the kubelet lists such pods once per round of newly served Nodes)."""
    label = unique("sel")
    kubelet = KubeletProcess(kubeconfig_for(request), f"torchdag.io/test-group={label}", tmp_path / "state",
                             "--no-checkout-map")
    node = unique("kl-late")
    namespace = "default"
    selected = {"torchdag.io/test-group": label}
    try:
        wait_for("the kubelet to start", lambda: "serving 0 node(s)" in kubelet.text(), kubelet=kubelet)
        register_nodes(kube, [node], labels=None if bound_first else selected)
        create_pinned_pod(kube, namespace, node)
        if bound_first:
            wait_for("the pod to be bound", lambda: (kube.get_or_none(pod_path(namespace, node)) or {}).get(
                "spec", {}).get("nodeName"), timeout=60)
            kube.request("PATCH", f"/api/v1/nodes/{node}", content_type="application/merge-patch+json",
                         body={"metadata": {"labels": selected}})
        pod = wait_for("the pod on the later Node to end", lambda: phase_of(kube, namespace, node, ("Succeeded",)),
                       timeout=60, kubelet=kubelet)
        assert pod["spec"]["nodeName"] == node
        assert f"serving node {node}" in kubelet.text()
    finally:
        kubelet.stop()
        kube.request("DELETE", pod_path(namespace, node))
        delete_nodes(kube, [node])
