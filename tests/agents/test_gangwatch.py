"""torchdag/agents/gangwatch.py: the real script against a fake Kubernetes API on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse

import pytest
from gangwatch_helpers import (
    GANGWATCH,
    NS,
    PODGROUP,
    PODGROUP_PATH,
    PODS_PATH,
    RUNNING_WF,
    SELECTOR,
    UNSCHEDULABLE,
    WF,
    WF_PATH,
    assert_clean,
    pod,
    pod_list,
    run_watch,
    status,
    task_pod,
    until_sigterm,
    watch_argv,
    watch_env,
)

from trainer_helpers import free_port


def test_all_placed_at_once(api, tmp_path):
    """Each of the three signs of placement counts; nothing is stopped."""
    api.pods = [pod_list(pod(0, "condition"), pod(1, "running"), pod(2, "nodename"))]
    r = run_watch(api.url, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[gang-watch] gang placed: 3/3 pods scheduled after 0 s" in r.stdout.splitlines()
    assert not api.calls("PATCH", WF_PATH)
    (first, *_) = api.calls("GET", PODS_PATH)
    query = urllib.parse.urlsplit(first["path"]).query
    assert "%2F" in query and "%3D" in query  # the selector is URL-encoded
    assert urllib.parse.parse_qs(query) == {"labelSelector": [SELECTOR]}
    assert (tmp_path / "termination-log").read_text() == ""
    assert_clean(r)


def test_placed_after_a_few_polls(api, tmp_path):
    api.pods = [pod_list(), pod_list(pod(0, "unschedulable"), pod(1, "unschedulable"), pod(2, "unschedulable")),
                pod_list(pod(0), pod(1, "unschedulable"), pod(2)), pod_list(pod(0), pod(1), pod(2, "running"))]
    r = run_watch(api.url, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(api.calls("GET", PODS_PATH)) == 4
    assert not api.calls("PATCH", WF_PATH)
    lines = r.stdout.splitlines()
    assert "[gang-watch] 0/3 pods scheduled after 0 s; waiting for node-rank 0-2" in lines
    assert any(ln.startswith("[gang-watch] 2/3 pods scheduled after") and ln.endswith("waiting for node-rank 1")
               for ln in lines), r.stdout
    assert lines[-1].startswith("[gang-watch] gang placed: 3/3 pods scheduled after")
    assert_clean(r)


def test_never_placed_stops_the_workflow(api, tmp_path):
    api.pods = [pod_list(pod(0), pod(1, "running"), pod(2, "unschedulable"))]
    started = time.monotonic()
    r = run_watch(api.url, tmp_path, timeout=2, poll=0.2)
    took = time.monotonic() - started
    assert r.returncode == 1, r.stdout + r.stderr
    assert took >= 2
    (patch,) = api.calls("PATCH", WF_PATH)
    assert patch["headers"]["Content-Type"] == "application/merge-patch+json"
    assert json.loads(patch["body"]) == {"spec": {"shutdown": "Terminate"}}
    reason = (f"gang not placed within 2 s: 2/3 pods scheduled; node-rank 2 (pod {WF}-node-2-1002): "
              f"Unschedulable: {UNSCHEDULABLE}")
    lines = r.stdout.splitlines()
    assert lines[-2:] == [f"[gang-watch] {reason}", f"[gang-watch] stopped workflow {WF}: gang not placed within 2 s"]
    assert (tmp_path / "termination-log").read_text() == reason
    assert_clean(r)


def test_rank_without_a_pod_and_a_retried_patch(api, tmp_path):
    api.pods = [pod_list(pod(0), pod(1, "unschedulable", message="pod group is not ready, 1 Pending"))]
    api.patch = [status(503, "etcd leader changed"), (200, RUNNING_WF)]
    r = run_watch(api.url, tmp_path, timeout=1)
    assert r.returncode == 1, r.stdout + r.stderr
    assert len(api.calls("PATCH", WF_PATH)) == 2
    assert (f"[gang-watch] gang not placed within 1 s: 1/3 pods scheduled; node-rank 1 (pod {WF}-node-1-1001): "
            "Unschedulable: pod group is not ready, 1 Pending; node-rank 2: no pod yet") in r.stdout.splitlines()
    assert "HTTP 503: etcd leader changed" in r.stdout
    assert_clean(r)


def test_forbidden_pods_names_the_missing_rbac(api, tmp_path):
    api.pods = [status(403, f'pods is forbidden: User "system:serviceaccount:{NS}:default" cannot list '
                            f'resource "pods" in API group "" in the namespace "{NS}"')]
    r = run_watch(api.url, tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"[gang-watch] error: RBAC: not allowed to list pods in namespace {NS} (pods is forbidden")
    assert "get/list on pods and get/patch on workflows.argoproj.io" in line and "rbac.create" in line
    assert (tmp_path / "termination-log").read_text() == line[len("[gang-watch] "):]
    assert not api.calls("PATCH", WF_PATH)
    assert_clean(r)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Error"])
def test_finished_workflow_is_left_alone(api, tmp_path, phase):
    api.workflow = (200, {"metadata": {"name": WF}, "spec": {}, "status": {"phase": phase}})
    r = run_watch(api.url, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"[gang-watch] workflow {WF} already finished ({phase}): nothing to watch" in r.stdout.splitlines()
    assert not api.calls("GET", PODS_PATH) and not api.calls("PATCH", WF_PATH)
    assert_clean(r)


def test_missing_workflow_is_nothing_to_watch(api, tmp_path):
    api.workflow = status(404, f'workflows.argoproj.io "{WF}" not found')
    r = run_watch(api.url, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"[gang-watch] workflow {WF} not found in namespace {NS}: nothing to watch" in r.stdout.splitlines()
    assert not api.calls("PATCH", WF_PATH)


def test_server_errors_are_retried(api, tmp_path):
    api.pods = [status(500, "etcdserver: request timed out"), status(500, "etcdserver: request timed out"),
                pod_list(pod(0), pod(1), pod(2))]
    r = run_watch(api.url, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(api.calls("GET", PODS_PATH)) == 3
    lines = r.stdout.splitlines()
    # said once per streak of the same error, not on every poll
    assert lines.count(f"[gang-watch] API error, retrying until the deadline: GET {PODS_PATH}: HTTP 500: "
                       "etcdserver: request timed out") == 1, r.stdout
    assert "[gang-watch] API reachable again" in lines
    assert lines[-1].startswith("[gang-watch] gang placed: 3/3")
    assert_clean(r)


def test_unreachable_api_is_not_a_reason_to_stop(tmp_path):
    """Nothing listens: retried until the deadline, then status 2 without stopping anything."""
    missing = tmp_path / "no-termination-log"
    r = run_watch(f"http://127.0.0.1:{free_port()}", tmp_path, timeout=0.5, termination_log=missing)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "[gang-watch] API error, retrying until the deadline: GET " in r.stdout
    assert "refused" in r.stdout.lower()
    assert f"could not read the pods of workflow {WF} at the deadline" in r.stderr
    assert not missing.exists()  # only an existing termination log is written
    assert_clean(r)


def test_restarted_dag_watches_only_its_own_attempt(api, tmp_path):
    """After a whole-job restart the first attempt's pods (long scheduled, now Failed) are
    still listed; only the pods of the watch's own attempt count. The watch finds its own
    pod by Argo's node-id annotation (ARGO_NODE_ID), never through the Workflow's
    status.nodes, which Argo empties once it compresses or offloads the status."""
    own_id = f"{WF}-1234"
    old = [pod(rank, "failed", attempt=f"{WF}(0)") for rank in range(3)]
    api.pods = [pod_list(*old, task_pod("gang-watch", own_id, attempt=f"{WF}(1)"), pod(0, attempt=f"{WF}(1)"),
                         pod(1, attempt=f"{WF}(1)"), pod(2, "unschedulable", attempt=f"{WF}(1)"))]
    r = run_watch(api.url, tmp_path, timeout=1, env={"ARGO_NODE_ID": own_id})
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"2/3 pods scheduled; node-rank 2 (pod {WF}-node-2-1002): Unschedulable" in r.stdout
    assert len(api.calls("PATCH", WF_PATH)) == 1


def test_without_its_own_pod_listed_the_watch_trusts_no_pod(api, tmp_path):
    """Under Argo, pods count only once the watch has seen its own (which names its
    attempt): placed pods of an unknown attempt must not end the watch as placed."""
    api.pods = [pod_list(*[pod(rank, "running", attempt=f"{WF}(0)") for rank in range(3)])]
    r = run_watch(api.url, tmp_path, timeout=0.5, env={"ARGO_NODE_ID": f"{WF}-1234"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "gang placed" not in r.stdout
    assert f"could not read the pods of workflow {WF} at the deadline" in r.stderr
    assert not api.calls("PATCH", WF_PATH)


def test_failed_gang_task_ends_the_watch(api, tmp_path):
    """The PodGroup could not be created: the training tasks never start and the Workflow
    fails on its own once the watch is done; waiting for the timeout would only delay it.
    The failure reads as Argo writes a failed node's message."""
    own_id = f"{WF}-1234"
    api.pods = [pod_list(task_pod("gang-watch", own_id),
                         task_pod("gang", f"{WF}-5678", "Failed",
                                  message="the server could not find the requested resource (podgroups)"))]
    r = run_watch(api.url, tmp_path, env={"ARGO_NODE_ID": own_id})
    assert r.returncode == 0, r.stdout + r.stderr
    assert (f"[gang-watch] workflow {WF} is failing without the gang (gang: Failed: main: Error (exit code 1): the "
            "server could not find the requested resource (podgroups)) and has no pod left to place: nothing to "
            "watch") in r.stdout.splitlines()
    assert not api.calls("PATCH", WF_PATH)


