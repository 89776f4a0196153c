"""Rendered jobs on real nodes (testbed/node: the kubelet, containerd and runc; images built
here from packages): what only a real node shows. A user's image with python3 and torch and
nothing of torchdag trains to Succeeded with the helpers the Workflow carries; a helper the
Workflow does not carry fails as a real container fails (`can't open file`); an image without
python3 fails saying so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from realnodes_helpers import NO_PYTHON_IMAGE, USER_IMAGE, events, exec_in

from helpers import REPO

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.e2e, pytest.mark.long]

USER_SCRIPT = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"[user] rank {rank}: sum {total.item():g}; trainer in image: "
      f"{os.path.exists('/opt/torchdag/trainer/train.py')}", flush=True)
dist.destroy_process_group()
"""


def user_job(job, count: int, extra: str = "", image: str = USER_IMAGE) -> str:
    (job.dir / "train.py").write_text(USER_SCRIPT)
    values = job.values([{"devices": 1, **({"master": True} if i == 0 else {})} for i in range(count)], [],
                             extra=extra, image=image, script=str(job.dir / "train.py"))
    return job.submit(job.render(values))


def test_a_users_image_without_torchdag_files_trains_to_succeeded(job):
    name = user_job(job, 2)
    wf = job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    logs = "\n".join(job.log(pod) for pod in job.pods(name))
    for rank in (0, 1):
        assert f"[user] rank {rank}: sum 3; trainer in image: False" in logs, logs[-3000:]


def test_a_helper_the_workflow_does_not_carry_fails_as_in_a_real_container(job):
    """agents.fromWorkflow: false leaves the helpers to the image; a user's image has none, so
    torchrun's workers cannot open the error-recording runner, as on a cluster."""
    name = user_job(job, 1, extra="agents: {fromWorkflow: false}\n")
    wf = job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] == "Failed", job.explain(name)
    (pod,) = [p for p in job.pods(name) if p["metadata"]["labels"].get("torchdag.io/node-rank") == "0"]
    log = job.log(pod)
    assert "can't open file '/opt/torchdag/torchdag/agents/record.py': [Errno 2] No such file or directory" in log, log


def test_an_image_without_python3_fails_saying_what_is_missing(job):
    name = user_job(job, 1, image=NO_PYTHON_IMAGE)
    wf = job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] in ("Failed", "Error"), job.explain(name)
    (pod,) = [p for p in job.pods(name) if p["metadata"]["labels"].get("torchdag.io/node-rank") == "0"]
    (main,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "main"]
    said = job.log(pod) + json.dumps(main["state"])
    assert "torchrun" in said and ("not found" in said or "no such file" in said.lower()), said


DEVICE_SCRIPT = """
import glob, os, stat
(device,) = sorted(glob.glob("/dev/davinci[0-9]*"))
st = os.stat(device)
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(f"[device] {device}: char {stat.S_ISCHR(st.st_mode)}, {st.st_uid}:{st.st_gid}, mode {st.st_mode & 0o777:o}; "
      f"uid {os.getuid()}, groups {os.getgroups()}, CapEff {status['CapEff'].strip()}", flush=True)
with open(device, "r+b", buffering=0) as opened:
    opened.write(b"\\0")
print(f"[device] opened {device} read-write", flush=True)
"""


