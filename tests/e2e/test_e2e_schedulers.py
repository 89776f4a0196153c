"""Gangs placed by the real schedulers (issue 40): Kueue's controller manager and
scheduler-plugins' Coscheduling (scheduler and controller), built from their modules, in a
local cluster of this module's own (`up --schedulers kueue,coscheduling`). Volcano's module is
not served here, so `gang: volcano` keeps kube-scheduler's stand-in profile
(tests/e2e/test_e2e_gang.py) and is not tried against a real Volcano.

For each real scheduler, three jobs, all started at once on the one cluster (their waits
overlap; each has hosts, a namespace and a process kubelet of its own, with
`--no-checkout-map`: the pods see only what torchdag's image holds, as the Dockerfile copies it):

- **recovery**: a 3-node gang with node recovery. The scheduler admits it (coscheduling: the
  PodGroup's phase moves as scheduler-plugins' controller sets it; Kueue: the Workload is
  admitted and the pods ungated), then one node's pod is deleted after the first checkpoint:
  the retried pod is placed and the Workflow ends Succeeded at its step count.
- **unplaceable**: the third host has 2 NPUs where its task asks for 4 (with Kueue, the
  ClusterQueue's quota is what the hosts really have, as docs/gang.md tells admins): no pod of
  the gang binds while the watch waits, the watch stops the Workflow at `scheduling.timeout`
  plus one poll, and diagnose names the host and the scheduler's own reason.
- **elastic**: `elastic.minNodes: 2` of 3; the third member's host is removed and its pod
  deleted: the other two finish alone (world size 2), as values.md says.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from cluster_helpers import CLUSTER_BINARIES, LocalCluster, require_e2e, running_cluster
from e2e_helpers import ARGOEXEC, open_job, rank_of
from kubelet_cluster_helpers import KubeletProcess

from helpers import REPO
from testbed.cluster import schedulers
from trainer import checkpoint

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e, pytest.mark.long]

GANGS = ("kueue", "coscheduling")
GANG_TIMEOUT = 30
WATCH_POLL = 5  # the watch's default --poll
STEPS, EVERY = 2000, 100  # the deletion comes after the first checkpoint, well before the end
GROUP = {"coscheduling": "scheduling.x-k8s.io"}
WORKLOADS = "workloads.kueue.x-k8s.io"


@dataclass
class Run:
    """What one scenario saw, for its test to check."""

    gang: str
    name: str = ""
    hosts: list[str] = field(default_factory=list)
    deleted_uid: str = ""
    workflow: dict = field(default_factory=dict)
    phases: list[str] = field(default_factory=list)  # the PodGroup's, or Kueue Workload conditions, in order
    bound: list[str] = field(default_factory=list)  # training pods seen bound (unplaceable: must stay empty)
    took: float = 0.0
    log: str = ""  # the watch's log (unplaceable)
    diagnose: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    pods: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    explain: str = ""


# A cluster already up with the schedulers (`make cluster-up cluster-schedulers`'s CLUSTER_DIR),
# to run this module again without starting one.
CLUSTER_ENV = "TORCHDAG_TEST_GANG_CLUSTER"


@pytest.fixture(scope="module")
def gang_cluster(tmp_path_factory):
    """One cluster with the real schedulers for the whole module."""
    if os.environ.get(CLUSTER_ENV):
        yield LocalCluster(Path(os.environ[CLUSTER_ENV]))
        return
    require_e2e((*CLUSTER_BINARIES,))
    missing = [str(schedulers.binary(p)) for name in GANGS for p in schedulers.PROCESSES[name]
               if not schedulers.binary(p).exists()]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)}: run `make cluster-schedulers` (or `make go-tools`)")
    with running_cluster(tmp_path_factory.mktemp("gang-cluster"), "--schedulers", ",".join(GANGS)) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def module_kubelet(gang_cluster, tmp_path_factory):
    """One process kubelet for every job of the module (as `make cluster-kubelet`): the pods that
    are not pinned (the scheduling watch, the helpers' task) land on any job's host, so a job's
    own kubelet would take another job's pods down with it. It maps only torchdag's image."""
    kubelet = KubeletProcess(gang_cluster.kubeconfig, "torchdag.io/accelerator",
                             tmp_path_factory.mktemp("module") / "kubelet", "--argoexec", str(ARGOEXEC),
                             "--no-checkout-map", "--torchdag-image", "--cpu")
    yield kubelet
    kubelet.stop()


def _nodes(subnet: int, devices: list[int]) -> list[dict]:
    return [{"address": f"198.18.{subnet}.{i + 1}", "nic": f"eth{subnet}", "accelerator": "ascend310p",
             "devices": count, **({"master": True} if i == 0 else {})} for i, count in enumerate(devices)]


def _gang_values(job, gang: str, subnet: int, devices: list[int], args: list[str], extra: str = ""):
    queue = ", queue: training" if gang == "kueue" else ""
    text = (f"scheduling: {{gang: {gang}, timeout: {GANG_TIMEOUT}{queue}}}\nbackend: gloo\n"
            "workflow: {podGC: ''}\n" + extra)
    return job.values(_nodes(subnet, devices), args, extra=text)


def _kueue_queue(job, quota_npus: int) -> None:
    """docs/gang.md's admin steps for this namespace: a ClusterQueue whose quota is what the
    job's hosts have (NPUs; cpu and memory to spare) and the LocalQueue `training`."""
    cluster_queue = f"cq-{job.namespace}"
    objects = schedulers.kueue_queue_objects({"cpu": "64", "memory": "256Gi", "huawei.com/Ascend310P":
                                              str(quota_npus)}, cluster_queue=cluster_queue)[1:]
    objects.append(schedulers.local_queue(job.namespace, "training", cluster_queue))
    job.cluster.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                              "items": objects}))