def test_a_stopped_gang_has_its_podgroup_deleted(api, tmp_path):
    """Volcano's PodGroup lives as long as the Workflow and would hold its queue's capacity."""
    api.pods = [pod_list(pod(0), pod(1, "unschedulable"))]
    r = run_watch(api.url, tmp_path, f"--podgroup={PODGROUP}", pods=2, timeout=0.5)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"[gang-watch] stopped workflow {WF}: gang not placed within 0.5 s; podgroups {WF} deleted"
            in r.stdout.splitlines())
    assert len(api.calls("DELETE", PODGROUP_PATH)) == 1
    api.requests.clear()
    api.delete = status(403, "podgroups is forbidden")
    r = run_watch(api.url, tmp_path, f"--podgroup={PODGROUP}", pods=2, timeout=0.5)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"; could not delete podgroups {WF} (" in r.stdout and "delete it by hand to free its queue" in r.stdout
    bad = run_watch(api.url, tmp_path, "--podgroup=podgroups/x", pods=2, timeout=0.5)
    assert bad.returncode == 2 and "is not GROUP/VERSION/RESOURCE/NAME" in bad.stderr
    assert_clean(r)


KUEUE_WORKLOAD = f"kueue.x-k8s.io/v1beta2/workloads/{WF}"
KUEUE_WORKLOAD_PATH = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/{WF}"
GATED = {"reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates"}
QUOTA = ("couldn't assign flavors to pod set ascend910-x8: insufficient quota for huawei.com/Ascend910 in flavor "
         "default-flavor, previously considered podsets requests (0) + current podset request (24) > maximum "
         "capacity (16)")


