"""`torchdag check FILE --cluster` against the local cluster (issue 39): a job the cluster can run
passes with one `ok` line a subject, and each way it cannot run is one `error` line and exit 1,
one case a finding, each case the healthy job with one thing changed. Nothing runs: the check
only reads, so the cases share one namespace, three registered hosts and a few seconds each.
The full CRD's cap is named in the healthy job's line; a Workflow past it render.py refuses
(rule templates-too-many), so its error line is tests/diagnose/test_clustercheck.py's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from e2e_helpers import unique

from helpers import REPO

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.e2e, pytest.mark.long]
LIMIT = 1048576


@pytest.fixture(scope="module")
def place(local_cluster, tmp_path_factory):
    """A namespace whose default ServiceAccount has the Roles the docs give a default job
    (docs/rbac/job.yaml, helpers.yaml) and a ServiceAccount `bare` with only the first; two hosts
    with 8 Ascend 910 NPUs each, one with 4; and a namespace holding a controller configmap
    without a database (`argo-plain`: a controller that does not offload)."""
    folder = tmp_path_factory.mktemp("check")
    namespace, plain = unique("check"), unique("argo-plain")
    hosts = [unique("npu") for _ in range(3)]
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}} for name in (namespace, plain)]
    objects += [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bare", "namespace": namespace}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "workflow-controller-configmap",
                                                                       "namespace": plain},
                 "data": {"metricsConfig": "enabled: false\n"}}]
    local_cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    for role in ("job", "helpers"):  # as docs/rbac.md tells the user: kubectl apply -n NAMESPACE -f FILE
        local_cluster.kubectl("apply", "-n", namespace, "-f", str(REPO / "docs" / "rbac" / f"{role}.yaml"))
    local_cluster.kubectl("create", "rolebinding", "bare-job", "-n", namespace, "--role=torchdag-job",
                          f"--serviceaccount={namespace}:bare")
    for devices, names in ((8, hosts[:2]), (4, hosts[2:])):
        path = folder / f"hosts-{devices}.yaml"
        path.write_text(yaml.safe_dump(values({"nodes": [{"name": n, "accelerator": "ascend910", "devices": devices}
                                                          for n in names]})))
        done = local_cluster.command("register", str(path))
        assert done.returncode == 0, done.stdout + done.stderr
    yield {"cluster": local_cluster, "dir": folder, "namespace": namespace, "plain": plain, "hosts": hosts}
    local_cluster.kubectl("delete", "namespace", namespace, plain, "--wait=false", check=False)
    local_cluster.kubectl("delete", "node", *hosts, "--ignore-not-found", check=False)


def values(extra: dict) -> dict:
    return {"name": "check", "image": "registry.example.com/torchdag/trainer:0.1.0", "script": "/code/train.py",
            **extra}


def check(place, extra: dict, *options: str) -> tuple[int, list[str]]:
    """torchdag check --cluster on the healthy job (both 8-NPU hosts, the namespace's default
    ServiceAccount) with `extra` over it: (exit status, lines)."""
    body = values({"namespace": place["namespace"],
                   "nodes": [{"name": host, "accelerator": "ascend910", "devices": 8} for host in place["hosts"][:2]],
                   **extra})
    path = place["dir"] / f"{unique('values')}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "torchdag", "check", str(path), "--cluster", "--kubeconfig",
                           str(place["cluster"].kubeconfig), *options], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert not done.stderr.strip() or done.returncode == 2, done.stderr
    return done.returncode, done.stdout.splitlines()


def errors(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("error: ")]


def test_a_job_the_cluster_can_run_passes_with_a_line_a_subject(place):
    status, lines = check(place, {})
    assert status == 0 and not errors(lines), lines
    assert "ok: Argo's full CRDs (workflows.argoproj.io) cap spec.templates at 200 and each dag.tasks at 200 " \
           "items: this Workflow has " in "\n".join(lines)
    assert any(line.startswith("ok: node status offload: not needed (spec and status come to about ") for line in lines)
    assert "ok: 2 host(s): each a Ready Node with the accelerators the job asks, no taint it does not tolerate" in lines
    assert any(line.startswith(f"ok: ServiceAccount {place['namespace']}/default: every right the job's features "
                               "need (") for line in lines), lines


def test_a_host_without_a_node(place):
    nodes = [{"name": host, "accelerator": "ascend910", "devices": 8} for host in (*place["hosts"][:2], "gone-host")]
    status, lines = check(place, {"nodes": nodes})
    assert status == 1 and errors(lines) == [
        "error: host gone-host (node rank 2): no Node with kubernetes.io/hostname=gone-host"], lines


def test_a_host_with_too_few_npus(place):
    short = place["hosts"][2]
    nodes = [{"name": host, "accelerator": "ascend910", "devices": 8} for host in (place["hosts"][0], short)]
    status, lines = check(place, {"nodes": nodes})
    assert status == 1 and errors(lines) == [f"error: host {short} (node rank 1): Node {short} has 4 "
                                             "huawei.com/Ascend910 allocatable; the job asks 8"], lines


def test_a_taint_the_job_does_not_tolerate_and_a_cordoned_host(place):
    host = place["hosts"][1]
    cluster = place["cluster"]
    cluster.kubectl("taint", "node", host, "dedicated=infer:NoSchedule")
    try:
        status, lines = check(place, {})
        assert status == 1 and errors(lines) == [f"error: host {host} (node rank 1): Node {host} has taint "
                                                 "dedicated=infer:NoSchedule, which the job does not tolerate "
                                                 "(tolerations)"], lines
        tolerated = {"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}
        assert check(place, tolerated)[0] == 0
        cluster.kubectl("cordon", host)
        status, lines = check(place, tolerated)
        assert status == 1 and errors(lines) == [
            f"error: host {host} (node rank 1): Node {host} is cordoned (spec.unschedulable)"], lines
    finally:
        cluster.kubectl("taint", "node", host, "dedicated-", check=False)
        cluster.kubectl("uncordon", host, check=False)


def test_a_job_that_needs_offload_on_a_controller_without_it(place):
    """1,500 x 8 under node recovery: its status does not fit beside its spec (the master's loss
    would retry every node), so it needs the controller's node status offload, which the local
    controller has and `argo-plain`'s lacks. So large a job also hears about the controller's pace."""
    nodes = [{"name": f"npu-{i:04d}", "address": f"10.{i // 250}.{i % 250}.1", "accelerator": "ascend910",
              "devices": 8} for i in range(1500)]
    extra = {"nodes": nodes, "failurePolicy": {"maxRestarts": 1}, "workflow": {"nodeStatusOffload": True}}
    status, lines = check(place, extra, "--argo-namespace", place["plain"])
    assert status == 1
    assert f"error: the job needs node status offload (its status would not fit beside the spec in {LIMIT} bytes; " \
           "values set workflow.nodeStatusOffload), but " \
           f"{place['plain']}/workflow-controller-configmap has no persistence.nodeStatusOffLoad: true: the " \
           f"Workflow would end in Error once its status passes {LIMIT} bytes" in lines, lines
    assert any(line.startswith(f"warning: 1500 machines: the controller has no resourceRateLimit ({place['plain']}/"
                               "workflow-controller-configmap)") for line in lines), lines
    status, lines = check(place, extra)
    assert "ok: the job needs node status offload and the controller has it (argo/workflow-controller-configmap: " \
           "persistence.nodeStatusOffLoad: true)" in lines, lines


def test_a_serviceaccount_without_the_configmaps_right(place):
    """`bare` has docs/rbac/job.yaml's Role but not helpers.yaml's: the helpers' ConfigMap task would be refused."""
    status, lines = check(place, {"serviceAccountName": "bare"})
    namespace = place["namespace"]
    assert status == 1 and errors(lines) == [
        f"error: ServiceAccount {namespace}/bare may not get, create, patch configmaps in namespace {namespace}; "
        "needed for agents.fromWorkflow (the default): the `agents` task applies the helpers' ConfigMap before any "
        f"pod that runs one: kubectl apply -n {namespace} -f docs/rbac/helpers.yaml (docs/rbac.md)"], lines
    assert check(place, {"serviceAccountName": "bare", "agents": {"fromWorkflow": False}})[0] == 0


def test_a_gang_without_its_scheduler(place):
    """The local cluster stores Volcano's PodGroups (its CRD) but runs no Volcano. The gang's
    Role applied as docs/rbac.md says, only the scheduler is missing."""
    place["cluster"].kubectl("apply", "-n", place["namespace"], "-f", str(REPO / "docs" / "rbac" / "gang-volcano.yaml"))
    status, lines = check(place, {"scheduling": {"gang": "volcano"}})
    assert status == 1 and errors(lines) == [
        "error: scheduling.gang volcano: no running volcano scheduler (Deployment volcano-system/volcano-scheduler: "
        "not found)"], lines
