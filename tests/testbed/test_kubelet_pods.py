"""The process kubelet's pod life without a cluster: real processes, a recording stand-in
for the API server. Statuses as kubelet reports them, termination messages, the
ServiceAccount token at its in-cluster path, logs, stopping, deletion (--no-exec: test_kubelet_no_exec.py)."""

from __future__ import annotations

import copy
import io
import os
import subprocess
import sys
import time

import pytest
from required import missing

from testbed.kubelet import pods as pods_module
from testbed.kubelet import sandbox
from testbed.kubelet.kubelet import Kubelet
from testbed.kubelet.pods import PodWorker
from testbed.kubelet.sandbox import MEMORY_ROOT, Sandbox, can_mount, wrap
from testbed.kubelet.status import ContainerState, PodState, exit_code_of, termination_message
from testbed.kubelet.workflows import stop_reason
from testbed.runtime import Options


@pytest.fixture
def mounts_allowed():
    """Per-pod mounts need root and unshare: `make test` fails without them (tests/required.py)."""
    if not can_mount():
        missing("per-pod mounts need root and unshare --mount")


class FakeApi:
    api_host, api_port = "127.0.0.1", 6443

    def __init__(self):
        self.statuses: list[dict] = []
        self.deleted: list[str] = []

    def patch_pod_status(self, namespace, name, status):
        self.statuses.append(copy.deepcopy(status))

    def token_for(self, namespace, account, pod, seconds):
        return f"token-of-{account}-for-{pod['metadata']['name']}"

    def ca_bytes(self):
        return b"CA PEM"

    def config_map_data(self, namespace, name):
        return {"k": "from-configmap"} if name == "cm" else None

    def secret_data(self, namespace, name):
        return None

    def delete_pod_now(self, namespace, name, uid):
        self.deleted.append(name)

    def get_or_none(self, path):
        return None


def make_kubelet(tmp_path, **kw) -> tuple[Kubelet, FakeApi]:
    api = FakeApi()
    kubelet = Kubelet(api, ["node-a"], state_dir=tmp_path, options=Options(), out=io.StringIO(), **kw)
    return kubelet, api


def pod(*containers, inits=(), volumes=(), name="p1", grace=None) -> dict:
    spec = {"nodeName": "node-a", "restartPolicy": "Never", "serviceAccountName": "trainer",
            "containers": list(containers), "initContainers": list(inits), "volumes": list(volumes)}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}-0000"}, "spec": spec,
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}}


def sh(name: str, script: str, **fields) -> dict:
    return {"name": name, "image": "busybox", "command": ["/bin/sh", "-c", script], **fields}


def run(kubelet: Kubelet, p: dict, timeout: float = 20) -> PodWorker:
    worker = PodWorker(kubelet, p)
    kubelet.workers[p["metadata"]["uid"]] = worker
    worker.start()
    assert worker.done.wait(timeout), "the pod did not finish"
    return worker


def test_init_then_main_statuses_and_logs(tmp_path):
    kubelet, api = make_kubelet(tmp_path)
    p = pod(sh("main", "echo main says $(WHO); exit 3", env=[{"name": "WHO", "value": "hi"}]),
            inits=[sh("init", "echo init ran")])
    run(kubelet, p)
    phases = [s["phase"] for s in api.statuses]
    assert phases[0] == "Pending" and "Running" in phases and phases[-1] == "Failed"
    final = api.statuses[-1]
    term = final["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error") and term["finishedAt"] and term["startedAt"]
    assert final["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert {c["type"]: c["status"] for c in final["conditions"]} == {
        "PodScheduled": "True", "PodReadyToStartContainers": "False", "Initialized": "True",
        "ContainersReady": "False", "Ready": "False"}
    assert final["hostIP"] == final["podIP"] == "127.0.0.1"
    logs = tmp_path / "logs" / "team" / "p1"
    assert (logs / "main.log").read_text() == "main says hi\n"
    assert (logs / "init.log").read_text() == "init ran\n"