def gated(rank: int) -> dict:
    """A pod Kueue has not admitted (Kueue v0.17.0 on the local cluster: both gates, Kubernetes' condition)."""
    made = pod(rank, "pending")
    made["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}, {"name": "kueue.x-k8s.io/topology"}]
    made["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", **GATED}]
    return made


def test_a_kueue_gang_names_its_workloads_reason_and_deletes_the_workload(api, tmp_path):
    """The pods only say SchedulingGated; Kueue's reason is its Workload's. Deleting the
    Workload is what lets Kueue drop its finalizer from the pods Argo deletes."""
    api.pods = [pod_list(gated(0), gated(1))]
    api.objects[KUEUE_WORKLOAD_PATH] = (200, {"kind": "Workload", "status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": QUOTA}]}})
    r = run_watch(api.url, tmp_path, f"--podgroup={KUEUE_WORKLOAD}", pods=2, timeout=0.5)
    assert r.returncode == 1, r.stdout + r.stderr
    reason = (f"gang not placed within 0.5 s: 0/2 pods scheduled; workloads {WF}: {QUOTA}; "
              f"node-rank 0 (pod {WF}-node-0-1000): SchedulingGated: {GATED['message']}")
    assert (tmp_path / "termination-log").read_text().startswith(reason)
    assert f"[gang-watch] stopped workflow {WF}: gang not placed within 0.5 s; workloads {WF} deleted" in r.stdout
    assert len(api.calls("DELETE", KUEUE_WORKLOAD_PATH)) == 1
    # a Workload that cannot be read leaves the pods' reasons alone
    api.requests.clear()
    api.objects[KUEUE_WORKLOAD_PATH] = status(403, "workloads.kueue.x-k8s.io is forbidden")
    r = run_watch(api.url, tmp_path, f"--podgroup={KUEUE_WORKLOAD}", pods=2, timeout=0.5)
    assert r.returncode == 1 and f"0/2 pods scheduled; node-rank 0 (pod {WF}-node-0-1000): SchedulingGated" in r.stdout
    assert_clean(r)


