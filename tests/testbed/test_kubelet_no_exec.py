"""The process kubelet's --no-exec mode (the scale benches): pods Running then Succeeded with
nothing started, held together (--no-exec-seconds, --no-exec-hold) until released (SIGUSR1) or
stopped, Argo daemons held until stopped, an annotated exit code, and status reports the API
server did not take sent again."""

from __future__ import annotations

import time

from test_kubelet_pods import make_kubelet, pod, run, sh  # the kubelet stand-ins, not their tests

from testbed.kubelet import pods as pods_module


def test_no_exec_reports_running_then_succeeded(tmp_path):
    kubelet, api = make_kubelet(tmp_path, no_exec=True)
    run(kubelet, pod(sh("main", "exit 1"), inits=[sh("init", "exit 1")]))
    assert [s["phase"] for s in api.statuses] == ["Running", "Succeeded"]
    assert not (tmp_path / "logs").exists()


def test_no_exec_pods_are_running_all_at_once_and_a_deleted_one_ends_143(tmp_path):
    """--no-exec-seconds holds every pod Running together, as a job's pods run (the scale
    bench needs all of an attempt's pods Running); deletion ends the hold early."""
    kubelet, api = make_kubelet(tmp_path, no_exec=True, no_exec_seconds=60)
    pods = [pod(sh("main", "exit 1"), name=f"p{i}") for i in range(300)]
    for p in pods:
        kubelet.on_pod("ADDED", p)
    deadline = time.monotonic() + 30
    while len(api.statuses) < len(pods) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [s["phase"] for s in api.statuses] == ["Running"] * len(pods)
    worker = kubelet.workers["uid-p7-0000"]
    worker.stop("pod deleted", 30)
    assert worker.done.wait(10), "a deleted --no-exec pod stops at once, not after its 60 s"
    term = api.statuses[-1]["containerStatuses"][0]["state"]["terminated"]
    assert (api.statuses[-1]["phase"], term["exitCode"]) == ("Failed", 143)
    assert len(api.statuses) == len(pods) + 1, "the others are still Running"
    for other in kubelet.workers.values():
        other.stop("test over", 0)


def test_no_exec_hold_holds_only_the_labelled_pods(tmp_path):
    """--no-exec-hold LABEL: the training pods are held Running, the others (the watch, a host
    check) end at once, as a real job's do."""
    kubelet, api = make_kubelet(tmp_path, no_exec=True, no_exec_seconds=60, no_exec_hold="torchdag.io/node-rank")
    begin = time.monotonic()
    run(kubelet, pod(sh("main", "exit 1"), name="watch"))
    assert time.monotonic() - begin < 10 and [s["phase"] for s in api.statuses] == ["Running", "Succeeded"]
    held = pod(sh("main", "exit 1"), name="train")
    held["metadata"]["labels"] = {"torchdag.io/node-rank": "3"}
    kubelet.on_pod("ADDED", held)
    worker = kubelet.workers["uid-train-0000"]
    time.sleep(1)
    assert not worker.done.is_set() and api.statuses[-1]["phase"] == "Running", "the labelled pod is held"
    kubelet.release()  # SIGUSR1: the bench has measured; held pods end Succeeded
    assert worker.done.wait(10)
    assert api.statuses[-1]["phase"] == "Succeeded"
    later = pod(sh("main", "exit 1"), name="next-job")  # the next job's pods are held as ever
    later["metadata"]["labels"] = {"torchdag.io/node-rank": "0"}
    kubelet.on_pod("ADDED", later)
    time.sleep(1.5)
    assert not kubelet.workers["uid-next-job-0000"].done.is_set()
    kubelet.workers["uid-next-job-0000"].stop("test over", 0)


