"""The pod network on real nodes (issue 43): the kubelet, containerd and runc, each pod on the
nodes' CNI bridge with an address of its own, the cluster's CoreDNS, in a namespace that
enforces Pod Security baseline, under Argo's real controller and executor. A pod-network job
trains to the end there, its headless Service applied by argoexec and owned by the Workflow,
its EndpointSlice (the real controller's) naming exactly the run's node pods by their
hostnames, the master found by its DNS name; a host-network job is refused with Kubernetes'
own message. (A job mixing Ascend and CPU nodes on the pod network stays on the process
kubelet, tests/e2e/test_network_cluster.py: its Ascend rank needs torch_npu and an NPU.)"""

from __future__ import annotations

import pytest
from e2e_helpers import rank_of

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e, pytest.mark.long]


def enforce_baseline(job) -> None:
    job.cluster.kubectl("label", "namespace", job.namespace, "--overwrite",
                        "pod-security.kubernetes.io/enforce=baseline",
                        "pod-security.kubernetes.io/enforce-version=latest")


def test_a_pod_network_job_trains_to_the_end_where_baseline_is_enforced(job):
    enforce_baseline(job)
    # no hostPath volume: baseline refuses it
    values = job.values([{}, {}, {}], ["--max-steps", "150"], work=False, name="podnet",
                        network={"mode": "pod"}, podSecurity="baseline")
    name = job.submit(job.render(values))

    def slice_of_three():
        slices = job.cluster.get("endpointslices", "-n", job.namespace, "-l",
                                 f"kubernetes.io/service-name={name}")["items"]
        endpoints = [e for s in slices for e in s.get("endpoints") or []]
        return endpoints if len(endpoints) == 3 else None

    endpoints = job.cluster.wait_for("the run's Service to select its three node pods", slice_of_three,
                                     timeout=240, every=1)
    pods = {p["metadata"]["name"]: p for p in job.cluster.get(
        "pods", "-n", job.namespace, "-l", f"torchdag.io/run={name}")["items"]}
    assert sorted(e["hostname"] for e in endpoints) == ["node-0", "node-1", "node-2"]
    assert sorted(e["targetRef"]["name"] for e in endpoints) == sorted(pods)
    for pod in pods.values():  # Argo applied the template's podSpecPatch
        rank = pod["metadata"]["labels"]["torchdag.io/node-rank"]
        assert pod["spec"]["hostname"] == f"node-{rank}" and pod["spec"]["subdomain"] == name
        assert "hostNetwork" not in pod["spec"]
        assert pod["status"]["podIP"] != pod["status"]["hostIP"], pod["status"]  # an address of its own

    wf = job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    service = job.cluster.get("service", name, "-n", job.namespace)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {"torchdag.io/run": name}
    (owner,) = service["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Workflow", name, wf["metadata"]["uid"])
    logs = {rank_of(p): job.log(p) for p in pods.values()}
    master = logs[0]
    assert "[trainer] done: 150 steps" in master, master[-3000:]
    # every rank found the master by its name, through the cluster's DNS
    assert all("preflight: ok: master name" in log for log in logs.values()), logs


def test_a_host_network_job_is_refused_in_kubernetes_words(job):
    enforce_baseline(job)
    values = job.values([{}, {}], [], work=False, name="hostnet")
    name = job.submit(job.render(values))
    wf = job.wait_finished(name, timeout=120)
    assert wf["status"]["phase"] in ("Failed", "Error")
    # The Workflow's hostNetwork covers every pod it makes: the first, the helpers' ConfigMap
    # task, is refused, and the tasks after it are omitted.
    refused = {n["displayName"]: n.get("message", "") for n in wf["status"]["nodes"].values()
               if n.get("type") == "Pod" and n.get("phase") in ("Failed", "Error")}
    assert "agents" in refused and all('is forbidden: violates PodSecurity "baseline:latest": host namespaces '
                                       '(hostNetwork=true)' in message for message in refused.values()), refused
