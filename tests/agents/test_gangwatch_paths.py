"""trainer/gangwatch.py's documented paths beyond the main ones (docs/gang.md, "Bounded
wait" and "Errors"): a Workflow already being stopped, a rejected token, 429 and 5xx
retries, every phase that counts as placed, what happens at the deadline, the 4 KB
termination message. The real script against the fake API of tests/agents/test_gangwatch.py."""

from __future__ import annotations

import json
import urllib.parse

import pytest
from gangwatch_helpers import (
    NS,
    PODS_PATH,
    RUNNING_WF,
    UNSCHEDULABLE,
    WF,
    WF_PATH,
    assert_clean,
    pod,
    pod_list,
    run_watch,
    status,
)


def workflow(**spec) -> tuple[int, dict]:
    return 200, {"metadata": {"name": WF}, "spec": spec, "status": {"phase": "Running"}}


def phase(rank: int, name: str) -> dict:
    """A pod in this phase, with no other sign of placement (no condition, no nodeName)."""
    placed = pod(rank, how="pending")
    placed["status"]["phase"] = name
    return placed


@pytest.mark.parametrize("shutdown", ["Terminate", "Stop"])
def test_a_workflow_already_being_stopped_is_nothing_to_watch(api, tmp_path, shutdown):
    """`argo stop` or `argo terminate` came first: exit 0 at once, no look at the pods, no PATCH."""
    api.workflow = workflow(shutdown=shutdown)
    api.pods = [pod_list(pod(0, "unschedulable"))]
    r = run_watch(api.url, tmp_path, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == (
        f"[gang-watch] workflow {WF} is being stopped (shutdown: {shutdown}): nothing to watch"
    )
    assert not api.calls("GET", PODS_PATH) and not api.calls("PATCH", WF_PATH)
    assert (tmp_path / "termination-log").read_text() == ""
    assert_clean(r)


def test_a_stop_that_comes_before_the_deadline_is_left_to_argo(api, tmp_path):
    """At the deadline the watch looks at the Workflow once more before stopping it: a
    shutdown set meanwhile (by a user, or the Workflow's own deadline) wins, exit 0."""
    api.pods = [pod_list(pod(0), pod(1, "unschedulable"))]
    answer = api.answer

    def stopped_after_the_first_look(method, path, headers, body):
        if method == "GET" and urllib.parse.urlsplit(path).path == WF_PATH and api.calls("GET", WF_PATH):
            api.workflow = workflow(shutdown="Stop")
        return answer(method, path, headers, body)

    api.answer = stopped_after_the_first_look
    r = run_watch(api.url, tmp_path, pods=2, timeout=1)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(api.calls("GET", WF_PATH)) == 2 and api.calls("GET", PODS_PATH)
    assert (
        r.stdout.splitlines()[-1] == f"[gang-watch] workflow {WF} is being stopped (shutdown: Stop): nothing to watch"
    )
    assert not api.calls("PATCH", WF_PATH)
    assert_clean(r)


@pytest.mark.parametrize("refused", ["workflow", "pods"])
def test_a_rejected_token_is_exit_2_with_one_line(api, tmp_path, refused):
    """401: the token is wrong or expired. One line naming the token file, also as the
    termination message; nothing is stopped. (The fake answers 401 to any other token.)"""
    if refused == "workflow":  # the first call, with a token the server does not know
        token = tmp_path / "stale-token"
        token.write_text("expired\n")
        r = run_watch(api.url, tmp_path, "--token-file", str(token), timeout=30)
        path = WF_PATH
    else:  # the Workflow is readable, then the pods call is refused
        token = tmp_path / "token"
        api.pods = [status(401, "Unauthorized")]
        r = run_watch(api.url, tmp_path, timeout=30)
        path = PODS_PATH
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    assert line == (
        f"[gang-watch] error: the API server rejected the ServiceAccount token ({token}): "
        f"GET {path}: HTTP 401: Unauthorized"
    ), line
    assert (tmp_path / "termination-log").read_text() == line[len("[gang-watch] ") :]
    assert not api.calls("PATCH", WF_PATH)
    assert_clean(r)


def test_429_is_retried_on_the_pods_and_on_the_patch(api, tmp_path):
    """Too many requests: retried (said once per streak), for the pods until the gang is
    seen, for the PATCH until it goes through."""
    throttled = status(429, "Too many requests, please try again later.")
    api.pods = [throttled, throttled, pod_list(pod(0), pod(1, "unschedulable"))]
    api.patch = [throttled, throttled, (200, RUNNING_WF)]
    r = run_watch(api.url, tmp_path, pods=2, timeout=1.5)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    said = ("[gang-watch] API error, retrying until the deadline: {} {}: HTTP 429: "
            "Too many requests, please try again later.")
    assert lines.count(said.format("GET", PODS_PATH)) == 1, r.stdout
    assert lines.count(said.format("PATCH", WF_PATH)) == 1, r.stdout
    assert len(api.calls("PATCH", WF_PATH)) == 3
    assert lines[-1] == f"[gang-watch] stopped workflow {WF}: gang not placed within 1.5 s"
    assert_clean(r)


def test_a_patch_refused_by_rbac_names_what_is_missing(api, tmp_path):
    api.pods = [pod_list(pod(0, "unschedulable"))]
    api.patch = [status(403, f'workflows.argoproj.io "{WF}" is forbidden: cannot patch')]
    r = run_watch(api.url, tmp_path, pods=1, timeout=0.5)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith(
        f"[gang-watch] error: RBAC: not allowed to patch workflows.argoproj.io in namespace {NS} "
    ), line
    assert line.endswith(
        f"; and the gang was not placed: gang not placed within 0.5 s: 0/1 pods scheduled; node-rank 0 "
        f"(pod {WF}-node-0-1000): Unschedulable: {UNSCHEDULABLE}"
    ), line
    assert_clean(r)


def test_a_workflow_deleted_before_the_patch_is_nothing_to_stop(api, tmp_path):
    api.pods = [pod_list(pod(0, "unschedulable"))]
    api.patch = [status(404, f'workflows.argoproj.io "{WF}" not found')]
    r = run_watch(api.url, tmp_path, pods=1, timeout=0.5)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == f"[gang-watch] workflow {WF} no longer exists: nothing to stop"
    assert_clean(r)


@pytest.mark.parametrize("name", ["Running", "Succeeded", "Failed"])
def test_every_phase_after_scheduling_counts_as_placed(api, tmp_path, name):
    """A pod that already ran (Succeeded or Failed: a short job, a crash) was placed; the
    watch reports the gang placed, it does not stop the Workflow."""
    api.pods = [pod_list(phase(0, name), pod(1, "nodename"))]
    r = run_watch(api.url, tmp_path, pods=2, timeout=1)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[gang-watch] gang placed: 2/2 pods scheduled after 0 s" in r.stdout.splitlines()
    assert not api.calls("PATCH", WF_PATH)


@pytest.mark.parametrize("name", ["Pending", "Unknown"])
def test_pending_and_unknown_pods_are_not_placed(api, tmp_path, name):
    api.pods = [pod_list(phase(0, name), pod(1, "condition"))]
    r = run_watch(api.url, tmp_path, pods=2, timeout=0.5)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (
        f"0.5 s: 1/2 pods scheduled; node-rank 0 (pod {WF}-node-0-1000): {name}, no scheduling decision yet" in r.stdout
    )


def test_the_termination_message_is_cut_to_what_kubernetes_keeps(api, tmp_path):
    """Kubernetes keeps 4 KB of a termination message: with many unplaced ranks it is cut
    and says so; the log has every rank."""
    ranks = 200
    api.pods = [pod_list(*(pod(r, "unschedulable") for r in range(ranks)))]
    r = run_watch(api.url, tmp_path, pods=ranks, timeout=0.5)
    assert r.returncode == 1, r.stdout + r.stderr
    message = (tmp_path / "termination-log").read_bytes()
    assert len(message) <= 4096
    assert message.endswith(b" ... (cut: the gang-watch log has every rank)")
    reason = next(line for line in r.stdout.splitlines() if "gang not placed within 0.5 s: 0/200" in line)
    assert all(f"node-rank {rank} (pod " in reason for rank in range(ranks))
    assert reason.startswith(
        "[gang-watch] " + message[: -len(b" ... (cut: the gang-watch log has every rank)")].decode()
    )


def test_the_patch_is_a_merge_patch_of_shutdown_only(api, tmp_path):
    api.pods = [pod_list()]
    r = run_watch(api.url, tmp_path, pods=1, timeout=0.3)
    assert r.returncode == 1, r.stdout + r.stderr
    (patch,) = api.calls("PATCH", WF_PATH)
    assert json.loads(patch["body"]) == {"spec": {"shutdown": "Terminate"}}
    assert (
        tmp_path / "termination-log"
    ).read_text() == "gang not placed within 0.3 s: 0/1 pods scheduled; node-rank 0: no pod yet"