def _group_state(job, gang: str, name: str) -> str | None:
    """The PodGroup's phase (coscheduling), or the Kueue Workload's admission in words."""
    if gang == "kueue":
        found = job.cluster.kubectl("get", WORKLOADS, "-n", job.namespace, "-o", "json", check=False)
        items = json.loads(found.stdout or "{}").get("items", []) if found.returncode == 0 else []
        for workload in items:
            conditions = {c["type"]: c for c in workload.get("status", {}).get("conditions", [])}
            for kind in ("Finished", "Admitted", "QuotaReserved"):
                if kind in conditions:
                    c = conditions[kind]
                    return f"{kind}={c['status']}" + ("" if c["status"] == "True" else f" ({c.get('message', '')})")
            return "Pending"
        return None
    found = job.cluster.kubectl("get", f"podgroups.{GROUP[gang]}", name, "-n", job.namespace, "-o", "json",
                                check=False)
    return (json.loads(found.stdout).get("status") or {}).get("phase") or "(none)" if found.returncode == 0 else None


class Watcher:
    """Polls, in a thread of its own, the group's state and the training pods' binding."""

    def __init__(self, job, gang: str, run: Run):
        self.job, self.gang, self.run = job, gang, run
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        if not self.thread.is_alive():
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)

    def _loop(self) -> None:
        while not self.stop.wait(1.0):
            try:
                state = _group_state(self.job, self.gang, self.run.name)
                if state and (not self.run.phases or self.run.phases[-1] != state):
                    self.run.phases.append(state)
                for pod in self.job.pods(self.run.name):
                    if rank_of(pod) is not None and pod["spec"].get("nodeName"):
                        if pod["metadata"]["name"] not in self.run.bound:
                            self.run.bound.append(pod["metadata"]["name"])
            except Exception as exc:  # noqa: BLE001 -- a poll that failed is retried; the last is noted
                self.run.notes.append(f"poll: {exc}")


def any_log(job, pod: dict, container: str = "main") -> str:
    """A pod's log wherever it ran: the scheduling watch is not pinned, and may run on a host of
    another job of the module, whose kubelet keeps its log."""
    meta = pod["metadata"]
    found = sorted(job.dir.parent.glob(f"*/kubelet/logs/{meta['namespace']}/{meta['name']}/{container}.log"))
    return found[0].read_text(errors="replace") if found else ""


