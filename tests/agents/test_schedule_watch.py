"""The scheduling watch of a job without a gang (torchdag/agents/gangwatch.py --what=pods, the
`schedule-watch` task of every such job): it names the host of each unscheduled pod, and
steps aside (exit 0) when it cannot read the API rather than fail the job; with --keep-watching
(every rendered job's watch, an Argo daemon) it then ends a pod re-created on a lost host."""

from __future__ import annotations

import json
import urllib.parse

from gangwatch_helpers import (
    NS,
    PODS_PATH,
    UNSCHEDULABLE,
    WF,
    WF_PATH,
    pod,
    pod_list,
    run_watch,
    status,
    until_sigterm,
    watch_argv,
)

from torchdag.diagnose import signatures


def pinned(rank: int, how: str, host: str) -> dict:
    made = pod(rank, how)
    made["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                     "values": [host]}]}]}}}
    return made


def test_a_pod_never_scheduled_stops_the_job_naming_its_host(api, tmp_path):
    api.pods = [pod_list(pinned(0, "running", "host-a"), pinned(1, "unschedulable", "no-such-host"))]
    r = run_watch(api.url, tmp_path, "--what=pods", pods=2, timeout=1, poll=0.2)
    assert r.returncode == 1, r.stdout + r.stderr
    (patch,) = api.calls("PATCH", WF_PATH)
    assert json.loads(patch["body"]) == {"spec": {"shutdown": "Terminate"}}
    reason = (f"not scheduled within 1 s: 1/2 pods scheduled; node-rank 1 on host no-such-host "
              f"(pod {WF}-node-1-1001): Unschedulable: {UNSCHEDULABLE}")
    assert r.stdout.splitlines()[-2:] == [f"[gang-watch] {reason}",
                                          f"[gang-watch] stopped workflow {WF}: not scheduled within 1 s"]
    assert (tmp_path / "termination-log").read_text() == reason


def test_every_pod_scheduled_ends_the_watch(api, tmp_path):
    api.pods = [pod_list(pinned(0, "running", "a"), pinned(1, "nodename", "b"))]
    r = run_watch(api.url, tmp_path, "--what=pods", pods=2)
    assert r.returncode == 0 and "[gang-watch] every pod scheduled: 2/2 after 0 s" in r.stdout.splitlines()


def test_without_rbac_it_steps_aside(api, tmp_path):
    api.pods = [status(403, f'pods is forbidden: cannot list resource "pods" in the namespace "{NS}"')]
    r = run_watch(api.url, tmp_path, "--what=pods", pods=2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning: not watching scheduling (RBAC: not allowed to list pods" in r.stderr
    assert not api.calls("PATCH", WF_PATH)


def relost(rank: int, host: str) -> dict:
    """The pod Argo re-creates for a node whose pod the cluster deleted with its lost machine's
    Node: a new name, pinned to the gone host, Pending and unschedulable."""
    made = pinned(rank, "unschedulable", host)
    made["metadata"]["name"] += "-again"
    made["metadata"]["creationTimestamp"] = "2024-05-01T11:00:00Z"
    return made


def test_a_pod_recreated_on_a_lost_host_later_in_the_job_stops_the_job_naming_the_host(api, tmp_path):
    placed = pod_list(pinned(0, "running", "host-a"), pinned(1, "running", "host-b"))
    api.pods = [placed, placed, placed, pod_list(pinned(0, "running", "host-a"), relost(1, "host-b"))]
    r = run_watch(api.url, tmp_path, "--what=pods", "--keep-watching", pods=2, timeout=1, poll=0.1)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "[gang-watch] every pod scheduled: 2/2 after 0 s" in lines
    reason = (f"not scheduled within 1 s: node-rank 1 on host host-b (pod {WF}-node-1-1001-again), re-created after "
              f"every rank was placed: Unschedulable: {UNSCHEDULABLE}")
    assert lines[-2:] == [f"[gang-watch] {reason}", f"[gang-watch] stopped workflow {WF}: not scheduled within 1 s"]
    # diagnose reads the verdict from the log: no line before it may read as one
    assert [line for line in lines if signatures.match(line, "log")] == lines[-2:], lines
    assert (tmp_path / "termination-log").read_text() == reason
    (patch,) = api.calls("PATCH", WF_PATH)
    assert json.loads(patch["body"]) == {"spec": {"shutdown": "Terminate"}}
    # after the placement it lists only the pending training pods: cheap at thousands of pods
    later = urllib.parse.parse_qs(urllib.parse.urlsplit(api.calls("GET", PODS_PATH)[-1]["path"]).query)
    assert later == {"labelSelector": [f"workflows.argoproj.io/workflow={WF},torchdag.io/node-rank"],
                     "fieldSelector": ["status.phase=Pending"]}


def test_an_elastic_members_pod_recreated_on_a_lost_host_is_ended_and_the_watch_goes_on(api, tmp_path):
    """Its pod marked Failed (Argo's retry, or continueOn), the job not stopped; and the watch
    keeps watching until Argo ends it with the DAG (SIGTERM). A pod that waits, but less than its
    bound, is left alone: rank 0's, a required member's, with scheduling.timeout's 30 s."""
    placed = pod_list(pinned(0, "running", "host-a"), pinned(1, "running", "host-b"))
    api.pods = [placed, pod_list(relost(0, "host-a"), relost(1, "host-b"))]
    # The re-created pod keeps its node's id, and the task result the first pod left unfinished:
    # marked complete, or Argo would wait 10 minutes (TASK_RESULT_TIMEOUT_DURATION) to read the failure.
    api.pod_status = (200, {"kind": "Pod", "metadata": {"annotations": {"workflows.argoproj.io/node-id": "wf-123"}}})
    result = f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflowtaskresults/wf-123"
    api.objects[result] = (200, {"kind": "WorkflowTaskResult"})
    argv = watch_argv(api.url, tmp_path, "--what=pods", "--keep-watching", "--elastic-from=1",
                      "--elastic-timeout=0.5", pods=2, timeout=30, poll=0.1)
    ended = f"{PODS_PATH}/{WF}-node-1-1001-again/status"
    # more looks than its bound after the first PATCH: the ended pod is not ended twice, the watch goes on
    code, out, err = until_sigterm(argv, lambda: api.calls("PATCH", ended), settle=1.5)
    assert code == 143, out + err
    reason = (f"not scheduled within 0.5 s: node-rank 1 on host host-b (pod {WF}-node-1-1001-again), re-created "
              f"after every rank was placed: Unschedulable: {UNSCHEDULABLE}")
    (patch,) = api.calls("PATCH", ended)
    assert json.loads(patch["body"]) == {"status": {"phase": "Failed", "reason": "Unschedulable",
                                                    "message": f"[gang-watch] {reason}"}}
    assert f"[gang-watch] ended pod {WF}-node-1-1001-again (Failed): node-rank 1 is an elastic member " \
           "(elastic.minNodes 1): the job goes on without it" in out.splitlines()
    (settled,) = api.calls("PATCH", result)
    assert json.loads(settled["body"]) == {"metadata": {"labels": {"workflows.argoproj.io/report-outputs-completed":
                                                                   "true"}}}
    assert not api.calls("PATCH", WF_PATH) and "Traceback" not in out + err


def test_a_keep_watching_watch_with_nothing_to_do_stays_until_argo_ends_it(api, tmp_path):
    """An Argo daemon that ends on its own fails its node, even with exit 0 (operator.go): without
    RBAC the watch steps aside, as without --keep-watching, but stays until SIGTERM."""
    api.pods = [status(403, f'pods is forbidden: cannot list resource "pods" in the namespace "{NS}"')]
    argv = watch_argv(api.url, tmp_path, "--what=pods", "--keep-watching", pods=2)
    code, out, err = until_sigterm(argv, lambda: api.calls("GET", PODS_PATH), settle=1.0)
    assert code == 143, out + err
    assert "warning: not watching scheduling (RBAC: not allowed to list pods" in err
    assert out.splitlines()[-2:] == ["[gang-watch] idle until the job's DAG ends", "[gang-watch] terminated (SIGTERM): "
                                     "the job's DAG has ended, or the Workflow is being stopped"], out
    assert not api.calls("PATCH", WF_PATH)


def test_a_retried_pod_is_left_to_its_host_check_for_its_bound(api, tmp_path):
    """Node recovery's retried pod (attempt 1) has a host check of its own that ends it at the
    bound; the watch takes it only at twice the bound (a pod lost after its check had passed)."""
    placed = pod_list(pinned(0, "running", "host-a"), pinned(1, "running", "host-b"))
    retried = relost(1, "host-b")
    retried["metadata"]["annotations"]["workflows.argoproj.io/node-name"] = f"{WF}.node-1(1)[0].train"
    api.pods = [placed, pod_list(pinned(0, "running", "host-a"), retried)]
    r = run_watch(api.url, tmp_path, "--what=pods", "--keep-watching", pods=2, timeout=1, poll=0.1)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (tmp_path / "termination-log").read_text().startswith("not scheduled within 2 s: node-rank 1 on host host-b")