def test_failed_init_stops_the_pod(tmp_path):
    kubelet, api = make_kubelet(tmp_path)
    run(kubelet, pod(sh("main", "echo never"), inits=[sh("init", "exit 7")]))
    final = api.statuses[-1]
    assert final["phase"] == "Failed"
    assert final["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert not (tmp_path / "logs" / "team" / "p1" / "main.log").exists()


def test_termination_message_and_service_account_token(tmp_path, mounts_allowed):
    kubelet, api = make_kubelet(tmp_path)
    sa = {"name": "kube-api-access-1", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    mount = {"name": "kube-api-access-1", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    script = ("d=/var/run/secrets/kubernetes.io/serviceaccount; echo $(cat $d/token) $(cat $d/namespace) "
              "$(cat $d/ca.crt); echo 'gang not placed: p2' > /dev/termination-log; exit 1")
    run(kubelet, pod(sh("main", script, volumeMounts=[mount]), volumes=[sa]))
    term = api.statuses[-1]["containerStatuses"][0]["state"]["terminated"]
    assert term["message"] == "gang not placed: p2\n"
    assert (tmp_path / "logs/team/p1/main.log").read_text() == "token-of-trainer-for-p1 team CA PEM\n"


def test_fallback_to_logs_on_error(tmp_path):
    kubelet, api = make_kubelet(tmp_path)
    run(kubelet, pod(sh("main", "echo last words; exit 2", terminationMessagePolicy="FallbackToLogsOnError",
                        terminationMessagePath=str(tmp_path / "nowhere-log"))))
    assert api.statuses[-1]["containerStatuses"][0]["state"]["terminated"]["message"] == "last words"


def test_stop_sends_sigterm_then_sigkill(tmp_path):
    kubelet, api = make_kubelet(tmp_path)
    p = pod(sh("main", "trap 'echo got TERM' TERM; while :; do sleep 0.1; done"), grace=1)
    worker = PodWorker(kubelet, p)
    worker.start()
    deadline = time.monotonic() + 10
    while not worker.trees and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    begin = time.monotonic()
    worker.stop("pod deleted", 1.0)
    assert worker.done.wait(10)
    assert 0.9 <= time.monotonic() - begin < 5, "the trap ignores SIGTERM: SIGKILL after the 1 s grace"
    term = api.statuses[-1]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["signal"]) == (137, 9)
    assert "got TERM" in (tmp_path / "logs/team/p1/main.log").read_text()


def test_deleted_pod_is_stopped_then_removed(tmp_path):
    kubelet, api = make_kubelet(tmp_path)
    p = pod(sh("main", "exec sleep 30"))
    kubelet.on_pod("ADDED", p)
    worker = kubelet.workers[p["metadata"]["uid"]]
    deadline = time.monotonic() + 10
    while not worker.trees and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = dict(p, metadata=dict(p["metadata"], deletionTimestamp="2026-12-02T12:00:00Z",
                                 deletionGracePeriodSeconds=5))
    kubelet.on_pod("MODIFIED", gone)
    assert worker.done.wait(10)
    assert api.deleted == ["p1"], "deleted with grace 0 once the processes are gone"
    term = api.statuses[-1]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term.get("signal")) == (143, 15)
    kubelet.on_pod("MODIFIED", pod(sh("main", "exit 0"), name="elsewhere") | {"spec": {"nodeName": "node-z"}})
    assert len(kubelet.workers) == 1, "pods of other Nodes are not ours"


def test_phase_rules_and_messages():
    state = PodState("n", "1.2.3.4", "1.2.3.4", inits=[ContainerState("i", "x", init=True)],
                     mains=[ContainerState("m", "x"), ContainerState("wait", "x", stand_in=True)])
    assert state.phase() == "Pending"
    state.inits[0].start(1, "n")
    state.inits[0].finish(0)
    state.mains[0].start(2, "n")
    assert state.phase() == "Running"
    state.mains[0].finish(0)
    state.mains[1].finish(0)
    assert state.phase() == "Succeeded"
    assert exit_code_of(-15) == (143, 15) and exit_code_of(2) == (2, None)
    assert termination_message("", "FallbackToLogsOnError", 0, "log") == ""
    assert termination_message("file", "FallbackToLogsOnError", 1, "log") == "file"


def test_sandbox_binds_and_wrap(tmp_path):
    box = Sandbox.for_pod(tmp_path, pod(), mounts_allowed=True)
    notes: list[str] = []
    volumes = [{"name": "scratch", "emptyDir": {}}, {"name": "code", "hostPath": {"path": "/nonexistent-x"}}]
    mounts = [{"name": "scratch", "mountPath": "/var/run/argo"}, {"name": "code", "mountPath": "/code"},
              {"name": "nope", "mountPath": "/x"}]
    binds = box.binds(volumes, mounts, None, notes)
    assert binds == [(str(box.root / "volumes" / "scratch"), "/var/run/argo")]
    assert any("hostPath /nonexistent-x does not exist here" in n for n in notes)
    assert any("volumeMount nope: no such volume" in n for n in notes)
    assert wrap(["true"], []) == ["true"]
    assert wrap(["true"], binds)[:4] == ["unshare", "--mount", "--propagation", "private"]


def test_mount_points_made_here_are_removed_when_the_kubelet_stops(tmp_path, monkeypatch, mounts_allowed):
    """A Workflow mounts its helpers at /opt/torchdag/torchdag/agents: the kubelet makes that
    folder on this machine for the bind, and must not leave it behind (a later run would
    take the empty folder for the image's own)."""
    creatable = tmp_path / "opt"
    creatable.mkdir()
    (creatable / "kept").mkdir()  # already there: never removed
    monkeypatch.setattr(sandbox, "CREATABLE", (str(creatable) + "/",))
    monkeypatch.setattr(sandbox, "HOST_STATE", tmp_path / "host")  # no other kubelet's pods
    target = creatable / "torchdag" / "torchdag" / "agents"
    kubelet, api = make_kubelet(tmp_path / "state")
    mounted = pod(sh("main", f"test -d {target} && echo seen > {target}/../../seen-inside"),
                  volumes=[{"name": "helpers", "emptyDir": {}}])
    mounted["spec"]["containers"][0]["volumeMounts"] = [{"name": "helpers", "mountPath": str(target)}]
    run(kubelet, mounted)
    assert api.statuses[-1]["phase"] == "Succeeded", api.statuses[-1]
    assert target.is_dir()  # kept while the kubelet runs: other pods' mounts sit on it
    kubelet.shutdown(grace=0.5)
    assert not (creatable / "torchdag" / "trainer").exists()
    assert (creatable / "torchdag" / "seen-inside").exists()  # a folder with files stays
    assert (creatable / "kept").is_dir()



def test_the_last_kubelet_on_the_machine_removes_the_mount_points_any_kubelet_made(tmp_path, monkeypatch,
                                                                                 mounts_allowed):
    """Two process kubelets on one machine (the e2e tests run two at once) share the folders:
    while a pod of another kubelet has mounts (it holds the host lock shared), one that stops
    leaves them, since rmdir would detach that pod's mount; the next one to stop with no pod
    running anywhere removes them, its own and the others'."""
    creatable = tmp_path / "opt"
    creatable.mkdir()
    monkeypatch.setattr(sandbox, "CREATABLE", (str(creatable) + "/",))
    monkeypatch.setattr(sandbox, "HOST_STATE", tmp_path / "host")
    (tmp_path / "host").mkdir()
    other_made = creatable / "other" / "agents"
    other_made.mkdir(parents=True)
    (tmp_path / "host" / "made-folders").write_text(f"{other_made}\n{other_made.parent}\n")
    other_pod = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_SH); print('held', flush=True); "
        "sys.stdin.read()"), str(tmp_path / "host" / "lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other_pod.stdout.readline().strip() == "held"
        target = creatable / "torchdag" / "agents"
        kubelet, api = make_kubelet(tmp_path / "state")
        mounted = pod(sh("main", f"test -d {target}"), volumes=[{"name": "helpers", "emptyDir": {}}])
        mounted["spec"]["containers"][0]["volumeMounts"] = [{"name": "helpers", "mountPath": str(target)}]
        run(kubelet, mounted)
        assert api.statuses[-1]["phase"] == "Succeeded", api.statuses[-1]
        kubelet.shutdown(grace=0.5)
        assert target.is_dir() and other_made.is_dir()  # the other kubelet's pod still has mounts
    finally:
        other_pod.communicate("", timeout=10)
    assert set(sandbox.remove_made_folders()) == {str(other_made), str(target), str(other_made.parent),
                                                  str(target.parent)}
    assert list(creatable.iterdir()) == []

def test_a_program_under_a_bound_folder_still_runs(tmp_path, mounts_allowed):
    """Argo's own containers get an emptyDir on /tmp; a checkout under /tmp keeps argoexec
    there: the program is opened before the mounts hide it (it once exited 127, not found)."""
    program = tmp_path / "bin" / "prog"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\necho ran \"$@\"\n")
    program.chmod(0o755)
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(wrap([str(program), "a b"], [(str(empty), str(tmp_path))]), capture_output=True, text=True,
                          timeout=30, env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "ran a b"
    plain = wrap(["true"], [(str(empty), str(tmp_path))])
    assert "exec /proc/self/fd/9" not in " ".join(plain)


def test_workflow_stop_reasons():
    running = {"metadata": {"labels": {}}}
    on_exit = {"metadata": {"labels": {"workflows.argoproj.io/on-exit": "true"}}}
    assert "Terminate" in stop_reason({"spec": {"shutdown": "Terminate"}}, on_exit, 0)
    assert stop_reason({"spec": {"shutdown": "Stop"}}, on_exit, 0) is None
    assert "Stop" in stop_reason({"spec": {"shutdown": "Stop"}}, running, 0)
    late = {"spec": {"activeDeadlineSeconds": 10}, "status": {"startedAt": "2026-12-02T12:00:00Z"}}
    start = 1_796_212_800.0  # 2026-12-02T12:00:00Z
    assert stop_reason(late, running, start + 5) is None
    assert "activeDeadlineSeconds" in stop_reason(late, running, start + 11)


def test_on_failure_restarts_with_back_off(tmp_path, monkeypatch):
    monkeypatch.setattr(pods_module, "BACKOFF_FIRST", 0.3)
    kubelet, api = make_kubelet(tmp_path)
    counter = tmp_path / "runs"
    p = pod(sh("main", f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; [ $n -ge 1 ]"))
    p["spec"]["restartPolicy"] = "OnFailure"
    run(kubelet, p)
    final = api.statuses[-1]["containerStatuses"][0]
    assert api.statuses[-1]["phase"] == "Succeeded" and final["restartCount"] == 1
    assert final["lastState"]["terminated"]["exitCode"] == 1
    assert any(s["containerStatuses"][0]["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
               for s in api.statuses)
    assert counter.read_text() == "2\n"


def test_active_deadline_fails_the_pod(tmp_path):
    kubelet, api = make_kubelet(tmp_path)
    p = pod(sh("main", "exec sleep 30"))
    p["spec"]["activeDeadlineSeconds"] = 1
    begin = time.monotonic()
    run(kubelet, p)
    assert time.monotonic() - begin < 5
    final = api.statuses[-1]
    assert (final["phase"], final["reason"]) == ("Failed", "DeadlineExceeded")
    assert final["containerStatuses"][0]["state"]["terminated"]["exitCode"] in (137, 143)


def test_heartbeats_post_ready_renew_leases_and_say_failures_once():
    from kubernetes.client.exceptions import ApiException

    from testbed.kubelet.nodes import NodeKeeper

    class LeaseApi:
        def __init__(self):
            self.calls, self.down = [], False

        def request(self, method, path, body=None, content_type=None, **kw):
            if self.down:
                raise ApiException(status=503, reason="unavailable")
            self.calls.append((method, path, body))
            if method == "PATCH" and "/leases/" in path and not any(m == "POST" for m, _, _ in self.calls):
                raise ApiException(status=404, reason="not found")
            return {"status": {"conditions": body["status"]["conditions"]}} if path.endswith("/status") else {}

    api, said = LeaseApi(), []
    keeper = NodeKeeper(api, ["n1"], say=said.append)
    assert keeper.beat_all(status=True) == 0
    methods = [(m, p.rsplit("/", 2)[-2:]) for m, p, _ in api.calls]
    assert methods == [("PATCH", ["n1", "status"]), ("PATCH", ["leases", "n1"]),
                       ("POST", ["kube-node-lease", "leases"])]
    ready = next(c for c in api.calls[0][2]["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["lastHeartbeatTime"]
    api.down = True
    assert keeper.beat_all(status=False) == 1 and keeper.beat_all(status=False) == 1
    assert len(said) == 1 and "heartbeat failed" in said[0]
    api.down = False
    keeper.beat_all(status=False)
    assert said[-1] == "node n1: heartbeats go through again"
    keeper.stop()


def test_a_node_address_that_is_a_dns_name_gives_pods_the_loopback_ip():
    from testbed.kubelet.nodes import NodeKeeper

    keeper = NodeKeeper(None, ["by-name", "by-ip"])
    keeper.info = {"by-name": {"status": {"addresses": [{"type": "InternalIP", "address": "host-a"}]}},
                   "by-ip": {"status": {"addresses": [{"type": "InternalDNS", "address": "localhost"},
                                                      {"type": "InternalIP", "address": "198.18.0.2"}]}}}
    assert (keeper.address("by-name"), keeper.address("by-ip")) == ("127.0.0.1", "198.18.0.2")  # hostIP takes IPs only
    keeper.stop()


def test_memory_empty_dir_is_the_pods_own_and_released(tmp_path, mounts_allowed):
    kubelet, api = make_kubelet(tmp_path)
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    run(kubelet, pod(sh("main", "echo x > /dev/shm/mine; ls /dev/shm", volumeMounts=mounts), volumes=volumes))
    assert (tmp_path / "logs/team/p1/main.log").read_text() == "mine\n", "the pod sees its own /dev/shm"
    assert not os.path.exists("/dev/shm/mine")
    assert not (MEMORY_ROOT / "team" / "p1-uid-p1-0").exists(), "released when the pod's processes end"


def test_a_terminated_pods_volumes_are_torn_down_and_its_termination_message_kept(tmp_path, mounts_allowed):
    """As the kubelet does by default: Argo's init copies its executor (about 200 MB) into every
    pod's /var/run/argo emptyDir, so a job of many pods would otherwise fill the disk."""
    kubelet, api = make_kubelet(tmp_path)
    volumes = [{"name": "var-run-argo", "emptyDir": {}}]
    mounts = [{"name": "var-run-argo", "mountPath": "/var/run/argo"}]
    run(kubelet, pod(sh("main", "head -c 100000 /dev/zero > /var/run/argo/big; echo done > /dev/termination-log",
                        volumeMounts=mounts, terminationMessagePath="/dev/termination-log"), volumes=volumes))
    final = api.statuses[-1]
    assert final["phase"] == "Succeeded", final
    assert final["containerStatuses"][0]["state"]["terminated"]["message"] == "done\n"
    folder = tmp_path / "pods" / "team" / "p1-uid-p1-0"
    assert folder.is_dir() and not (folder / "volumes").exists(), sorted(p.name for p in folder.iterdir())


def test_a_cpu_limit_is_the_containers_cfs_quota(tmp_path):
    """resources.limits.cpu, as the kubelet applies it: the container's processes (and what they
    start) in a CPU cgroup of their own whose quota is the limit's share of each 100 ms period,
    so a busy loop is throttled; the cgroup is removed with the pod. A container without a
    limit stays where the kubelet runs."""
    from testbed.kubelet import cgroups

    assert (cgroups.quota_us("250m"), cgroups.quota_us("1"), cgroups.quota_us("1.5"), cgroups.quota_us("0.1m")) == (
        25_000, 100_000, 150_000, 1_000)
    if cgroups.cpu_root() is None or os.geteuid() != 0:
        missing("CPU limits need root and a cgroup v1 cpu hierarchy")
    kubelet, api = make_kubelet(tmp_path)
    busy = ("cat /proc/self/cgroup | grep -E ':cpu[,:]'; sh -c 'cat /proc/self/cgroup | grep -E \":cpu[,:]\"'; "
            "end=$(($(date +%s) + 2)); while [ $(date +%s) -lt $end ]; do :; done")
    limited = sh("main", busy, resources={"limits": {"cpu": "100m"}})
    free = sh("side", "cat /proc/self/cgroup | grep -E ':cpu[,:]'")
    worker = PodWorker(kubelet, pod(limited, free))
    kubelet.workers[worker.uid] = worker
    worker.start()
    deadline = time.monotonic() + 10
    while "main" not in worker.cgroups and time.monotonic() < deadline:
        time.sleep(0.05)
    path = worker.cgroups["main"].path
    assert (path / "cpu.cfs_quota_us").read_text().strip() == "10000"
    assert worker.done.wait(20)
    lines = (tmp_path / "logs/team/p1/main.log").read_text().splitlines()
    assert len(lines) == 2 and all(line.endswith("/torchdag-kubelet/poduid-p1-0000/main") for line in lines), lines
    assert (tmp_path / "logs/team/p1/side.log").read_text().strip().endswith(":/"), "no limit, no cgroup"
    assert not path.exists() and not path.parent.exists(), "removed with the pod"
    assert "cpu limit 100m: CFS quota 10000 us every 100000 us" in kubelet.out.getvalue()