def test_a_held_no_exec_pod_sleeps_until_it_is_released_or_stopped(tmp_path, monkeypatch):
    """A held pod's thread waits once, not once a second: the scale bench holds 4,096 of them,
    and their polling kept the kubelet at more than one of the machine's two cores, starving
    Argo's controller. Released or stopped, it wakes at once."""
    waits: list[float | None] = []

    class CountedEvent(pods_module.threading.Event):
        def wait(self, timeout=None):
            waits.append(timeout)
            return super().wait(timeout)

    monkeypatch.setattr(pods_module.threading, "Event", CountedEvent)
    kubelet, api = make_kubelet(tmp_path, no_exec=True, no_exec_seconds=600, no_exec_hold="torchdag.io/node-rank")
    held = [pod(sh("main", "exit 0"), name=f"train-{i}") for i in range(2)]
    for p in held:
        p["metadata"]["labels"] = {"torchdag.io/node-rank": "1"}
        kubelet.on_pod("ADDED", p)
    first, second = (kubelet.workers[f"uid-train-{i}-0000"] for i in range(2))
    deadline = time.monotonic() + 10
    while len(api.statuses) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2.5)
    timed = [timeout for timeout in waits if timeout is not None]  # None: waits until set, as threads do
    assert len(timed) == 2 and all(timeout > 500 for timeout in timed), waits
    first.stop("pod deleted", 30)
    assert first.done.wait(10) and not second.done.is_set()
    kubelet.release()
    assert second.done.wait(10) and api.statuses[-1]["phase"] == "Succeeded"


def test_a_status_report_the_api_server_did_not_take_is_sent_again_until_taken(tmp_path):
    """As kubelet's status manager keeps syncing: a report that timed out (thousands of pods
    ending at once) or met a 503 is sent again; a pod whose Succeeded never reached the server
    would stay Running there, and its Workflow with it. A refused one (422) is not."""
    from kubernetes.client.exceptions import ApiException

    kubelet, api = make_kubelet(tmp_path, no_exec=True)
    failures = [TimeoutError("read timed out"), ApiException(status=503, reason="unavailable")]
    taken = api.patch_pod_status

    def patch(namespace, name, status):
        if status["phase"] == "Succeeded" and failures:
            raise failures.pop(0)
        taken(namespace, name, status)

    api.patch_pod_status = patch
    run(kubelet, pod(sh("main", "exit 0")))
    assert [s["phase"] for s in api.statuses] == ["Running", "Succeeded"] and not failures
    said = kubelet.out.getvalue()
    assert said.count("status not reported") == 1 and "tried again until taken" in said, said

    def refuse(namespace, name, status):
        raise ApiException(status=422, reason="invalid")

    api.patch_pod_status = refuse
    run(kubelet, pod(sh("main", "exit 0"), name="p2"), timeout=5)  # not sent again: it ends at once
    assert kubelet.out.getvalue().count("status not reported") == 3


def test_no_exec_holds_an_argo_daemon_until_it_is_stopped(tmp_path):
    """An Argo daemon (ARGO_TEMPLATE's `daemon: true`: the scheduling watch) runs until Argo stops
    it; ended on its own, even Succeeded, Argo would fail its node. Not released by SIGUSR1."""
    kubelet, api = make_kubelet(tmp_path, no_exec=True, no_exec_seconds=0)
    daemon = pod(sh("main", "exit 0"), name="watch", inits=[sh("init", "exit 0")])
    daemon["spec"]["initContainers"][0]["env"] = [{"name": "ARGO_TEMPLATE", "value": '{"name": "w", "daemon": true}'}]
    kubelet.on_pod("ADDED", daemon)
    worker, _ = kubelet.workers["uid-watch-0000"], time.sleep(1.5)
    kubelet.release()  # SIGUSR1 too: it stays
    time.sleep(1.5)
    assert not worker.done.is_set() and api.statuses[-1]["phase"] == "Running"
    worker.stop("pod deleted", 30)
    assert worker.done.wait(10) and api.statuses[-1]["phase"] == "Failed"


def test_no_exec_pod_annotated_with_an_exit_code_ends_with_it(tmp_path):
    """The scale bench's stand-in for ranks that fail once a peer is lost: a held pod annotated
    torchdag.io/no-exec-exit ends Failed with that code, not as a deleted pod's 143."""
    kubelet, api = make_kubelet(tmp_path, no_exec=True, no_exec_seconds=60)
    held = pod(sh("main", "exit 0"), name="survivor")
    kubelet.on_pod("ADDED", held)
    worker = kubelet.workers["uid-survivor-0000"]
    deadline = time.monotonic() + 10
    while not api.statuses and time.monotonic() < deadline:
        time.sleep(0.05)
    failing = dict(held["metadata"], annotations={"torchdag.io/no-exec-exit": "1"})
    kubelet.on_pod("MODIFIED", held | {"metadata": failing})
    assert worker.done.wait(10)
    term = api.statuses[-1]["containerStatuses"][0]["state"]["terminated"]
    assert (api.statuses[-1]["phase"], term["exitCode"]) == ("Failed", 1)
