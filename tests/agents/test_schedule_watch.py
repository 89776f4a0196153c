"""The scheduling watch of a job without a gang (torchdag/agents/gangwatch.py --what=pods, the
`schedule-watch` task of every such job): it names the host of each unscheduled pod, and
steps aside (exit 0) when it cannot read the API rather than fail the job."""

from __future__ import annotations

import json

from gangwatch_helpers import NS, UNSCHEDULABLE, WF, WF_PATH, pod, pod_list, run_watch, status


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