def _finished(job, run: Run, timeout: float) -> None:
    run.workflow = job.wait_finished(run.name, timeout=timeout)
    run.pods = job.pods(run.name)
    if run.workflow["status"]["phase"] != "Succeeded":
        nodes = {n["displayName"]: (n["phase"], n.get("message", "")) for n in run.workflow["status"]["nodes"].values()}
        events = job.cluster.kubectl("get", "events", "-n", job.namespace, "--sort-by=.lastTimestamp", check=False)
        groups = job.cluster.kubectl("get", WORKLOADS if run.gang == "kueue" else f"podgroups.{GROUP[run.gang]}",
                                     "-n", job.namespace, "-o", "yaml", check=False)
        run.explain = (f"{run.workflow['status'].get('message')}\n{json.dumps(nodes, indent=1)}\n"
                       f"{events.stdout[-4000:]}\n{groups.stdout[-3000:]}")


def _train(job, gang: str, subnet: int, extra: str = "") -> tuple[Run, Watcher]:
    args = ["--type", "example", "--max-steps", str(STEPS), "--log-every", "0",
            "--checkpoint-dir", str(job.dir / "ckpt"), "--checkpoint-every", str(EVERY),
            "--metrics-file", str(job.dir / "metrics.json")]
    values = _gang_values(job, gang, subnet, [1, 1, 1], args,
                          "failurePolicy: {maxRestarts: 2, backoffSeconds: 1}\n" + extra)
    if gang == "kueue":
        _kueue_queue(job, 3)
    job.start(values, serve=False)
    run = Run(gang)
    run.name = job.submit(job.render(values))
    watcher = Watcher(job, gang, run).__enter__()
    job.cluster.wait_for(f"{run.name}: the first checkpoint",
                         lambda: checkpoint.list_checkpoints(str(job.dir / "ckpt")), timeout=400, every=0.5)
    return run, watcher


def _running(job, name: str) -> dict[int, dict]:
    return {rank_of(p): p for p in job.pods(name) if rank_of(p) is not None and p["status"].get("phase") == "Running"}


def recovery(job, gang: str) -> Run:
    run, watcher = _train(job, gang, 41 if gang == "kueue" else 42)
    with watcher:
        before = _running(job, run.name)
        run.notes.append(f"running before: {sorted(before)}")
        run.deleted_uid = before[1]["metadata"]["uid"]
        job.cluster.kubectl("delete", "pod", "-n", job.namespace, before[1]["metadata"]["name"], "--wait=false")
        _finished(job, run, 500)
    run.metrics = json.loads((job.dir / "metrics.json").read_text()) if (job.dir / "metrics.json").exists() else {}
    return run


def elastic(job, gang: str) -> Run:
    run, watcher = _train(job, gang, 43 if gang == "kueue" else 44, "elastic: {minNodes: 2, rejoinSeconds: 10}\n")
    with watcher:
        lost = _running(job, run.name)[2]
        # The host is gone with its processes: the pod first, while the module's kubelet still
        # serves its Node and ends its processes, then the Node.
        job.cluster.kubectl("delete", "pod", "-n", job.namespace, lost["metadata"]["name"], "--wait=false")
        job.cluster.kubectl("delete", "node", lost["spec"]["nodeName"], "--wait=false")
        _finished(job, run, 500)
    run.metrics = json.loads((job.dir / "metrics.json").read_text()) if (job.dir / "metrics.json").exists() else {}
    return run


