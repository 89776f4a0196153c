"""Argo's node status offload on the local cluster's PostgreSQL (testbed/cluster/postgres.py):
a Workflow past Argo's 1 MiB, rendered with workflow.nodeStatusOffload, runs through a
whole-job restart to Succeeded on real nodes (the kubelet, containerd and runc), its node
status kept in the database (status.offloadNodeStatusVersion) instead of the object."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from e2e_helpers import MAX_WORKFLOW_SIZE as LIMIT
from e2e_helpers import padded, rank_of

from helpers import REPO
from trainer import checkpoint

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e, pytest.mark.long]

STEPS, EVERY = 600, 200  # a few seconds of training past the restart


def torchdag_status(job, name: str) -> subprocess.CompletedProcess:
    # the timeout catches a hang; how long status takes under load is not checked here
    return subprocess.run([sys.executable, "-m", "torchdag", "status", name, "-n", job.namespace, "--kubeconfig",
                           str(job.cluster.kubeconfig)], cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "ARGO_SERVER": ""})


def test_a_workflow_past_1_mib_offloads_its_node_status_through_a_restart(job):
    nodes = [{"devices": 1, **({"master": True} if i == 0 else {})} for i in range(3)]
    ckpt = job.dir / "ckpt"
    args = ["--type", "example", "--max-steps", str(STEPS), "--log-every", "0", "--checkpoint-dir", str(ckpt),
            "--checkpoint-every", str(EVERY), "--metrics-file", str(job.dir / "metrics.json")]
    values = job.values(nodes, args, failurePolicy={"maxRestarts": 1, "backoffSeconds": 1, "recovery": "job"},
                        workflow={"podGC": "", "nodeStatusOffload": True})
    workflow = next(d for d in yaml.safe_load_all(job.render(values).read_text()) if d)
    # A workflow parameter nothing reads stands for a larger job's spec: the spec just under
    # the limit (Argo's own check, which render.py's guard mirrors), so that the status of
    # its first pods takes the Workflow past 1 MiB even gzipped, and Argo must offload.
    workflow = padded(workflow, LIMIT - 600)
    path = job.dir / "padded.json"
    path.write_text(json.dumps(workflow))
    name = job.submit(path)

    def attempt_pods(attempt: int) -> list[dict]:
        return [p for p in job.pods(name) if rank_of(p) is not None and f"{name}({attempt})." in
                p["metadata"]["annotations"].get("workflows.argoproj.io/node-name", "")]

    # A rank's pod deleted after the first checkpoint: its peers lose it and fail, the attempt
    # fails, and Argo runs the whole job again, which resumes from the checkpoint. The node
    # status is offloaded: the test reads pods.
    job.cluster.wait_for("the first checkpoint", lambda: checkpoint.list_checkpoints(str(ckpt)), timeout=300,
                         every=0.5)
    running = [p for p in attempt_pods(0) if p["status"].get("phase") == "Running"]
    assert job.workflow(name)["status"]["phase"] == "Running" and running, job.explain(name)
    job.cluster.kubectl("delete", "pod", "-n", job.namespace, running[-1]["metadata"]["name"], "--wait=false")
    job.cluster.wait_for("the second attempt", lambda: attempt_pods(1), timeout=300, every=1)
    # torchdag status without Argo's server: one line says the nodes are in Argo's database, and
    # the ranks are read from their pods (by label): each rank that has a pod, and the deleted
    # one's not until its next attempt's pod exists
    assert job.workflow(name)["status"].get("offloadNodeStatusVersion")
    before = {str(rank_of(p)) for p in job.pods(name) if rank_of(p) is not None}
    done = torchdag_status(job, name)
    after = {str(rank_of(p)) for p in job.pods(name) if rank_of(p) is not None}
    assert done.returncode == 0 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "its node status is offloaded to Argo's database (status.offloadNodeStatusVersion" in done.stderr
    shown = {row.split()[0] for row in done.stdout.splitlines()[2:] if row.split()[0].isdigit()}
    assert before and before <= shown <= after, (before, after, done.stdout)
    wf = job.wait_finished(name, timeout=600)
    status = wf["status"]
    assert status["phase"] == "Succeeded", job.explain(name)
    assert status.get("offloadNodeStatusVersion"), "Argo kept the node status in the object"
    assert not status.get("nodes") and not status.get("compressedNodes")
    # Both attempts ran, and the second resumed from a checkpoint to the step count.
    attempts = {p["metadata"]["annotations"]["workflows.argoproj.io/node-name"].split(".")[0]
                for p in job.pods(name) if rank_of(p) is not None}
    assert attempts == {f"{name}(0)", f"{name}(1)"}, attempts
    metrics = json.loads((job.dir / "metrics.json").read_text())
    assert metrics["steps"] == STEPS and metrics["resumed_from_step"] >= EVERY, metrics
