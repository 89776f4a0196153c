"""Node recovery and elastic membership under the real Argo controller (issue 29): three real
CPU nodes (the kubelet, containerd and runc) with real torchrun processes,
failurePolicy.maxRestarts 2 (recovery node, the default), checkpoints every 200 steps. A node's
pod is deleted after the first checkpoint: only that node is retried, the others keep their
pods, every rank resumes from a checkpoint and the Workflow ends Succeeded at its step count.
With elastic.minNodes 2 a node whose host is gone is left behind and the other two finish
alone, in a gang whose minimum is those two; without elastic members a host gone for good stops
the job, naming the host (issue 37).

The deleted pods' tests run on real nodes (the kubelet, containerd and runc). The lost hosts'
tests stay on the process kubelet: there a host's loss is its Node deleted and its pod deleted
through the kubelet, which reports the pod Failed, so Argo retries the node. On real nodes a
machine goes without a word: its node stopped and its Node deleted, the pod garbage collector
deletes the orphan pod, Argo re-creates the pod in the same attempt (docs/e2e.md, "a deleted
pod"), and the new pod, pinned to the gone host, stays Pending. The host check runs only
before a retry, so neither test's verdict comes (run on 2026-12-07: the job still Running after
240 s). That is a defect of node recovery, open in issue 43, not of the test."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime

import pytest
from e2e_helpers import rank_of

from helpers import REPO  # noqa: F401 - puts the repository on sys.path (trainer.*)
from trainer import checkpoint

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e, pytest.mark.long]

STEPS, EVERY = 600, 200  # a few seconds of training past the deletion: the module stays short
ROUND = re.compile(r"^\[trainer\] node \d+: rank \d+ of (\d+), worker restart (\d+), resumed from step (\w+)$", re.M)


def _start(job, extra: str = "", subnet: int = 0) -> str:
    """Three nodes, node 0 the master. On the process kubelet (`subnet`: its own addresses,
    198.18.SUBNET.x, and NIC) the job's kubelet starts here; real nodes run already."""
    nodes = [{"devices": 1, **({"master": True} if i == 0 else {})} for i in range(3)]
    if subnet:
        for i, node in enumerate(nodes):
            node.update(address=f"198.18.{subnet}.{i + 1}", nic=f"eth{subnet}")
        extra = "workflow: {podGC: ''}\n" + extra  # NodeJob.values sets it itself
    args = ["--type", "example", "--max-steps", str(STEPS), "--log-every", "0",
            "--checkpoint-dir", str(job.dir / "ckpt"), "--checkpoint-every", str(EVERY),
            "--metrics-file", str(job.dir / "metrics.json")]
    values = job.values(nodes, args, extra="failurePolicy: {maxRestarts: 2, backoffSeconds: 1}\n" + extra)
    if subnet:
        job.start(values)
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


def _lose_host(job, pod: dict) -> tuple[str, float]:
    """The pod's host is gone (its Node deleted) and the pod with it (deleted through the
    process kubelet, which reports it Failed). Returns the host and the time of the loss."""
    host = pod["spec"]["nodeName"]
    job.cluster.kubectl("delete", "node", host, "--wait=false")
    gone = time.time()
    _delete(job, pod)
    return host, gone


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


def _lost_member(wf: dict, rank: int) -> tuple[dict, list[dict]]:
    """The retry node of a node task and its host checks (Argo's status nodes)."""
    nodes = wf["status"]["nodes"]
    retry = next(n for n in nodes.values() if n["type"] == "Retry" and n["displayName"] == f"node-{rank}")
    checks = [n for n in nodes.values() if n["displayName"] == "host-check" and n["type"] == "Pod"
              and n["name"].startswith(retry["name"] + "(")]
    return retry, checks


def _finished_at(node: dict) -> float:
    return datetime.fromisoformat(node["finishedAt"].replace("Z", "+00:00")).timestamp()


def test_two_of_three_in_a_gang_go_on_when_a_hosts_node_is_gone(kubelet_job):
    """gang × elastic, node recovery × a vanished host: the gang's minimum is the two machines
    the job may run with, the lost member's retries each end within elastic.rejoinSeconds, their
    host check naming the host, and the job ends Succeeded without it (issue 37)."""
    job, rejoin, restarts = kubelet_job, 10, 2
    name = _start(job, subnet=23,
                  extra=f"elastic: {{minNodes: 2, rejoinSeconds: {rejoin}}}\nscheduling: {{gang: volcano}}\n")
    group = job.cluster.get("podgroups.scheduling.volcano.sh", name, "-n", job.namespace)
    assert group["spec"]["minMember"] == 2, group["spec"]
    host, gone = _lose_host(job, _running(job, name)[2])
    assert _finished(job, name)["world_size"] == 2
    retry, checks = _lost_member(job.workflow(name), 2)
    assert retry["phase"] == "Failed" and len(retry["children"]) == restarts + 1, retry  # no attempt after the last
    assert len(checks) == restarts and all(f"node-rank 2 on host {host}" in c["message"] for c in checks), checks
    # each retry: its backoff (1 s, then 2 s), rejoinSeconds, the watch's 5-s polls: ~35 s; a third of a
    # minute's margin per attempt for a loaded machine. Before, a retried pod sat Pending for ten minutes.
    bound = sum(2 ** k + rejoin + 5 + 20 for k in range(restarts))
    assert _finished_at(retry) - gone < bound, f"the lost member ended {_finished_at(retry) - gone:.0f} s after"
    print(f"elastic member on a vanished host: its task ended {_finished_at(retry) - gone:.0f} s after the loss "
          f"(bound {bound} s); host checks: {[c['message'] for c in checks]}")


def test_a_required_members_gone_host_stops_the_job_naming_it(kubelet_job):
    """node recovery × a vanished host, no elastic members: the retried pod is not scheduled
    within scheduling.timeout, and its host check stops the job, naming the host (issue 37)."""
    job, timeout = kubelet_job, 15
    name = _start(job, subnet=24, extra=f"scheduling: {{timeout: {timeout}}}\n")
    host, gone = _lose_host(job, _running(job, name)[2])
    wf = job.wait_finished(name, timeout=240)
    assert wf["status"]["phase"] == "Failed", job.explain(name)
    # The verdict is the host check's log and termination message (its node's message, unless the
    # controller acted on the stop before it saw that pod end: then Argo's "workflow shutdown", docs/gang.md)
    (check,) = [p for p in job.pods(name) if p["metadata"]["labels"].get("torchdag.io/role") == "host-check"]
    verdict = f"not scheduled within {timeout} s: node-rank 2 on host {host}"
    assert verdict in job.log(check), job.log(check)
    assert f"stopped workflow {name}: not scheduled within {timeout} s" in job.log(check)
    ended = datetime.fromisoformat(wf["status"]["finishedAt"].replace("Z", "+00:00")).timestamp()
    assert ended - gone < 1 + timeout + 5 + 40, f"the job ended {ended - gone:.0f} s after the host was gone"
    print(f"required member on a vanished host: the job ended {ended - gone:.0f} s after the loss: "
          f"{wf['status'].get('message')}; host check: {verdict} ...")
