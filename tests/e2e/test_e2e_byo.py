"""A user's own image and script on the local cluster (issue 27): the image has no torchdag
files (the process kubelet runs with --no-checkout-map, so /opt/torchdag is not the
checkout), the script lives in the image (/workspace, mapped to a folder of the test). A
job with the pod network, `nic: auto`, preflight and a Volcano gang runs a script in the
original hand-written jobs' style (tests/third_party/original_style.py: hccl hard-coded,
tensors to local_rank, docs/byo.md's four lines, `import torchdag_ddp` found only in the
Workflow's helpers) to Succeeded, and every helper the containers run comes from the
Workflow's own ConfigMap; a script that raises on one rank shows its exception in
torchrun's root cause in the pod log."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from e2e_helpers import started_processes

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e, pytest.mark.long]
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
BYO = ("network: {mode: pod, nic: auto}\npreflight: {enabled: true}\nscheduling: {gang: volcano, timeout: 240}\n"
       "workflow: {podGC: \"\"}\n")
USER_IMAGE = "registry.example.com/team/ascend-pytorch:1"
ORIGINAL_STYLE = Path(__file__).resolve().parents[1] / "third_party" / "original_style.py"


def byo_job(job, tmp_path: Path, env: str = "", script: str = USER_SCRIPT) -> str:
    """Render and submit the job; its kubelet maps /workspace only. Returns the Workflow's name."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text(script)
    values = job.values([{"devices": 1}, {"devices": 1}], [], extra=BYO + env)
    body = yaml.safe_load(values.read_text())
    body.update(image=USER_IMAGE, script="/workspace/train.py")
    values.write_text(yaml.safe_dump(body, sort_keys=False))
    job.start(values, image_maps=[("/workspace", str(workspace))])
    return job.submit(job.render(values))


def test_own_image_with_gang_pod_network_nic_auto_and_preflight_succeeds(job, tmp_path):
    name = byo_job(job, tmp_path, script=ORIGINAL_STYLE.read_text())
    wf = job.wait_finished(name, timeout=400)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    pods = {p["metadata"]["name"]: p for p in job.pods(name)}
    helpers_run = []
    for pod_name, argv in started_processes(job.kubelet.text()):
        if pod_name not in pods:
            continue
        spec = pods[pod_name]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts = {m["mountPath"]: m["name"] for c in spec["containers"] for m in c.get("volumeMounts") or []}
        for word in argv:
            path = word.partition("=")[2] if word.startswith("-") else word
            if not path.endswith(".py"):
                continue
            if path.startswith(str(tmp_path / "workspace")):
                continue  # the user's own script, from the image
            assert path.startswith(AGENTS + "/"), (pod_name, argv)
            assert not Path(path).exists(), f"{path} exists on this machine: not only the Workflow's"
            assert volumes[mounts[AGENTS]]["configMap"]["name"] == f"{name}-agents", spec
            helpers_run.append(Path(path).name)
    assert {"record.py", "preflight.py", "gangwatch.py"} <= set(helpers_run), helpers_run
    config_map = job.cluster.get("configmap", f"{name}-agents", "-n", job.namespace)
    (owner,) = config_map["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Workflow", name)
    logs = "\n".join(job.log(p) for p in pods.values())
    for rank in (0, 1):
        assert f"[original] rank {rank}/2: 20 steps, replicas equal: True" in logs, logs[-3000:]
    assert "preflight: ok: NIC lo" in logs or "preflight: ok: nic auto" in logs.lower(), logs[-3000:]


def test_a_failing_rank_is_readable_in_the_pod_log(job, tmp_path):
    name = byo_job(job, tmp_path, env="env: {FAIL_RANK: \"1\"}\n")
    wf = job.wait_finished(name, timeout=400)
    assert wf["status"]["phase"] == "Failed", job.explain(name)
    logs = [job.log(p) for p in job.pods(name)]
    failing = next(log for log in logs if "Root Cause (first observed failure)" in log and "rank      : 1" in log)
    cause = failing[failing.index("Root Cause (first observed failure)"):]
    assert "ValueError: rank 1 fails here" in cause and "error_file: <N/A>" not in cause, cause
