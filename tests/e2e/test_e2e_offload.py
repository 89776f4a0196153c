"""Argo's node status offload on the local cluster's PostgreSQL (testbed/cluster/postgres.py):
a Workflow past Argo's 1 MiB, rendered with workflow.nodeStatusOffload, runs on real nodes
through a whole-job restart to Succeeded, its node status kept in the database
(status.offloadNodeStatusVersion) instead of the object."""

from __future__ import annotations

import json

import pytest
import yaml
from e2e_helpers import rank_of
from realnodes_helpers import USER_IMAGE

pytestmark = [pytest.mark.go, pytest.mark.e2e]
LIMIT = 1048576  # Argo v4.0.5's MAX_WORKFLOW_SIZE
# The first attempt all-reduces until a peer goes (a deleted pod), then fails; the second
# all-reduces once and ends.
SCRIPT = """
import os, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
attempt = int(os.environ.get("TORCHDAG_RESTART") or 0)
steps = 0
while attempt == 0 or steps < 1:
    dist.all_reduce(torch.ones(1))
    steps += 1
    time.sleep(0.5)
print(f"[offload] attempt {attempt}: {steps} steps", flush=True)
"""


def json_size(obj: dict) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def test_a_workflow_past_1_mib_offloads_its_node_status_through_a_restart(job):
    nodes = [{"devices": 1, **({"master": True} if i == 0 else {})} for i in range(3)]
    (job.dir / "train.py").write_text(SCRIPT)
    values = job.values(nodes, [], extra="failurePolicy: {maxRestarts: 1, backoffSeconds: 1, recovery: job}\n",
                        image=USER_IMAGE, script=str(job.dir / "train.py"),
                        workflow={"podGC": "", "nodeStatusOffload": True})
    workflow = next(d for d in yaml.safe_load_all(job.render(values).read_text()) if d)
    # A workflow parameter nothing reads stands for a larger job's spec: the spec just under
    # the limit (Argo's own check, which render.py's guard mirrors), so that the status of
    # its first pods takes the Workflow past 1 MiB even gzipped, and Argo must offload.
    pad = LIMIT - 600 - json_size(workflow) - len('"arguments":{"parameters":[{"name":"pad","value":""}]},')
    workflow["spec"]["arguments"] = {"parameters": [{"name": "pad", "value": "x" * pad}]}
    assert LIMIT - 700 < json_size(workflow) < LIMIT
    path = job.dir / "padded.json"
    path.write_text(json.dumps(workflow))
    name = job.submit(path)

    def running():
        return [p for p in job.pods(name) if rank_of(p) is not None and p["status"].get("phase") == "Running"
                and f"{name}(0)." in p["metadata"]["annotations"].get("workflows.argoproj.io/node-name", "")]

    def second_attempt():
        return any(f"{name}(1)." in p["metadata"]["annotations"].get("workflows.argoproj.io/node-name", "")
                   for p in job.pods(name))

    job.cluster.wait_for("every node's pod Running", lambda: len(running()) == len(nodes), timeout=300, every=1)
    # A pod deleted before Argo has seen it Running is made again (docs/e2e.md): delete a
    # running one until the second attempt starts. The node status is offloaded: pods are read.
    for _ in range(3):
        pods = job.cluster.wait_for("a first-attempt pod Running", running, timeout=120, every=1)
        job.cluster.kubectl("delete", "pod", "-n", job.namespace, pods[-1]["metadata"]["name"], "--wait=false")
        try:
            job.cluster.wait_for("the second attempt", second_attempt, timeout=60, every=1)
            break
        except pytest.fail.Exception:
            continue
    wf = job.wait_finished(name, timeout=600)
    status = wf["status"]
    assert status["phase"] == "Succeeded", job.explain(name)
    assert status.get("offloadNodeStatusVersion"), "Argo kept the node status in the object"
    assert not status.get("nodes") and not status.get("compressedNodes")
    # Both attempts ran: the second attempt's pods exist beside the first's.
    attempts = {p["metadata"]["annotations"]["workflows.argoproj.io/node-name"].split(".")[0]
                for p in job.pods(name) if rank_of(p) is not None}
    assert attempts == {f"{name}(0)", f"{name}(1)"}, attempts
