"""torchdag/diagnose: the first failure and its cause from recorded logs of real 2-node runs
(tests/diagnose_logs/, recorded by its record.py with tests/diagnose_faults.py), each
known signature on the line it is known by, and the commands' one-line answers to bad input."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchdag.diagnose import core, signatures
from torchdag.diagnose.commands import merged_lines, status_rows

LOGS = Path(__file__).resolve().parents[1] / "diagnose_logs"
REPO = Path(__file__).resolve().parents[2]
HOSTS = ("node-a", "node-b")


def pod(rank: int, phase: str = "Failed", code: int | None = 1, **extra) -> dict:
    state = {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": "2026-12-04T17:40:00Z"}} \
        if code is not None else {"running": {"startedAt": "2026-12-04T17:20:00Z"}}
    status = {"phase": phase, "podIP": f"198.18.0.{rank + 1}",
              "containerStatuses": [{"name": "main", "restartCount": 0, "state": state}]}
    status.update(extra)
    return {"metadata": {"name": f"job-node-{rank}", "labels": {core.RANK_LABEL: str(rank)},
                         "creationTimestamp": "2026-12-04T17:20:00Z",
                         "annotations": {core.NODE_NAME_ANNOTATION: f"job.train(0).node-{rank}"}},
            "spec": {"nodeName": HOSTS[rank]}, "status": status}


def recorded(fault: str, phases=("Failed", "Failed"), codes=(1, 1)):
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed" if "Running" not in phases else "Running"}}
    pods = [pod(r, phases[r], codes[r]) for r in (0, 1)]
    logs = {f"job-node-{r}": (LOGS / f"{fault}-node{r}.log").read_text() for r in (0, 1)}
    views = core.build_views(workflow, pods, [], logs)
    return core.diagnose(workflow, views, now=dt.datetime(2026, 12, 4, 17, 45, tzinfo=dt.timezone.utc))


@pytest.mark.parametrize("fault, rank, signature, words", [
    ("raise", 1, "python-exception", "RuntimeError: injected failure at step 5"),
    ("kill", 1, "worker-killed", "SIGKILL"),
    ("port", 0, "address-in-use", "EADDRINUSE"),
    ("nic", 1, "missing-nic", "(ens9)"),
])
def test_recorded_failure_names_the_first_rank_its_cause_and_fix(fault, rank, signature, words):
    result = recorded(fault)
    assert result.status == 1
    assert (result.first.pod.rank, result.first.pod.host, result.first.signature) == (rank, HOSTS[rank], signature)
    assert words in result.first.cause and result.first.fix
    # the survivors' lines come after, marked as consequences
    assert all(f.effect for f in result.others if f.pod.rank != rank)


def test_the_survivor_is_never_first_though_it_printed_a_traceback_too():
    result = recorded("raise")
    survivor = [f for f in result.others if f.pod.rank == 0]
    assert {f.signature for f in survivor} >= {"peer-lost"}
    text = "\n".join(core.report_lines("job", result))
    assert "first failure: rank 1 on node-b (pod job-node-1, attempt 0)" in text
    assert "then: rank 0 on node-a: this rank lost its connection to a peer" in text


def test_a_sigstopped_rank_is_the_hang_while_others_wait_and_after_their_timeout():
    # after the collective timeout: rank 0 timed out, rank 1 (stopped) still Running
    after = recorded("stop", phases=("Failed", "Running"), codes=(1, None))
    assert (after.status, after.first.signature, after.first.pod.rank) == (1, "hang", 1)
    assert "while rank 0 on node-a waited in a collective" in after.first.cause
    # while they wait: the same log cut before rank 0's timeout, both Running
    lines = (LOGS / "stop-node0.log").read_text().splitlines()
    waiting = "\n".join(lines[:next(i for i, line in enumerate(lines) if "rank 0 failed" in line)])
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Running"}}
    views = core.build_views(workflow, [pod(0, "Running", None), pod(1, "Running", None)], [],
                             {"job-node-0": waiting, "job-node-1": (LOGS / "stop-node1.log").read_text()})
    live = core.diagnose(workflow, views)
    assert (live.status, live.first.signature, live.first.pod.host) == (1, "hang", "node-b")


def test_waiting_ranks_without_a_silent_one_are_not_a_hang():
    line = "2026-12-04T17:00:{:02d}.000000Z [trainer] rank {} (node {}): no step finished for 60 s (step 3/9): waiting"
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Running"}}
    views = core.build_views(workflow, [pod(0, "Running", None), pod(1, "Running", None)], [],
                             {f"job-node-{r}": line.format(10 + r, r, r) for r in (0, 1)})
    assert core.diagnose(workflow, views).status == 0


@pytest.mark.parametrize("source, text, expected", [
    ("log", "[W socket.cpp:697] [c10d] Unable to resolve hostname to a (local) address. Using the loopback address "
            "as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.", "gloo-loopback"),
    ("log", "RuntimeError: Gloo connectFullMesh failed with [../gloo/transport/tcp/pair.cc:144] no error 127.0.1.1",
     "gloo-loopback"),
    ("log", "ERROR: NIC 'ens9' does not exist on this node (interfaces: lo, eth0)", "missing-nic"),
    ("log", "EI0006: Getting socket times out. Reason: 1. The remote does not send the connect request",
     "hccl-socket-timeout"),
    ("log", "EI0002: The wait execution of the Notify register times out.", "hccl-notify-timeout"),
    ("log", "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for "
            "600000 milliseconds before timing out.", "nccl-watchdog"),
    ("log", "npu-smi: dcmi module initialize failed. ret is -8005", "no-npu"),
    ("log", "torch.distributed.DistStoreError: Timed out after 301 seconds waiting for clients. 1/2 clients joined.",
     "rendezvous-timeout"),
    ("log", "stopped workflow job: gang not placed within 60 s", "gang-not-placed"),
    ("log", "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory",
     "shm-bus-error"),
    ("log", "/bin/sh: 1: torchrun: command not found", "command-not-found"),
    ("log", "torch.distributed.elastic.multiprocessing.api.SignalException: Process 41 got signal: 15", "stopped"),
    ("state", "terminated OOMKilled", "oom-killed"),
    ("state", "waiting ImagePullBackOff: Back-off pulling image \"registry.example.com/t:0.1\"", "image-pull"),
    ("state", "waiting InvalidImageName: couldn't parse image reference \"Bad Name\"", "image-pull"),
    ("event", "FailedScheduling: 0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
     "no-such-host"),
    ("event", "FailedScheduling: 0/2 nodes are available: 2 Insufficient huawei.com/Ascend910.", "insufficient-npu"),
    ("event", "FailedScheduling: 0/1 nodes are available: 1 node(s) had untolerated taint {gpu: true}.",
     "untolerated-taint"),
    ("event", "FailedMount: MountVolume.SetUp failed for volume \"data\" : hostPath type check failed", "failed-mount"),
    # the kubelet's words (pkg/volume/hostpath), as a real node printed them (facts: real nodes)
    ("event", "FailedMount: MountVolume.SetUp failed for volume \"ascend-npu-smi\" : hostPath type check failed: "
              "/usr/local/bin/npu-smi is not a file", "hostpath-missing"),
    ("event", "FailedMount: MountVolume.SetUp failed for volume \"data\" : hostPath type check failed: /data/set is "
              "not a directory", "hostpath-missing"),
    ("log", "python3: can't open file '/opt/torchdag/trainer/agents/record.py': [Errno 2] No such file or directory",
     "helper-missing"),
    ("log", "/usr/bin/python3: can't open file '/workspace/train.py': [Errno 2] No such file or directory",
     "script-missing"),
])
def test_each_known_signature_is_recognised(source, text, expected):
    sig, found = signatures.match(text, source)
    cause, fix = sig.describe(found)
    assert sig.id == expected and cause and fix and not re.search(r"\{\d+\}", cause)


def test_exit_codes_say_what_they_mean():
    assert "OOM" in core.exit_meaning(137) and "SIGTERM" in core.exit_meaning(143)
    assert "/dev/shm" in core.exit_meaning(135) and "not found" in core.exit_meaning(127)
    assert core.exit_meaning(0) == "" and "signal 10" in core.exit_meaning(138)


def test_a_bare_oom_kill_is_named_by_its_exit_code():
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed"}}
    views = core.build_views(workflow, [pod(0, "Succeeded", 0), pod(1, "Failed", 137)], [], {})
    result = core.diagnose(workflow, views)
    assert (result.status, result.first.pod.rank, result.first.signature) == (1, 1, "exit-137")


def test_rendezvous_timeout_names_the_ranks_that_never_joined():
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed"}}
    pending = pod(1, "Pending", None)
    pending["status"]["containerStatuses"] = []
    pending["spec"] = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "values": ["node-z"]}]}]}}}}
    logs = {"job-node-0": "2026-12-04T17:30:00Z torch.distributed.DistStoreError: Timed out after 61 seconds "
                          "waiting for clients. 1/2 clients joined."}
    result = core.diagnose(workflow, core.build_views(workflow, [pod(0), pending], [], logs))
    assert result.first.signature == "rendezvous-timeout"
    assert "never joined: rank 1 on node-z (Pending)" in result.first.cause


def test_a_pod_deleted_unscheduled_is_named_from_the_workflow_and_its_events():
    """Argo deletes Pending pods when the job is stopped: the Workflow's node keeps the rank
    and host, the events keep the scheduler's reason."""
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed", "nodes": {
        "job-1": {"type": "Pod", "templateName": "cpu-x1", "name": "job.train.node-1", "phase": "Failed",
                    "message": "workflow shutdown with strategy:  Terminate",
                    "inputs": {"parameters": [{"name": "host", "value": "no-such-host"},
                                              {"name": "node-rank", "value": "1"}]}}}}}
    event = {"involvedObject": {"kind": "Pod", "name": "job-cpu-x1-546219828"}, "reason": "FailedScheduling",
             "message": "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
             "firstTimestamp": "2026-12-04T17:30:01Z"}
    views = core.build_views(workflow, [pod(0, "Failed", 143)], [event], {})
    result = core.diagnose(workflow, views)
    assert (result.first.signature, result.first.pod.rank, result.first.pod.host) == (
        "no-such-host", 1, "no-such-host")