@pytest.mark.parametrize("group", ["1000", "null"], ids=["with-the-device-group", "without"])
def test_a_root_container_without_capabilities_opens_an_npu_only_through_the_device_group(job, group):
    """The Ascend device plugin hands out /dev/davinciN as Huawei's does (HwHiAiUser 1000:1000,
    mode 0660); the user's image runs as root with every capability dropped (the rendered
    securityContext): ascend.deviceGroup's supplementalGroups open the device, nothing else does."""
    (host,) = job.use("a910-8")
    (job.dir / "train.py").write_text(DEVICE_SCRIPT)
    values = job.values([{"accelerator": "ascend910", "devices": 1, "master": True}], [], image=USER_IMAGE,
                             script=str(job.dir / "train.py"), backend="gloo",
                             extra=f"ascend: {{mountDriver: false, setEnvScript: '', deviceGroup: {group}}}\n")
    name = job.submit(job.render(values))
    wf = job.wait_finished(name, timeout=300)
    (pod,) = [p for p in job.pods(name) if p["metadata"]["labels"].get("torchdag.io/node-rank") == "0"]
    log = job.log(pod)
    assert "char True, 1000:1000, mode 660; uid 0" in log and "CapEff 0000000000000000" in log, log
    if group == "1000":
        assert wf["status"]["phase"] == "Succeeded" and "[device] opened /dev/davinci" in log, job.explain(name)
        assert "groups [0, 1000]" in log, log
    else:
        assert wf["status"]["phase"] == "Failed", job.explain(name)
        assert "PermissionError: [Errno 13] Permission denied: '/dev/davinci" in log, log


CPU_SCRIPT = """
import multiprocessing, os, time

def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass

if __name__ == "__main__":
    print("[cpu] spinning", flush=True)
    while not os.path.exists(os.environ["DONE"]):
        workers = [multiprocessing.Process(target=spin, args=(2,)) for _ in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    print("[cpu] done", flush=True)
"""


def test_a_cpu_limit_is_the_containers_cfs_quota_and_kubectl_exec_reaches_it(job):
    """A node's CPU limit becomes its container's CFS quota: eight busy processes are
    throttled to it. `kubectl exec` (API server -> kubelet -> containerd's streaming server)
    reads the container's cgroup while it runs, and ends it."""
    (job.dir / "train.py").write_text(CPU_SCRIPT)
    values = job.values([{"devices": 1, "master": True, "resources": {"limits": {"cpu": "300m"}}}], [],
                             image=USER_IMAGE, script=str(job.dir / "train.py"),
                             env={"DONE": str(job.dir / "done")})
    name = job.submit(job.render(values))

    def spinning():
        pods = [p for p in job.pods(name) if p["metadata"]["labels"].get("torchdag.io/node-rank") == "0"]
        return pods[0] if pods and "[cpu] spinning" in job.log(pods[0]) else None

    pod = job.cluster.wait_for("the rank to spin", spinning, timeout=300, every=2)
    pod_name = pod["metadata"]["name"]
    read = exec_in(job.cluster, job.namespace, pod_name, "main", "cat",
                   "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")
    assert read.returncode == 0 and read.stdout.split() == ["30000", "100000"], read.stderr + read.stdout

    def throttled():
        stat = exec_in(job.cluster, job.namespace, pod_name, "main", "cat", "/sys/fs/cgroup/cpu/cpu.stat")
        fields = dict(line.split() for line in stat.stdout.splitlines())
        return int(fields.get("nr_throttled", 0)) > 0

    job.cluster.wait_for("the kernel to throttle the container", throttled, timeout=120, every=3)
    assert exec_in(job.cluster, job.namespace, pod_name, "main", "touch",
                   str(job.dir / "done")).returncode == 0
    job.wait_finished(name, timeout=300)
    assert "[cpu] done" in job.log(pod), job.explain(name)


OOM_SCRIPT = """
import torch
held = []
for step in range(1, 200):
    held.append(torch.ones(16 * 1024 * 1024))  # 64 MiB each, touched
    print(f"[oom] holding {64 * step} MiB", flush=True)
"""