def unplaceable(job, gang: str) -> Run:
    subnet = 45 if gang == "kueue" else 46
    args = ["--type", "example", "--max-steps", "100000"]
    hosts = _gang_values(job, gang, subnet, [4, 4, 2], args).rename(job.dir / "hosts.yaml")
    values = _gang_values(job, gang, subnet, [4, 4, 4], args)
    if gang == "kueue":
        _kueue_queue(job, 4 + 4 + 2)  # what the hosts have
    job.start(values, hosts_from=hosts, serve=False)
    run = Run(gang)
    run.name = job.submit(job.render(values))
    with Watcher(job, gang, run):
        _finished(job, run, GANG_TIMEOUT + 200)
    watch = next(p for p in run.pods if p["metadata"]["labels"].get("torchdag.io/role") == "gang-watch")
    run.log = any_log(job, watch)
    main = next(c for c in watch["status"].get("containerStatuses", []) if c["name"] == "main")
    ended = main["state"].get("terminated") or {}
    if ended.get("startedAt") and ended.get("finishedAt"):
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        run.took = (time.mktime(time.strptime(ended["finishedAt"], stamp))
                    - time.mktime(time.strptime(ended["startedAt"], stamp)))
    run.hosts = list(job.hosts)
    done = subprocess.run([sys.executable, "-m", "torchdag", "diagnose", run.name, "--json", "-n", job.namespace,
                           "--kubeconfig", str(job.cluster.kubeconfig)], cwd=REPO, capture_output=True, text=True,
                          timeout=400)  # 2 cores shared with the other jobs: diagnose is slow, not stuck
    run.diagnose = dict(json.loads(done.stdout or "{}"), exit=done.returncode, stderr=done.stderr[-2000:])
    # What is left of the gang once the job is stopped: no pod held Terminating by a finalizer.
    job.cluster.wait_for("the stopped gang's pods gone", lambda: not [
        p for p in job.pods(run.name) if rank_of(p) is not None and p["status"].get("phase") in ("Pending", "Running")],
        timeout=60)
    return run


SCENARIOS = {"recovery": recovery, "unplaceable": unplaceable, "elastic": elastic}


# Which scenario each test reads (its `gang` parameter says under which scheduler).
TEST_SCENARIO = {"test_a_gang_is_admitted_by_the_real_scheduler_and_a_retried_pod_placed": "recovery",
                 "test_a_gang_one_host_short_stays_unbound_and_is_stopped_at_its_timeout": "unplaceable",
                 "test_elastic_members_of_a_gang_go_on_without_a_lost_host": "elastic"}


@pytest.fixture(scope="module")
def runs(gang_cluster, module_kubelet, tmp_path_factory, request):
    """Every scenario the selected tests read, under each scheduler, all at once; each test
    reads its own outcome (`-k` runs only the jobs its tests need)."""
    wanted = {(TEST_SCENARIO[item.originalname], item.callspec.params["gang"]) for item in request.session.items
              if item.module is request.module and getattr(item, "originalname", "") in TEST_SCENARIO}
    def one(scenario: str, gang: str) -> Run:
        with open_job(gang_cluster, tmp_path_factory.mktemp(f"{scenario}-{gang}")) as job:
            try:
                return SCENARIOS[scenario](job, gang)
            except BaseException:  # said at once: the test that reads it may come much later
                print(f"--- {scenario} under {gang} failed:\n{traceback.format_exc()}", flush=True)
                raise

    with ThreadPoolExecutor(max(1, len(wanted))) as pool:
        futures = {(s, g): pool.submit(one, s, g) for s, g in sorted(wanted)}
        yield futures


def _result(runs, scenario: str, gang: str) -> Run:
    run = runs[(scenario, gang)].result()
    print(f"{scenario} under {gang}: {run.name}: states {run.phases}; bound {run.bound}; notes {run.notes[-3:]}")
    return run


@pytest.mark.parametrize("gang", GANGS)
def test_a_gang_is_admitted_by_the_real_scheduler_and_a_retried_pod_placed(runs, gang):
    run = _result(runs, "recovery", gang)
    assert run.workflow["status"]["phase"] == "Succeeded", run.explain
    assert run.metrics.get("steps") == STEPS and run.metrics.get("world_size") == 3, run.metrics
    assert run.metrics.get("resumed_from_step", 0) >= EVERY, run.metrics
    training = [p for p in run.pods if rank_of(p) is not None]
    retried = [p for p in training if rank_of(p) == 1]  # the deleted pod is gone: this is its retry
    assert retried and all(p["metadata"]["uid"] != run.deleted_uid and p["spec"].get("nodeName") for p in retried), [
        (p["metadata"]["name"], p["spec"].get("nodeName")) for p in retried]
    if gang == "coscheduling":
        # scheduler-plugins' controller moves the phase, not our watch: Scheduling once the
        # first pod is bound, Running when minMember run, Finished at the end
        assert run.phases[0] in ("Pending", "(none)"), run.phases
        assert "Running" in run.phases, run.phases
        assert run.phases.index("Running") > 0
        for pod in training:
            assert pod["spec"]["schedulerName"] == schedulers.COSCHEDULING_NAME
    else:
        assert any(state.startswith("Admitted=True") or state.startswith("QuotaReserved=True")
                   for state in run.phases), run.phases
        for pod in training:  # Kueue gated each pod and lifted the gate when it admitted the group
            assert not pod["spec"].get("schedulingGates"), pod["spec"].get("schedulingGates")


