"""The pod network on real nodes (testbed/node): a namespace that enforces Pod Security
baseline, Argo's real controller and executor, pods in network namespaces of their own with
addresses from the CNI bridge plugin, names from the cluster's CoreDNS. A pod-network job
trains to the end there: its headless Service applied by argoexec and owned by the Workflow,
its EndpointSlice naming exactly the run's node pods by their hostnames and pod addresses,
rank 0's name resolved by preflight through CoreDNS. An Ascend pod beside a CPU pod gets
HCCL_IF_IP from the downward API, its own pod address. A host-network job is refused with
Kubernetes' own message."""

from __future__ import annotations

import ipaddress
import json

import pytest
from realnodes_helpers import USER_IMAGE

pytestmark = [pytest.mark.go, pytest.mark.e2e]  # the control plane, Argo and the nodes from Go; torch in the images


def enforce_baseline(job) -> None:
    job.cluster.kubectl("label", "namespace", job.namespace, "pod-security.kubernetes.io/enforce=baseline",
                             "pod-security.kubernetes.io/enforce-version=latest")


def node_pods(job, name: str) -> dict[str, dict]:
    return {p["metadata"]["labels"]["torchdag.io/node-rank"]: p for p in job.pods(name)
            if "torchdag.io/node-rank" in p["metadata"]["labels"]}


def test_a_pod_network_job_trains_to_the_end_where_baseline_is_enforced(job):
    enforce_baseline(job)
    hosts = job.use("cpu-0", "cpu-1", "cpu-2")
    values = job.values([{}, {}, {}], ["--max-steps", "150"], work=False,
                             network={"mode": "pod"}, podSecurity="baseline")
    name = job.submit(job.render(values))

    def slice_of_three():
        slices = job.cluster.get("endpointslices", "-n", job.namespace, "-l",
                                      f"kubernetes.io/service-name={name}")["items"]
        endpoints = [e for s in slices for e in s.get("endpoints") or []]
        return endpoints if len(endpoints) == 3 else None

    endpoints = job.cluster.wait_for("the run's Service to select its three node pods", slice_of_three,
                                          timeout=300, every=2)
    pods = node_pods(job, name)
    assert sorted(e["hostname"] for e in endpoints) == ["node-0", "node-1", "node-2"]
    assert sorted(e["targetRef"]["name"] for e in endpoints) == sorted(p["metadata"]["name"] for p in pods.values())
    subnets = {host.name: ipaddress.ip_network(host.pod_subnet) for host in hosts}
    for rank, pod in pods.items():  # Argo applied the template's podSpecPatch; CNI gave the address
        assert pod["spec"]["hostname"] == f"node-{rank}" and pod["spec"]["subdomain"] == name
        assert "hostNetwork" not in pod["spec"]
        assert ipaddress.ip_address(pod["status"]["podIP"]) in subnets[pod["spec"]["nodeName"]], pod["status"]
    by_pod = {e["targetRef"]["name"]: e["addresses"] for e in endpoints}
    assert all(by_pod[p["metadata"]["name"]] == [p["status"]["podIP"]] for p in pods.values()), by_pod

    wf = job.wait_finished(name, timeout=400)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    service = job.cluster.get("service", name, "-n", job.namespace)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {"torchdag.io/run": name}
    (owner,) = service["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Workflow", name, wf["metadata"]["uid"])
    master = job.log(node_pods(job, name)["0"])
    assert "[trainer] done: 150 steps" in master and "preflight: ok: master name" in master, master[-3000:]


MIXED_SCRIPT = """
import os, socket, struct, fcntl
import torch
import torch.distributed as dist

def address(nic):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", nic.encode()[:15]))  # SIOCGIFADDR
    return socket.inet_ntoa(packed[20:24])

dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"[mixed] rank {rank}: sum {total.item():g}; eth0 {address('eth0')}; "
      f"HCCL_IF_IP {os.environ.get('HCCL_IF_IP', '-')}", flush=True)
dist.destroy_process_group()
"""


def test_an_ascend_pod_beside_a_cpu_pod_takes_its_hccl_address_from_the_downward_api(job, tmp_path):
    """A user's own script (on a volume claim, the one kind of volume baseline lets a pod mount
    from outside) trains over gloo between a pod on an Ascend node (the device plugin's NPU, the
    device group) and a pod on a CPU node; the Ascend pod's HCCL_IF_IP is its own pod address."""
    enforce_baseline(job)
    job.use("a910-8", "cpu-0")
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(MIXED_SCRIPT)
    volume = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": job.namespace},
              "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadOnlyMany"],
                       "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                       "claimRef": {"namespace": job.namespace, "name": "code"},
                       "hostPath": {"path": str(code), "type": "Directory"}}}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "code"},
             "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": job.namespace,
                      "resources": {"requests": {"storage": "1Mi"}}}}
    job.cluster.kubectl("create", "-f", "-", stdin=json.dumps(volume))
    job.cluster.kubectl("create", "-n", job.namespace, "-f", "-", stdin=json.dumps(claim))
    try:
        values = job.values([{"accelerator": "ascend910", "devices": 1}, {"accelerator": "cpu", "nic": "eth0"}],
                                 [], work=False, image=USER_IMAGE, script="/workspace/train.py", backend="gloo",
                                 network={"mode": "pod"}, podSecurity="baseline",
                                 ascend={"mountDriver": False, "setEnvScript": ""},
                                 volumes=[{"name": "code", "mountPath": "/workspace",
                                           "persistentVolumeClaim": {"claimName": "code"}}])
        name = job.submit(job.render(values))
        wf = job.wait_finished(name, timeout=400)
        assert wf["status"]["phase"] == "Succeeded", job.explain(name)
        pods = node_pods(job, name)
        for rank, pod in pods.items():
            log = job.log(pod)
            ip = pod["status"]["podIP"]
            hccl = ip if pod["spec"]["nodeName"] == "a910-8" else "-"
            assert f"[mixed] rank {rank}: sum 3; eth0 {ip}; HCCL_IF_IP {hccl}" in log, log[-3000:]
    finally:
        job.cluster.kubectl("delete", "pv", job.namespace, "--wait=false", check=False)


def test_a_host_network_job_is_refused_in_kubernetes_words(job):
    enforce_baseline(job)
    values = job.values([{}, {}], [], work=False)
    name = job.submit(job.render(values))
    wf = job.wait_finished(name, timeout=120)
    assert wf["status"]["phase"] in ("Failed", "Error")
    # The Workflow's hostNetwork covers every pod it makes: the first, the helpers' ConfigMap
    # task, is refused, and the tasks after it are omitted.
    refused = {n["displayName"]: n.get("message", "") for n in wf["status"]["nodes"].values()
               if n.get("type") == "Pod" and n.get("phase") in ("Failed", "Error")}
    assert "agents" in refused and all('is forbidden: violates PodSecurity "baseline:latest": host namespaces '
                                       '(hostNetwork=true)' in message for message in refused.values()), refused
