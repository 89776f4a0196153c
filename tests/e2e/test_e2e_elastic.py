"""Node recovery and elastic membership under the real Argo controller (issue 29): three real
CPU nodes (kubelet, containerd, runc) running torchdag's image, failurePolicy.maxRestarts 2
(recovery node, the default), checkpoints every 200 steps on a folder every node mounts. A
node's pod is deleted after the first checkpoint: only that node is retried, the others keep
their pods, every rank resumes from a checkpoint and the Workflow ends Succeeded at its step
count. With elastic.minNodes 2 a node whose host goes away (its kubelet, containerd and
containers stop, its Node is deleted, as a cloud controller does for a vanished machine) is
left behind and the other two finish alone."""

from __future__ import annotations

import json
import re
import time

import pytest
from e2e_helpers import rank_of

from helpers import REPO  # noqa: F401 - puts the repository on sys.path (trainer.*)
from trainer import checkpoint

pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e]

STEPS, EVERY = 600, 200  # a few seconds of training past the deletion: the module stays short
ROUND = re.compile(r"^\[trainer\] node \d+: rank \d+ of (\d+), worker restart (\d+), resumed from step (\w+)$", re.M)


def _start(job, extra: str = "") -> str:
    nodes = [{"devices": 1, **({"master": True} if i == 0 else {})} for i in range(3)]
    args = ["--type", "example", "--max-steps", str(STEPS), "--log-every", "0",
            "--checkpoint-dir", str(job.dir / "ckpt"), "--checkpoint-every", str(EVERY),
            "--metrics-file", str(job.dir / "metrics.json")]
    values = job.values(nodes, args, extra="failurePolicy: {maxRestarts: 2, backoffSeconds: 1}\n"
                                           + extra)
    name = job.submit(job.render(values))
    job.cluster.wait_for("the first checkpoint", lambda: checkpoint.list_checkpoints(str(job.dir / "ckpt")),
                         timeout=240, every=0.2)
    assert job.workflow(name)["status"]["phase"] == "Running", "the job ended before a pod could be deleted"
    return name


def _running(job, name) -> dict[int, dict]:
    return {rank_of(p): p for p in job.pods(name) if rank_of(p) is not None and p["status"].get("phase") == "Running"}


def _delete(job, pod: dict) -> float:
    job.cluster.kubectl("delete", "pod", "-n", job.namespace, pod["metadata"]["name"], "--wait=false")
    return time.monotonic()


def _finished(job, name) -> dict:
    wf = job.wait_finished(name, timeout=400)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    metrics = json.loads((job.dir / "metrics.json").read_text())
    assert metrics["steps"] == STEPS and metrics["resumed_from_step"] >= EVERY, metrics
    return metrics


def test_a_deleted_nodes_pod_is_retried_alone_and_the_others_keep_theirs(job):
    name = _start(job)
    before = _running(job, name)
    assert sorted(before) == [0, 1, 2]
    deleted = _delete(job, before[1])

    def training_again():
        return all(any(int(m[1]) >= 1 for m in ROUND.findall(job.log(before[rank]))) for rank in (0, 2))

    job.cluster.wait_for("the survivors to train again", training_again, timeout=120, every=0.5)
    took = time.monotonic() - deleted
    metrics = _finished(job, name)
    assert took < 90, f"training again {took:.0f} s after the deletion"
    pods = [p for p in job.pods(name) if rank_of(p) is not None]
    for rank in (0, 2):  # never re-created: the one pod of each is the one from before
        assert [p["metadata"]["uid"] for p in pods if rank_of(p) == rank] == [before[rank]["metadata"]["uid"]]
    final = {rank: max((p for p in pods if rank_of(p) == rank), key=lambda p: p["metadata"]["creationTimestamp"])
             for rank in range(3)}
    assert final[1]["metadata"]["uid"] != before[1]["metadata"]["uid"]
    for rank, pod in final.items():  # each rank's last round started from a checkpoint
        rounds = ROUND.findall(job.log(pod))
        assert rounds and rounds[-1][2].isdigit() and int(rounds[-1][2]) >= EVERY, (rank, rounds)
    assert metrics["world_size"] == 3
    print(f"node recovery: training again {took:.1f} s after the pod's deletion")


def test_the_masters_pod_deleted_still_ends_succeeded_at_its_step_count(job):
    name = _start(job)
    _delete(job, _running(job, name)[0])
    assert _finished(job, name)["world_size"] == 3


def test_two_of_three_go_on_when_a_hosts_node_is_gone(job):
    name = _start(job, "elastic: {minNodes: 2, rejoinSeconds: 10}\n")
    lost = _running(job, name)[2]
    job.nodes.stop(lost["spec"]["nodeName"])
    job.cluster.kubectl("delete", "node", lost["spec"]["nodeName"], "--wait=false")
    assert _finished(job, name)["world_size"] == 2