def test_a_memory_limit_kills_the_rank_that_passes_it_and_diagnose_names_it(job):
    (job.dir / "train.py").write_text(OOM_SCRIPT)
    values = job.values([{"devices": 1, "master": True, "resources": {"limits": {"memory": "1Gi"}}}], [],
                             image=USER_IMAGE, script=str(job.dir / "train.py"))
    name = job.submit(job.render(values))
    wf = job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] == "Failed", job.explain(name)
    (pod,) = [p for p in job.pods(name) if p["metadata"]["labels"].get("torchdag.io/node-rank") == "0"]
    (main,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "main"]
    terminated = main["state"]["terminated"]
    # cgroup v1 (this machine): the kernel kills the process past the limit, the rank, with
    # SIGKILL (-9, 128+9 = 137 to a shell); torchrun then fails (exit 1). containerd saw the
    # cgroup's OOM event: the container's reason is OOMKilled.
    assert terminated["reason"] == "OOMKilled", job.explain(name)
    log = job.log(pod)
    assert "exitcode  : -9" in log and "Signal 9 (SIGKILL) received by PID" in log, log[-3000:]
    # diagnose names both: the rank's SIGKILL (its log) and the container's OOMKilled (its state)
    found = diagnose(job, name)
    named = {(f["signature"], f["rank"]) for f in [found["first"], *found["others"]]}
    assert {("oom-killed", 0), ("worker-killed", 0)} <= named, json.dumps(found, indent=1)


def diagnose(job, name: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "torchdag", "diagnose", name, "-n", job.namespace,
                           "--kubeconfig", str(job.cluster.kubeconfig), "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_a_missing_host_file_keeps_the_pod_creating_with_failed_mount_and_diagnose_names_it(job):
    """An Ascend job that mounts the driver from the host (ascend.mountDriver, the default): this
    machine has no /usr/local/bin/npu-smi (some hosts have it elsewhere), a `type: File` hostPath,
    so the kubelet never starts the pod (FailedMount; ContainerCreating, or Init:0/1 for a pod
    with an init container, as Argo's are)."""
    job.use("a910-8")
    (job.dir / "train.py").write_text("print('never runs')\n")
    values = job.values([{"accelerator": "ascend910", "devices": 1, "master": True}], [], image=USER_IMAGE,
                             script=str(job.dir / "train.py"), backend="gloo")
    name = job.submit(job.render(values))

    def failed_mount():
        pods = [p for p in job.pods(name) if p["metadata"]["labels"].get("torchdag.io/node-rank") == "0"]
        if not pods:
            return None
        said = [e["message"] for e in events(job.cluster, job.namespace, pods[0]["metadata"]["name"])
                if e.get("reason") == "FailedMount"]
        return (pods[0], said) if any("/usr/local/bin/npu-smi is not a file" in m for m in said) else None

    try:
        pod, said = job.cluster.wait_for("FailedMount for npu-smi", failed_mount, timeout=240, every=2)
        # the kubelet's words (v1.37): "hostPath type check failed, <path> is not a file, ..."
        assert any('MountVolume.SetUp failed for volume "ascend-npu-smi" : hostPath type check failed, '
                   "/usr/local/bin/npu-smi is not a file" in m for m in said), said
        pod = job.cluster.get("pod", pod["metadata"]["name"], "-n", job.namespace)
        # An Argo pod has an init container: kubectl shows Init:0/1 where a pod without one shows
        # ContainerCreating; either way no sandbox is made until every volume mounts.
        (init,) = pod["status"]["initContainerStatuses"]
        sandbox = next(c for c in pod["status"]["conditions"] if c["type"] == "PodReadyToStartContainers")
        assert pod["status"]["phase"] == "Pending" and init["state"]["waiting"]["reason"] == "PodInitializing", pod
        assert sandbox["status"] == "False" and sandbox["message"] == "no pod sandbox exists", sandbox
        shown = job.cluster.kubectl("get", "pod", "-n", job.namespace, pod["metadata"]["name"]).stdout
        assert " Init:0/1 " in shown, shown
        found = diagnose(job, name)
        first = found["first"]
        # the generic failed-mount, or a signature for a host path the host lacks, if diagnose has one
        assert first["signature"] in ("hostpath-missing", "failed-mount") and first["rank"] == 0, found
        assert any(e.startswith("FailedMount: ") and "hostPath type check failed, " in e for e in first["evidence"])
    finally:
        job.cluster.kubectl("patch", "workflow", name, "-n", job.namespace, "--type", "merge",
                                 "-p", '{"spec":{"shutdown":"Terminate"}}', check=False)