def test_healthy_and_unrecognised():
    done = {"metadata": {"name": "job"}, "status": {"phase": "Succeeded"}}
    assert core.diagnose(done, core.build_views(done, [pod(0, "Succeeded", 0)], [], {})).status == 0
    failed = {"metadata": {"name": "job"}, "status": {"phase": "Failed"}}
    logs = {"job-node-0": "2026-12-04T17:30:00Z something odd happened"}
    result = core.diagnose(failed, core.build_views(failed, [pod(0, "Failed", 3)], [], logs))
    assert result.status == 2 and result.first.pod.rank == 0


def test_status_table_and_merged_logs():
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Running", "nodes": {
        "job-7": {"type": "Pod", "templateName": "t", "progress": "12/40"}}}}
    pods = [pod(0, "Running", None), pod(1, "Pending", None)]
    pods[1]["spec"] = {}
    pods[1]["status"]["containerStatuses"] = []
    pods[0]["metadata"]["name"] = "job-t-7"
    logs = {"job-t-7": "2026-12-04T17:30:00Z [trainer] step 12/40 loss 1.0\n2026-12-04T17:30:02Z b",
            "job-node-1": "2026-12-04T17:30:01Z a"}
    views = core.build_views(workflow, pods, [], logs)
    rows = status_rows(workflow, views, dt.datetime(2026, 12, 4, 17, 30, 12, tzinfo=dt.timezone.utc))
    assert rows[0] == "workflow job: Running"
    assert rows[2].split()[:5] == ["0", "node-a", "198.18.0.1", "job-t-7", "Running"]
    assert rows[2].split()[-3:] == ["0", "12/40", "10s"]
    assert "Pending (waiting to be scheduled)" in rows[3]
    assert merged_lines(views) == ["[rank 0 node-a] [trainer] step 12/40 loss 1.0", "[rank 1 -] a",
                                   "[rank 0 node-a] b"]