@pytest.mark.parametrize("gang", GANGS)
def test_a_gang_one_host_short_stays_unbound_and_is_stopped_at_its_timeout(runs, gang):
    run = _result(runs, "unplaceable", gang)
    short_host = run.hosts[2]  # the third host has 2 NPUs of the 4 its task asks
    assert run.workflow["status"]["phase"] == "Failed", run.explain
    assert run.bound == [], f"pods of an unplaceable gang were bound: {run.bound}"
    assert f"gang not placed within {GANG_TIMEOUT} s: 0/3 pods scheduled; " in run.log, run.log
    assert re.search(rf"\[gang-watch\] stopped workflow {run.name}: gang not placed within {GANG_TIMEOUT} s; "
                     rf"(podgroups|workloads) {run.name} deleted", run.log), run.log
    # stopped at scheduling.timeout plus one poll of the watch; the container's start and end as the
    # kubelet reports them also hold the interpreter's start and the PATCH and DELETE, which took up
    # to 12 s more at a load average of 50 on the 2-core machine
    assert GANG_TIMEOUT <= run.took <= GANG_TIMEOUT + WATCH_POLL + 20, run.took
    first = run.diagnose.get("first") or {}
    evidence = " ".join(first.get("evidence", []))
    if gang == "coscheduling":
        # the rank that does not fit comes first in the watch's verdict, on its host, in the scheduler's
        # own words; diagnose names that host, from the verdict or from the pod's own FailedScheduling
        # event (insufficient-npu), whichever came first; the others' "optimistic rejection" are effects
        assert re.search(rf"0/3 pods scheduled; node-rank 2 on host {short_host} \(pod \S+\): Unschedulable: "
                         r".*1 Insufficient huawei.com/Ascend310P", run.log), run.log
        assert first.get("signature") in ("gang-not-placed", "insufficient-npu"), run.diagnose
        assert first.get("host") == short_host, run.diagnose
        assert "Insufficient huawei.com/Ascend310P" in evidence, evidence
    else:
        assert first.get("signature") == "gang-not-placed", run.diagnose
        # Kueue admits by quota: its Workload's reason names the resource short, the pods are only gated
        assert first.get("host") in run.hosts, run.diagnose
        assert re.search(rf"workloads {run.name}: couldn't assign flavors to pod set \S+: insufficient quota for "
                         r"huawei.com/Ascend310P", evidence), evidence
    print(f"unplaceable under {gang}: the watch stopped the job {run.took:.0f} s after it started; "
          f"diagnose: {first.get('cause')} | {evidence[:400]}")


@pytest.mark.parametrize("gang", GANGS)
def test_elastic_members_of_a_gang_go_on_without_a_lost_host(runs, gang):
    run = _result(runs, "elastic", gang)
    assert run.workflow["status"]["phase"] == "Succeeded", run.explain
    assert run.metrics.get("world_size") == 2 and run.metrics.get("steps") == STEPS, run.metrics


def test_the_schedulers_serve_their_names_alone(gang_cluster):
    """kube-scheduler no longer serves coscheduling's name once the real one runs; Kueue's
    webhooks are served on loopback with the cluster's CA."""
    config = yaml.safe_load((gang_cluster.dir / "scheduler.yaml").read_text())
    assert [p["schedulerName"] for p in config["profiles"]] == ["default-scheduler", "volcano"]
    hooks = gang_cluster.get("mutatingwebhookconfigurations", "kueue-mutating-webhook-configuration")
    urls = {hook["clientConfig"]["url"] for hook in hooks["webhooks"]}
    assert urls and all(url.startswith("https://127.0.0.1:") for url in urls), urls
