"""Rendered CPU jobs under the real Argo controller (issue 17, points 1 and 2): the real
scheduler binds each pod to its pinned host, real nodes (the kubelet, containerd and runc)
run real torchrun jobs in torchdag's image, and the Workflow ends as Argo decides. The last
test is docs/kubelet.md's own steps, which start the process kubelet."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from e2e_helpers import checkpoint_nodes, pinned_host, rank_of

from testbed.cluster import procs
from testbed.cluster.layout import Layout
from trainer import checkpoint

pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e]


@pytest.mark.long  # real nodes: the long tier, as every module on them
@pytest.mark.parametrize("devices", [[1, 2], [2, 1, 1]], ids=["2-nodes", "3-nodes-uneven"])
def test_a_cpu_job_succeeds_with_every_rank_on_its_pinned_host(job, devices):
    """The master is listed last: rank 0 is whichever node says `master: true`."""
    nodes = [{"address": f"198.18.7.{i + 1}", "nic": "eth7", "devices": n} for i, n in enumerate(devices)]
    nodes[-1]["master"] = True
    metrics = job.dir / "metrics.json"
    values = job.values(nodes, ["--type", "example", "--max-steps", "30", "--log-every", "10",
                                "--checkpoint-dir", str(job.dir / "ckpt-{node_rank}"),
                                "--checkpoint-storage", "node-local", "--metrics-file", str(metrics)])
    name = job.submit(job.render(values))
    wf = job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    pods = {rank_of(pod): pod for pod in job.pods(name) if rank_of(pod) is not None}
    assert sorted(pods) == list(range(len(devices)))
    hosts = [host.name for host in job.hosts[:len(devices)]]
    master_host = hosts[-1]
    for rank, pod in pods.items():
        # The scheduler bound the pod to the host its affinity pins, and the host of rank r
        # is the r-th node in rank order (the master first, then the others as listed).
        assert pod["spec"]["nodeName"] == pinned_host(pod)
        expected = master_host if rank == 0 else [h for h in hosts if h != master_host][rank - 1]
        assert pod["spec"]["nodeName"] == expected
        # GROUP_RANK of the node's torchrun is the pod's node rank: its checkpoint says so.
        assert checkpoint_nodes(job.log(pod)) == {rank}, job.log(pod)[-2000:]
        assert pod["status"]["phase"] == "Succeeded"
    result = json.loads(metrics.read_text())
    assert result["world_size"] == sum(devices) and result["steps"] == 30 and result["backend"] == "gloo"
    assert re.search(rf"^\[trainer\] training: world_size {sum(devices)}, backend gloo", job.log(pods[0]), re.M)


@pytest.mark.long
def test_a_deleted_pod_restarts_the_whole_job_which_resumes_from_its_checkpoint(job):
    """failurePolicy.maxRestarts: deleting one node's pod after the first checkpoint makes
    Argo run the DAG's second attempt; every node resumes from the checkpoint and the job
    ends Succeeded at the exact step count."""
    nodes = [{"address": "198.18.8.1", "nic": "eth8", "devices": 1, "master": True},
             {"address": "198.18.8.2", "nic": "eth8", "devices": 1}]
    metrics = job.dir / "metrics.json"
    # A few seconds of training past the first checkpoint, as in test_e2e_elastic.py: enough for
    # the deletion to meet a running job, and the second attempt only trains what is left.
    steps, every = 600, 200
    values = job.values(nodes, ["--type", "example", "--max-steps", str(steps), "--log-every", "100",
                                "--checkpoint-dir", str(job.dir / "ckpt"), "--checkpoint-every", str(every),
                                "--metrics-file", str(metrics)],
                        extra="failurePolicy: {maxRestarts: 2, backoffSeconds: 1, recovery: job}\n")
    name = job.submit(job.render(values))
    job.cluster.wait_for("the first checkpoint", lambda: checkpoint.list_checkpoints(str(job.dir / "ckpt")),
                         timeout=240, every=0.2)
    pods = {rank_of(p): p for p in job.pods(name)}
    assert job.workflow(name)["status"]["phase"] == "Running", "the job ended before a pod could be deleted"
    job.cluster.kubectl("delete", "pod", "-n", job.namespace, pods[1]["metadata"]["name"], "--wait=false")
    wf = job.wait_finished(name, timeout=600)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    attempts = {n["name"] for n in wf["status"]["nodes"].values() if n["type"] == "DAG"}
    assert attempts == {f"{name}(0)", f"{name}(1)"}, attempts
    result = json.loads(metrics.read_text())
    assert result["restart"] == 1 and result["steps"] == steps, result
    # From the newest checkpoint: every 200 steps, or the step the ranks agreed on when the
    # deleted pod's SIGTERM reached them (the trainer saves on a stop signal).
    assert result["resumed_from_step"] >= every, result
    second = [p for p in job.pods(name) if rank_of(p) == 0 and f"{name}(1)." in
              p["metadata"]["annotations"]["workflows.argoproj.io/node-name"]]
    assert second and re.search(r"^\[trainer\] resumed from checkpoint .* at step \d+$", job.log(second[0]), re.M)


def test_the_users_path_cluster_nodes_then_cluster_kubelet_then_kubectl_create(kubelet_job):
    """docs/kubelet.md's steps: `register`, `cluster-kubelet` (the kubelet in the background
    for every registered Node), render, `kubectl create`: the job ends Succeeded. The process
    kubelet is what those steps start, so this test stays on it."""
    job = kubelet_job
    nodes = [{"address": "198.18.11.1", "nic": "eth11", "devices": 2, "master": True},
             {"address": "198.18.11.2", "nic": "eth11", "devices": 1}]
    values = job.values(nodes, ["--type", "example", "--max-steps", "20", "--log-every", "10"])
    assert job.cluster.command("register", str(values)).returncode == 0
    job.grant(values)
    started = job.cluster.command("kubelet", "--cpu", "--no-checkout-map", "--torchdag-image")
    assert started.returncode == 0 and "process kubelet started" in started.stdout, started.stdout + started.stderr
    try:
        again = job.cluster.command("kubelet", "--cpu")
        assert "the process kubelet is running already" in again.stdout
        name = job.submit(job.render(values))
        wf = job.wait_finished(name, timeout=300)
        assert wf["status"]["phase"] == "Succeeded", job.explain(name) + (job.cluster.dir / "logs" /
                                                                          "kubelet.log").read_text()[-3000:]
    finally:
        assert procs.stop(Layout.of(str(job.cluster.dir)), "kubelet", Path(sys.executable), grace=30) == "terminated"