@pytest.mark.parametrize("argv, words", [
    (["diagnose", "job", "--kubeconfig", "/nonexistent/kubeconfig"], "kubeconfig /nonexistent/kubeconfig: no such"),
    (["status", "job", "--kubeconfig", "{unreachable}"], "cannot reach the API server https://127.0.0.1:9: "
                                                         "Connection refused"),
    (["logs", "job", "--rank", "1", "--kubeconfig", "{unreachable}"], "cannot reach the API server"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, words):
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
                      "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
                      "current-context: c\n")
    argv = [str(config) if a == "{unreachable}" else a for a in argv]
    done = subprocess.run([sys.executable, "-m", "torchdag", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1 and words in done.stderr
    assert done.stderr.startswith(f"torchdag {argv[0]}: error: ")


def test_the_smoke_summary_names_the_first_cause_not_the_first_exit():
    """make smoke's summary decides with the same module: node-0 exited first (connection
    reset), node-1 raised first."""
    from testbed.localrun import Outcome, TaskResult, outcome_lines

    results = []
    for rank in (0, 1):
        result = TaskResult(f"node-{rank}", pid=100 + rank, returncode=1, started=0.0, ended=5.0)
        for line in core.parse_log((LOGS / f"raise-node{rank}.log").read_text()):
            result.tail.append((line.time, line.text))
        results.append(result)
    lines = outcome_lines(Outcome("job", results, first_failure="node-0", elapsed=5.0))
    assert lines[3] == "node-1 failed first (exit 1 after 5.0 s)", lines
    assert lines[4] == ("cause: the training script raised RuntimeError: injected failure at step 5 "
                        "[python-exception]") and lines[5].startswith("fix: ")


def test_the_watchs_verdict_is_the_unscheduled_ranks():
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed"}}
    watch = {"metadata": {"name": "job-schedule-watch-9", "labels": {"torchdag.io/role": "schedule-watch"}},
             "spec": {"nodeName": "node-a"}, "status": {"phase": "Failed"}}
    logs = {"job-schedule-watch-9": "2026-12-04T17:31:00Z [gang-watch] not scheduled within 60 s: 1/2 pods "
                                    "scheduled; node-rank 1 on host host-z (pod job-cpu-x1-1): Unschedulable: x"}
    result = core.diagnose(workflow, core.build_views(workflow, [pod(0, "Failed", 143), watch], [], logs))
    assert (result.first.signature, result.first.pod.rank, result.first.pod.host) == ("never-scheduled", 1, "host-z")


def test_without_the_kubernetes_client_one_line_says_what_to_install():
    code = ("import sys; sys.modules['kubernetes'] = None\n"
            "from torchdag.cli import torchdag_main\nsys.exit(torchdag_main(['logs', 'x']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr == ("torchdag logs: error: this command needs the Kubernetes Python "
                                                    "client: pip install '.[cluster]' in a checkout of torchdag "
                                                    "(or pip install kubernetes)\n")


def test_docs_list_every_signature():
    text = (REPO / "docs" / "failures.md").read_text()
    assert [s.id for s in signatures.load() if f"| `{s.id}` |" not in text] == []
