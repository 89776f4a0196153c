"""Node recovery's host check (torchdag/agents/gangwatch.py --what=retry, the `host-check`
task beside each retried node's pod in its retry wrapper's step group): the retried pod of
its own attempt is scheduled in time, or its host is named and the wait ends: an elastic
member's pod is marked Failed (its attempt fails, the job goes on), a required member's job
is stopped. Argo's own `timeout` cannot do this for a pod that is never scheduled (the
controller checks it only when it happens to reconcile the Workflow)."""

from __future__ import annotations

import json

from gangwatch_helpers import NS, PODS_PATH, UNSCHEDULABLE, WF, WF_PATH, pod, pod_list, run_watch, status, task_pod

OWN = f"{WF}-4242"
ATTEMPT = f"{WF}.node-2(1)[0]"  # the wrapper's second attempt, its one step group


def retried(how: str, host: str = "gone-host", attempt: str = ATTEMPT) -> dict:
    made = pod(2, how, attempt=attempt)
    made["metadata"]["annotations"]["workflows.argoproj.io/node-name"] = f"{attempt}.train"
    made["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                     "values": [host]}]}]}}}
    return made


def check(api, tmp_path, *extra: str, timeout: float = 0.6):
    return run_watch(api.url, tmp_path, "--what=retry", "--rank=2", *extra, pods=None, timeout=timeout, poll=0.1,
                     env={"ARGO_NODE_ID": OWN})


def own() -> dict:
    return task_pod("host-check", OWN, attempt=ATTEMPT)


def test_an_elastic_members_pod_on_a_gone_host_is_ended_naming_the_host(api, tmp_path):
    # the first attempt's pod (Failed, once scheduled) does not count: only this attempt's
    api.pods = [pod_list(retried("failed", attempt=f"{WF}.node-2(0)"), own(), retried("unschedulable"))]
    r = check(api, tmp_path, "--elastic-from=2", "--elastic-timeout=0.5", timeout=30)
    assert r.returncode == 1, r.stdout + r.stderr
    name = f"{WF}-node-2-1002"
    reason = f"not scheduled within 0.5 s: node-rank 2 on host gone-host (pod {name}): Unschedulable: {UNSCHEDULABLE}"
    (patch,) = api.calls("PATCH", f"{PODS_PATH}/{name}/status")
    assert json.loads(patch["body"]) == {"status": {"phase": "Failed", "reason": "Unschedulable",
                                                    "message": f"[gang-watch] {reason}"}}
    assert not api.calls("PATCH", WF_PATH), "an elastic member's loss must not stop the job"
    assert (tmp_path / "termination-log").read_text() == reason
    assert r.stdout.splitlines()[-1] == (f"[gang-watch] ended pod {name} (Failed): node-rank 2 is an elastic member "
                                         "(elastic.minNodes 2): the job goes on without it")


def test_a_required_members_pod_on_a_gone_host_stops_the_job(api, tmp_path):
    api.pods = [pod_list(own(), retried("unschedulable"))]
    r = check(api, tmp_path, "--elastic-from=3", "--elastic-timeout=30")
    assert r.returncode == 1, r.stdout + r.stderr
    (patch,) = api.calls("PATCH", WF_PATH)
    assert json.loads(patch["body"]) == {"spec": {"shutdown": "Terminate"}}
    assert "node-rank 2 on host gone-host" in (tmp_path / "termination-log").read_text()
    assert not [c for c in api.requests if c["path"].endswith("/status")]


def test_a_placed_retry_ends_the_check_at_once(api, tmp_path):
    api.pods = [pod_list(own(), retried("running"))]
    r = check(api, tmp_path, timeout=30)
    assert r.returncode == 0 and "[gang-watch] node-rank 2's retried pod scheduled after 0 s" in r.stdout, r.stdout
    assert [c["method"] for c in api.requests] == ["GET", "GET"]  # the Workflow, then the pods


def test_without_the_right_to_end_the_pod_it_steps_aside(api, tmp_path):
    api.pods = [pod_list(own(), retried("unschedulable"))]
    api.pod_status = status(403, f'pods "x" is forbidden: cannot patch resource "pods/status" in the namespace "{NS}"')
    r = check(api, tmp_path, "--elastic-from=0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning: not watching scheduling (RBAC: not allowed to patch pods/status" in r.stderr


def test_usage(tmp_path, api):
    r = run_watch(api.url, tmp_path, "--what=retry", pods=None)
    assert r.returncode == 2 and "--what=retry needs --rank" in r.stderr
    r = run_watch(api.url, tmp_path, pods=None)
    assert r.returncode == 2 and "--pods is required" in r.stderr
