"""The default job as a new user runs it (issue 37): examples/cluster.yaml with the user's own
image (nothing of torchdag in it: the process kubelet maps only the user's /code folder, never
the checkout), submitted to a namespace whose default ServiceAccount has exactly the Roles the
render header names (docs/rbac/), ends Succeeded, with and without failurePolicy.maxRestarts: 1;
every helper its containers run (the schedule watch's included) comes from the Workflow's
ConfigMap. Without those Roles the job fails within a minute, and `torchdag diagnose` names the
refused verb and resource and the Role file that grants them."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from e2e_helpers import job_port, started_processes

from helpers import EXAMPLE, REPO

pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e]
AGENTS = "/opt/torchdag/torchdag/agents"
ORIGINAL_STYLE = Path(__file__).resolve().parents[1] / "third_party" / "original_style.py"


@pytest.fixture
def job(kubelet_job):
    """On the process kubelet, whose --cpu stands in for the NPUs: examples/cluster.yaml is two
    Ascend 310P machines whose script hard-codes hccl, which needs torch_npu and the Ascend driver
    the Workflow mounts from the host (/usr/local/Ascend/driver); no Ascend hardware here. Its
    record of which helper each container started is the process kubelet's log."""
    return kubelet_job


def default_job(job, extra: dict | None = None, file: str = "cluster.yaml") -> Path:
    """examples/cluster.yaml on this test's hosts and namespace, its script (/code/rl/BladeTrain.py,
    in the user's image) a hand-written job's; nothing else changed."""
    values = yaml.safe_load(EXAMPLE.read_text())
    for index, (node, host) in enumerate(zip(values["nodes"], job.hosts)):
        node.update(name=host, address=f"198.18.12.{index + 1}")
    job.used = len(values["nodes"])
    values.update(namespace=job.namespace, port=job_port(), **(extra or {}))  # a port of its own on 127.0.0.1
    code = job.dir / "code" / "rl"
    code.mkdir(parents=True, exist_ok=True)
    (code / "BladeTrain.py").write_text(ORIGINAL_STYLE.read_text())
    path = job.dir / file
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def started(job, values: Path, rbac: bool = True) -> str:
    # --cpu: the example's Ascend 310P nodes train on CPU here (the kubelet says so in its log)
    job.start(values, "--cpu", image_maps=[("/code", str(job.dir / "code"))], rbac=rbac)
    return job.submit(job.render(values))


def seconds(wf: dict, start: str, end: str) -> float:
    times = [datetime.fromisoformat(wf["status"][key].replace("Z", "+00:00")) for key in (start, end)]
    return (times[1] - times[0]).total_seconds()


def test_the_default_values_file_with_a_users_image_succeeds_with_and_without_restarts(job):
    """Both jobs at once on the example's two machines (each on a port of its own)."""
    plain = default_job(job)
    restarted = default_job(job, {"name": "bladetrain-r", "failurePolicy": {"maxRestarts": 1}}, "restarts.yaml")
    first = started(job, plain)
    second = job.submit(job.render(restarted))
    for name, restarts in ((first, 0), (second, 1)):
        check_default_job(job, name, restarts)


def check_default_job(job, name: str, restarts: int) -> None:
    wf = job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    print(f"examples/cluster.yaml, maxRestarts {restarts}: {wf['status']['phase']} in "
          f"{seconds(wf, 'startedAt', 'finishedAt'):.0f} s")
    pods = {p["metadata"]["name"]: p for p in job.pods(name)}
    logs = "\n".join(job.log(p) for p in pods.values())
    for rank in (0, 1):
        assert f"[original] rank {rank}/2: 20 steps, replicas equal: True" in logs, logs[-3000:]
    # Every helper a container ran is the Workflow's, from the ConfigMap mounted at the helpers' folder
    helpers = set()
    for pod_name, argv in started_processes(job.kubelet.text()):
        if pod_name not in pods:
            continue
        spec = pods[pod_name]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts = {m["mountPath"]: m["name"] for c in spec["containers"] for m in c.get("volumeMounts") or []}
        for word in argv:
            if word.startswith(AGENTS + "/"):
                assert volumes[mounts[AGENTS]]["configMap"]["name"] == f"{name}-agents", spec
                assert not Path(word).exists(), f"{word} exists on this machine: not only the Workflow's"
                helpers.add(Path(word).name)
    assert {"record.py", "gangwatch.py"} <= helpers, helpers
    watch = next(p for p in pods.values() if p["metadata"]["labels"].get("torchdag.io/role") == "schedule-watch")
    assert "[gang-watch] every pod scheduled: 2/2" in job.log(watch), job.log(watch)
    node_retries = [n for n in wf["status"]["nodes"].values() if n["type"] == "Retry"]
    assert len(node_retries) == (2 if restarts else 0), node_retries  # a retry wrapper per node


def test_without_its_roles_the_job_fails_within_a_minute_and_diagnose_names_the_role(job):
    name = started(job, default_job(job), rbac=False)
    wf = job.wait_finished(name, timeout=120)
    assert wf["status"]["phase"] in ("Failed", "Error"), job.explain(name)
    took = seconds(wf, "startedAt", "finishedAt")
    assert took < 60, f"{took:.0f} s from start to {wf['status']['phase']}"
    agents = next(n for n in wf["status"]["nodes"].values() if n["displayName"] == "agents")
    assert "configmaps" in agents.get("message", "") and "forbidden" in agents.get("message", ""), agents
    done = subprocess.run([sys.executable, "-m", "torchdag", "diagnose", name, "-n", job.namespace,
                           "--kubeconfig", str(job.cluster.kubeconfig)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    report = done.stdout
    print(f"the job without its Roles: {wf['status']['phase']} {took:.0f} s after its start\n{report}")
    assert done.returncode == 1, report + done.stderr
    cause = next(line for line in report.splitlines() if line.startswith("cause: "))
    fix = next(line for line in report.splitlines() if line.startswith("fix: "))
    assert "[forbidden]" in cause and " configmaps " in cause and "create" in cause, report
    assert f"kubectl apply -n {job.namespace} -f docs/rbac/helpers.yaml" in fix, report
    as_json = json.loads(subprocess.run([sys.executable, "-m", "torchdag", "diagnose", name, "-n", job.namespace,
                                         "--kubeconfig", str(job.cluster.kubeconfig), "--json"], cwd=REPO,
                                        capture_output=True, text=True, timeout=120).stdout)
    assert as_json["first"]["signature"] == "forbidden" and as_json["first"]["role"] == "task", as_json["first"]
