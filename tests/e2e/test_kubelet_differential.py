"""Differential (go tier): for every example, the command, args and env the process kubelet
would start for each training pod that Argo's real controller creates equal what
`make smoke --cpu` starts for that node from the Plan, but for the variables only a pod has
(ARGO_*, the API server's Service): Argo's substitution of the rendered Workflow against the
Plan's own per-node words (torchdag.plan.node_container). The kubelet runs with --no-exec
--record, so the pods complete without processes and their plans are written down."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml
from kubelet_cluster_helpers import KubeletProcess, delete_nodes, kubeconfig_for, register_nodes, wait_for

from helpers import EXAMPLES, REPO
from testbed.kube import Kube
from testbed.kubelet.sandbox import can_mount
from testbed.localrun import Job
from testbed.runtime import Options
from torchdag import pipeline
from torchdag.catalog import catalog

# The process kubelet's own tests stay on it (docs/kubelet.md: what it is for): the real nodes take no pods meanwhile.
pytestmark = [pytest.mark.go, pytest.mark.e2e, pytest.mark.usefixtures("real_nodes_cordoned")]
MAPS = [("/code", "/srv/code"), ("/workspace", "/srv/ws")]
NODE_NAME = "workflows.argoproj.io/node-name"


def renamed_values(example, tmp_path, suffix: str):
    """The example with each node's name made unique (its address kept as it was)."""
    values = yaml.safe_load(example.read_text())
    for node in values["nodes"]:
        node.setdefault("address", node["name"])
        node["name"] = f"{node['name']}-{suffix}"
    path = tmp_path / example.name
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path, [n["name"] for n in values["nodes"]]


def claims(kube: Kube, doc: dict, namespace: str, tmp_path) -> list[str]:
    """Each PersistentVolumeClaim the Workflow mounts, bound to a hostPath PersistentVolume
    of its own (an unbound claim keeps a pod from being scheduled); returns the PVs."""
    volumes = []
    for volume in doc["spec"].get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if not claim:
            continue
        pv = f"{namespace}-{claim}"
        kube.request("POST", "/api/v1/persistentvolumes", body={"metadata": {"name": pv}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
            "hostPath": {"path": str(tmp_path / pv)}, "claimRef": {"namespace": namespace, "name": claim}}})
        kube.request("POST", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", body={
            "metadata": {"name": claim}, "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                                                  "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}})
        volumes.append(pv)
    return volumes


def extended_resources(doc: dict) -> dict:
    names = {key for t in doc["spec"]["templates"]
             for key in (((t.get("container") or {}).get("resources") or {}).get("limits") or {})
             if "/" in key}
    # Big machines: the examples ask for up to a whole 8-card server's cpu and memory.
    return {"cpu": "1000", "memory": "8Ti", **{name: "64" for name in names}}


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_kubelet_under_argo_starts_what_smoke_starts(example, request, tmp_path):
    kubeconfig = kubeconfig_for(request)
    kube = Kube(str(kubeconfig))
    suffix = uuid.uuid4().hex[:5]
    values, nodes = renamed_values(example, tmp_path, suffix)
    rendered = pipeline.run(values)
    doc = next(d for d in yaml.safe_load_all(rendered.text) if d and d.get("kind") == "Workflow")
    namespace = f"kd-{suffix}"
    doc["metadata"]["namespace"] = namespace
    register_nodes(kube, nodes, extended_resources(doc))
    record = tmp_path / "record.jsonl"
    # the examples' image is torchdag's: the kubelet maps its Dockerfile's files, nothing else of the checkout
    kubelet = KubeletProcess(kubeconfig, nodes, tmp_path / "state", "--no-exec", "--record", str(record), "--cpu",
                             "--no-checkout-map", "--torchdag-image", *[f"--map={src}={dst}" for src, dst in MAPS])
    volumes: list[str] = []
    try:
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        volumes = claims(kube, doc, namespace, tmp_path)
        account = doc["spec"].get("serviceAccountName")
        if account:
            kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                         body={"metadata": {"name": account}})
        created = kube.request("POST", f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows", body=doc)
        name = created["metadata"]["name"]

        def ended():
            wf = kube.get_or_none(f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows/{name}")
            phase = ((wf or {}).get("status") or {}).get("phase")
            return wf if phase in ("Succeeded", "Failed", "Error") else None

        wf = wait_for(f"Workflow {name}", ended, timeout=180, kubelet=kubelet)
        assert wf["status"]["phase"] == "Succeeded", json.dumps(wf["status"])[:3000]
    finally:
        kubelet.stop()
        try:
            kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
        except Exception:  # noqa: BLE001
            pass
        delete_nodes(kube, nodes)
        for pv in volumes:
            kube.request("DELETE", f"/api/v1/persistentvolumes/{pv}")

    # Where the kubelet can mount, a path under a volume's mountPath is the volume's, never mapped
    # (the image is hidden there); smoke has no volumes and maps it as asked.
    mounted = {m["mountPath"].rstrip("/") for t in doc["spec"]["templates"]
               for m in (t.get("container") or {}).get("volumeMounts") or []} if can_mount() else set()
    kept = [(src, dst) for src, dst in MAPS if not any(src == m or src.startswith(m + "/") for m in mounted)]
    job = Job(rendered.plan, Options(cpu=True, maps=kept), name, [])
    smoke = {node.task: job.node_task(node, 0) for node in rendered.plan.nodes}
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    assert not [e for e in entries if "error" in e], entries
    seen = set()
    for entry in entries:
        # node-0, or node-0(0).train under node recovery's retry wrapper
        task = entry["annotations"][NODE_NAME].split(".", 1)[1].split("(")[0]
        if entry["container"] != "main" or task not in smoke:
            continue
        seen.add(task)
        expected = smoke[task]
        assert entry["role"] == "process"
        # The helpers come from the Workflow's ConfigMap, mounted over their folder in the pod; smoke,
        # which has no pods, runs the checkout's: the same files
        agents = catalog()["agents"]["path"]
        checkout = str(REPO / "torchdag" / "agents")
        assert entry["argv"] == [word.replace(checkout, agents) for word in expected.argv], task
        pod_only = ("ARGO_", "KUBERNETES_")
        assert [tuple(kv) for kv in entry["env"] if not kv[0].startswith(pod_only)] == expected.env, task
        assert (entry["cwd"], entry["device"]) == (expected.cwd, expected.device)
    assert seen == set(smoke), f"pods recorded for {sorted(seen)}, smoke runs {sorted(smoke)}"
