"""Rendered CPU jobs under the real Argo controller (issue 17, points 1 and 2): the real
scheduler binds each pod to its pinned host, the process kubelet runs real torchrun jobs,
and the Workflow ends as Argo decides."""

from __future__ import annotations

import json
import re

import pytest
from e2e_helpers import checkpoint_nodes, pinned_host, rank_of

pytestmark = [pytest.mark.go, pytest.mark.torch]


@pytest.mark.parametrize("devices", [[1, 2], [2, 1, 1]], ids=["2-nodes", "3-nodes-uneven"])
def test_a_cpu_job_succeeds_with_every_rank_on_its_pinned_host(job, devices):
    """The master is listed last: rank 0 is whichever node says `master: true`."""
    nodes = [{"address": f"198.18.7.{i + 1}", "nic": "eth7", "devices": n} for i, n in enumerate(devices)]
    nodes[-1]["master"] = True
    metrics = job.dir / "metrics.json"
    values = job.values(nodes, ["--type", "example", "--max-steps", "30", "--log-every", "10",
                                "--checkpoint-dir", str(job.dir / "ckpt-{node_rank}"),
                                "--checkpoint-storage", "node-local", "--metrics-file", str(metrics)])
    job.start(values)
    name = job.submit(job.render(values))
    wf = job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    pods = {rank_of(pod): pod for pod in job.pods(name) if rank_of(pod) is not None}
    assert sorted(pods) == list(range(len(devices)))
    master_host = job.hosts[len(devices) - 1]
    for rank, pod in pods.items():
        # The scheduler bound the pod to the host its affinity pins, and the host of rank r
        # is the r-th node in rank order (the master first, then the others as listed).
        assert pod["spec"]["nodeName"] == pinned_host(pod)
        expected = master_host if rank == 0 else [h for h in job.hosts[:len(devices)] if h != master_host][rank - 1]
        assert pod["spec"]["nodeName"] == expected
        # GROUP_RANK of the node's torchrun is the pod's node rank: its checkpoint says so.
        assert checkpoint_nodes(job.log(pod)) == {rank}, job.log(pod)[-2000:]
        assert pod["status"]["phase"] == "Succeeded"
    result = json.loads(metrics.read_text())
    assert result["world_size"] == sum(devices) and result["steps"] == 30 and result["backend"] == "gloo"
    assert re.search(rf"^\[trainer\] training: world_size {sum(devices)}, backend gloo", job.log(pods[0]), re.M)
