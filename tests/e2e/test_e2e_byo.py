"""A user's own image and script on real nodes (issue 27): the user's image (python3, torch
and torchrun from PyPI, nothing of torchdag: testbed/images) runs the script from the user's
own folder (/workspace, a hostPath volume). A job with the pod network, `nic: auto`, preflight
and a Volcano gang runs a script in the original hand-written jobs' style
(tests/third_party/original_style.py: hccl hard-coded, tensors to local_rank, docs/byo.md's four
lines, `import torchdag_ddp` found only in the Workflow's helpers) to Succeeded: every helper
the containers run comes from the Workflow's own ConfigMap, since the image has none; a script
that raises on one rank shows its exception in torchrun's root cause in the pod log."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from realnodes_helpers import USER_IMAGE

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.e2e, pytest.mark.long]
AGENTS = "/opt/torchdag/torchdag/agents"
USER_SCRIPT = """
import os
import torch
import torch.distributed as dist

dist.init_process_group(os.environ.get("TORCHDAG_BACKEND", "gloo"))
rank = dist.get_rank()
if os.environ.get("FAIL_RANK") == str(rank):
    raise ValueError(f"rank {rank} fails here")
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"[user] rank {rank}: sum {total.item():g}", flush=True)
dist.destroy_process_group()
"""
BYO = "preflight: {enabled: true}\nscheduling: {gang: volcano, timeout: 240}\n"
ORIGINAL_STYLE = Path(__file__).resolve().parents[1] / "third_party" / "original_style.py"


def byo_job(job, env: str = "", script: str = USER_SCRIPT) -> str:
    """Render and submit the job: the user's image, the script in the user's folder mounted at
    /workspace. Returns the Workflow's name."""
    workspace = job.dir / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text(script)
    values = job.values([{"devices": 1}, {"devices": 1}], [], extra=BYO + env, image=USER_IMAGE,
                        script="/workspace/train.py", network={"mode": "pod", "nic": "auto"})
    body = yaml.safe_load(values.read_text())
    body["volumes"].append({"name": "workspace", "mountPath": "/workspace",
                            "hostPath": {"path": str(workspace), "type": "Directory"}})
    values.write_text(yaml.safe_dump(body, sort_keys=False))
    return job.submit(job.render(values))


def test_own_image_with_gang_pod_network_nic_auto_and_preflight_succeeds(job):
    name = byo_job(job, script=ORIGINAL_STYLE.read_text())
    wf = job.wait_finished(name, timeout=400)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    pods = {p["metadata"]["name"]: p for p in job.pods(name)}
    config_map = job.cluster.get("configmap", f"{name}-agents", "-n", job.namespace)
    (owner,) = config_map["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Workflow", name)
    # Each helper a container ran is in the ConfigMap, mounted where the container runs it
    # (the image has no /opt/torchdag: the container could have found it nowhere else).
    helpers_run = set()
    for pod in pods.values():
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        for container in pod["spec"]["containers"]:
            words = [w.partition("=")[2] if w.startswith("-") else w
                     for w in [*(container.get("command") or []), *(container.get("args") or [])]]
            for word in words:
                if word.startswith(AGENTS + "/"):
                    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == AGENTS)
                    assert volumes[mount["name"]]["configMap"]["name"] == f"{name}-agents", pod["spec"]
                    helpers_run.add(word.rsplit("/", 1)[1])
    assert {"record.py", "preflight.py", "gangwatch.py"} <= helpers_run <= set(config_map["data"]), helpers_run
    logs = "\n".join(job.log(p) for p in pods.values())
    for rank in (0, 1):
        assert f"[original] rank {rank}/2: 20 steps, replicas equal: True" in logs, logs[-3000:]
    assert "preflight: ok: nic auto: eth0" in logs, logs[-3000:]


def test_a_failing_rank_is_readable_in_the_pod_log(job):
    name = byo_job(job, env="env: {FAIL_RANK: \"1\"}\n")
    wf = job.wait_finished(name, timeout=400)
    assert wf["status"]["phase"] == "Failed", job.explain(name)
    logs = [job.log(p) for p in job.pods(name)]
    failing = next(log for log in logs if "Root Cause (first observed failure)" in log and "rank      : 1" in log)
    cause = failing[failing.index("Root Cause (first observed failure)"):]
    assert "ValueError: rank 1 fails here" in cause and "error_file: <N/A>" not in cause, cause