def test_the_ranks_that_do_not_fit_are_named_before_those_held_for_their_gang(api, tmp_path):
    """scheduler-plugins' Coscheduling rejects the whole group in PostFilter: the ranks that would
    fit say only that; the rank that does not fit says why (seen on the local cluster). diagnose
    names the first rank of the verdict, so the cause comes first, with its host."""
    held = "0/1 nodes are available: 1 optimistic rejection in PostFilter."
    short = pod(2, "unschedulable", message="0/18 nodes are available: 1 Insufficient huawei.com/Ascend910, 17 "
                                            "node(s) didn't match Pod's node affinity/selector.")
    short["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["atlas-03"]}]}]}}}
    api.pods = [pod_list(pod(0, "unschedulable", message=held), pod(1, "unschedulable", message=held), short)]
    r = run_watch(api.url, tmp_path, timeout=0.5)
    assert r.returncode == 1, r.stdout + r.stderr
    verdict = (tmp_path / "termination-log").read_text()
    assert verdict.startswith(f"gang not placed within 0.5 s: 0/3 pods scheduled; node-rank 2 on host atlas-03 (pod "
                              f"{WF}-node-2-1002): Unschedulable: 0/18 nodes are available: 1 Insufficient "), verdict
    assert verdict.index("node-rank 2") < verdict.index("node-rank 0") < verdict.index("node-rank 1")
    assert_clean(r)


def test_usage_errors_and_help(tmp_path):
    helped = subprocess.run([sys.executable, str(GANGWATCH), "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0
    for words in ("spec.shutdown=Terminate", "get/list on pods and get/patch on workflows.argoproj.io",
                  "--termination-log", "--api-server", "--poll", "Exit status"):
        assert words in helped.stdout, words
    r = run_watch("http://127.0.0.1:9", tmp_path, pods=0)
    assert r.returncode == 2 and "--pods: '0' must be greater than 0" in r.stderr
    r = subprocess.run([sys.executable, str(GANGWATCH), "--workflow={{workflow.name}}", "--namespace=x",
                        "--pods=2", "--timeout=5"], capture_output=True, text=True, timeout=60,
                       env=watch_env())
    assert r.returncode == 2 and "unsubstituted Argo variable" in r.stderr
    assert_clean(r)


def test_sigterm_from_argo_ends_quietly(api, tmp_path):
    """Argo stops the watch with SIGTERM when the Workflow is stopped or past its deadline."""
    api.pods = [pod_list(pod(0), pod(1, "unschedulable"))]
    argv = watch_argv(api.url, tmp_path, pods=2, timeout=60, poll=0.1)
    code, out, err = until_sigterm(argv, lambda: api.calls("GET", PODS_PATH))
    assert code == 143, out + err
    assert out.splitlines()[-1] == ("[gang-watch] terminated (SIGTERM): the job's DAG has ended, or the Workflow "
                                    "is being stopped")
    assert "Traceback" not in out + err and not api.calls("PATCH", WF_PATH)
