#!/usr/bin/env python3
"""Scale on the real controller: a rendered N-node × 8-NPU job on the local cluster, its pods
completed by the process kubelet without processes (--no-exec, each pod Running --hold
seconds, all at once), through one failed attempt and a whole-job restart.

For each N: render.py's size guard's verdict on the job (fits, with its budget: spec plus
the catalogue's argoStatus per attempt; or refused). The same Workflow then goes to Argo
either way (rendered past the guard when it refuses); once every pod of the first attempt
has started, one Argo holds Running is deleted, failing that attempt. Printed:
the time from `kubectl create` to every first-attempt pod started, the largest Workflow
the API server stored (JSON, spec and status) and its packed size (status.nodes gzipped as
Argo's workflow/packer does past 1 MiB), whether Argo compressed, how the run ended, and
whether the guard agrees: what it lets through must never outgrow the limit; what it
refuses should end in Argo's "workflow is longer than maximum allowed size". Argo's pod
creation is bounded by its Kubernetes client (workflow-controller `--qps 20 --burst 30`,
the defaults; `--qps`/`--burst` here set others) and by the configmap's `resourceRateLimit`
(pod creations a second and their burst; none by default, so unlimited: `--rate-limit`);
each JSON row says which (`"controller"`). `--stop-after started` ends the run once every
first-attempt pod has started, `--stop-after restarted` once every second-attempt one has
(the times measured, the Workflow still Running; `"stopped_after"`), rather than holding it
to its end. A line on stderr each minute says how far the run has got.

The cluster has Argo's full CRDs, as Argo v4 installs them by default (applied server-side
by testbed/cluster): past 200 DAG tasks render.py writes the nodes in loop tasks
(docs/architecture.md). `--crd minimal` swaps in the minimal Workflow CRD (Argo v3's
default, a documented variant); each JSON row says which one the cluster had.

`--recovery node|job` measures a failure's cost instead, for failurePolicy.recovery node or
job (docs/e2e.md): one training pod is deleted once every pod runs and Argo's status says so
(a pod Argo still holds Pending is only created again, which is no failure; with `job`, every
other pod too, as a real job's survivors fail within a second of losing a peer,
docs/trainer.md); printed are the pods created again, the time from the deletion to all of
them Running, and the status bytes (packed, as Argo holds them) the failure added, read when
the status shows every training pod Running again. The job is then deleted: --hold must only
outlast the start of every pod.

    python bench/bench_cluster.py [--nodes 256 1024] [--hold 240] [--crd full|minimal] [--keep DIR]
        [--qps 20 --burst 30] [--rate-limit LIMIT BURST] [--stop-after started|restarted]
    python bench/bench_cluster.py --recovery node|job [--nodes 256 1024] [--hold 240]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cluster_run import (  # noqa: E402 -- the test reads packed_size and status_nodes here
    first_attempt_pods,
    guard,
    held_size,
    host_names,
    kubectl,
    minimal_workflow_crd,
    packed_size,
    ranked_training_pods,
    running_in_status,
    status_nodes,
    training_pods,
    values_file,
)

from testbed.cluster import procs  # noqa: E402
from testbed.cluster.layout import Layout  # noqa: E402
from testbed.cluster.up import Cluster  # noqa: E402
from testbed.kube import Kube  # noqa: E402
from testbed.kubelet.pods import NO_EXEC_EXIT  # noqa: E402
from torchdag.catalog import catalog  # noqa: E402
from torchdag.render import check_documents, json_size, status_budget  # noqa: E402


def delete_a_running_pod(layout: Layout, name: str, nodes: dict) -> str | None:
    """Delete the pod of a node Argo holds Running, to fail the attempt. Argo creates a
    missing pod again for a node it holds Pending, and for any unfinished node while some
    finished pod's task result is incomplete (operator.go; docs/e2e.md)."""
    running = {node["id"].rsplit("-", 1)[-1] for node in nodes.values()
               if node.get("type") == "Pod" and node.get("phase") == "Running"}
    pods = kubectl(layout, "get", "pods", "-l", f"workflows.argoproj.io/workflow={name},torchdag.io/node-rank",
                   "--field-selector=status.phase=Running", "-o", "name").split()
    for pod in reversed(pods):
        if pod.rsplit("-", 1)[-1] in running:
            kubectl(layout, "delete", pod, "--wait=false")
            return pod.split("/")[-1]
    return None


def measure(layout: Layout, folder: Path, n: int, crd: str, controller: dict, stop_after: str | None) -> dict:
    values = values_file(folder, n)
    verdict, plan, text = guard(values)
    (document,) = check_documents(text)
    spec = json_size(document)
    attempts, budget = status_budget(plan)
    workflow = folder / f"scale-{n}-workflow.yaml"
    workflow.write_text(text, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "testbed.cluster", "--dir", str(layout.root), "register", str(values)],
                   cwd=REPO, check=True, capture_output=True)
    start = time.monotonic()
    name = kubectl(layout, "create", "-f", str(workflow), "-o", "name").strip().split("/")[-1]
    row = {"nodes": n, "crd": crd, "controller": controller, "guard": verdict, "spec_bytes": spec,
           "per_node_bytes": round(spec / n), "budget_bytes": spec + budget, "attempts": attempts,
           "largest_bytes": 0, "largest_packed_bytes": 0, "compressed": False, "pod_nodes_largest": 0,
           "create_to_all_started_s": None, "deleted_pods": [], "second_attempt": False,
           "restarted": False, "first_deletion_to_all_restarted_s": None,
           "second_attempt_seen_to_all_restarted_s": None, "stopped_after": None}
    first_attempt, second_attempt = f"{name}(0).", f"{name}(1)"
    wf: dict = {}
    deleted_at = first_deleted_at = said_at = second_seen_at = 0.0
    while time.monotonic() - start < 3600:
        wf = json.loads(kubectl(layout, "get", "workflow", name, "-o", "json", "--show-managed-fields"))
        status = wf.get("status") or {}
        row["largest_bytes"] = max(row["largest_bytes"], len(json.dumps(wf, separators=(",", ":"))))
        row["largest_packed_bytes"] = max(row["largest_packed_bytes"], packed_size(wf))
        row["compressed"] |= bool(status.get("compressedNodes"))
        if status.get("phase") in ("Succeeded", "Failed", "Error"):
            break
        nodes = status_nodes(status)
        pods = [node for node in nodes.values() if node.get("type") == "Pod"]
        row["pod_nodes_largest"] = max(row["pod_nodes_largest"], len(pods))
        row["second_attempt"] |= any(node["name"].startswith(second_attempt) for node in nodes.values())
        second_seen_at = second_seen_at or (row["second_attempt"] and time.monotonic())
        started = [p for p in pods if p["name"].startswith(first_attempt) and p.get("phase") != "Pending"]
        if row["create_to_all_started_s"] is None and len(started) >= n:
            row["create_to_all_started_s"] = round(time.monotonic() - start, 1)
        again = [p for p in pods if p["name"].startswith(second_attempt + ".") and p.get("phase") != "Pending"]
        if row["first_deletion_to_all_restarted_s"] is None and len(again) >= n and first_deleted_at:
            row["first_deletion_to_all_restarted_s"] = round(time.monotonic() - first_deleted_at, 1)
            # Without the wait for the first attempt's pods to end (--hold): the pods' creation alone.
            row["second_attempt_seen_to_all_restarted_s"] = round(time.monotonic() - second_seen_at, 1)
        if time.monotonic() - said_at > 60:
            said_at = time.monotonic()
            print(f"{said_at - start:.0f} s: {status.get('phase')}, {len(pods)} pod nodes, first attempt "
                  f"{len(started)} of {n} started, second {len(again)}; largest {row['largest_bytes']} B stored, "
                  f"{row['largest_packed_bytes']} B packed", file=sys.stderr, flush=True)
        measured = {"started": row["create_to_all_started_s"], "restarted": row["first_deletion_to_all_restarted_s"]}
        if stop_after and measured[stop_after] is not None:
            row["stopped_after"] = stop_after
            break
        # One failed attempt, after all its pods exist (a DAG starts no task once one failed):
        # a training pod deleted while it runs; another if Argo has not failed the attempt a minute later.
        if (row["create_to_all_started_s"] is not None and not row["second_attempt"]
                and time.monotonic() - deleted_at > 60 and len(row["deleted_pods"]) < 5):
            deleted = delete_a_running_pod(layout, name, nodes)
            if deleted:
                row["deleted_pods"].append(deleted)
                deleted_at = time.monotonic()
                first_deleted_at = first_deleted_at or deleted_at
        time.sleep(3)
    status = wf.get("status") or {}
    if row["stopped_after"]:  # not held to its end: out of the way of the next size's run
        kubectl(layout, "delete", "workflow", name, "--wait=false")
    # A restart of either kind: the whole DAG's second attempt (or, once nodes retry on their
    # own, a pod node's retry: Argo names its nodes `...(1)` alike).
    row["restarted"] = row["second_attempt"]
    row.update(phase=status.get("phase"), message=status.get("message", ""),
               total_s=round(time.monotonic() - start, 1))
    return row


def measure_recovery(layout: Layout, folder: Path, n: int, recovery: str) -> dict:
    """One failure's cost under failurePolicy.recovery: pods created again, the time from the
    deletion to all of them Running, and the status bytes (packed) the failure added: the
    status once it shows every training pod Running, before the deletion and again after."""
    values = values_file(folder, n, recovery)
    _, _, text = guard(values)
    workflow = folder / f"recovery-{recovery}-{n}.yaml"
    workflow.write_text(text, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "testbed.cluster", "--dir", str(layout.root), "register", str(values)],
                   cwd=REPO, check=True, capture_output=True)
    start = time.monotonic()
    name = kubectl(layout, "create", "-f", str(workflow), "-o", "name").strip().split("/")[-1]
    row = {"nodes": n, "recovery": recovery, "create_to_all_running_s": None, "pods_recreated": None,
           "deletion_to_all_running_s": None, "status_bytes_before": None, "status_bytes_added": None}
    before: dict = {}
    deleted_at = 0.0
    wf: dict = {}
    while time.monotonic() - start < 3600:
        wf = json.loads(kubectl(layout, "get", "workflow", name, "-o", "json", "--show-managed-fields"))
        if (wf.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Error"):
            break
        pods = training_pods(layout, name)
        running = [uid for uid, (_, phase) in pods.items() if phase == "Running"]
        if not before and len(running) >= n and row["create_to_all_running_s"] is None:
            row["create_to_all_running_s"] = round(time.monotonic() - start, 1)
        if not before and len(running) >= n and running_in_status(wf) >= n:
            row["status_bytes_before"] = packed_size(wf)
            before = pods
            victims = running if recovery == "job" else running[:1]
            for uid in victims:
                kubectl(layout, "delete", "pod", pods[uid][0], "--wait=false")
            deleted_at = time.monotonic()
        elif before and row["deletion_to_all_running_s"] is None:
            first = first_attempt_pods(layout, name) if recovery == "job" else []
            # The survivors of a real job fail within a second; --no-exec pods do not, and Argo
            # creates some deleted pods again in place: the first attempt is kept failing.
            for pod in first:
                kubectl(layout, "delete", "pod", pod, "--wait=false", "--ignore-not-found")
            again = [uid for uid in running if uid not in before and pods[uid][0] not in first]
            if len(again) >= (n if recovery == "job" else 1):
                row["deletion_to_all_running_s"] = round(time.monotonic() - deleted_at, 1)
                row["pods_recreated"] = len([uid for uid in pods if uid not in before])
        elif row["status_bytes_added"] is None and len(running) >= n and running_in_status(wf) >= n:
            row["status_bytes_added"] = packed_size(wf) - row["status_bytes_before"]
            break  # measured: the job is deleted rather than held to its end (an hour at 1,024 under `job`)
        time.sleep(1)
    status = wf.get("status") or {}
    row.update(phase=status.get("phase"), message=status.get("message", ""),
               total_s=round(time.monotonic() - start, 1))
    kubectl(layout, "delete", "workflow", name, "--wait=true")
    return row


STAGES = {"job": ("job",), "node": ("worker", "master"), "elastic": ("worker", "master")}


def fail_pods(layout: Layout, deleted: list[str], failing: list[str]) -> None:
    """A node's loss: its pod deleted; and the pods whose ranks fail with it end with exit code 1
    (the process kubelet's annotation, as their torchrun would exit). Sixteen requests at a
    time: one kubectl a pod takes minutes for a thousand on a loaded machine."""
    kube = Kube(str(layout.kubeconfig))

    def request(method: str, pod: str, body: dict | None) -> None:
        try:
            kube.request(method, f"/api/v1/namespaces/default/pods/{pod}", body=body,
                         content_type="application/merge-patch+json" if body else None)
        except ApiException as err:
            if err.status != 404:  # a pod gone meanwhile is no matter
                raise

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda pod: request("DELETE", pod, None), deleted))
        list(pool.map(lambda pod: request("PATCH", pod, {"metadata": {"annotations": {NO_EXEC_EXIT: "1"}}}), failing))


def release_held_pods(layout: Layout) -> None:
    """Tell the process kubelet the measurements are done: every pod it holds Running ends Succeeded
    (SIGUSR1), as a job's pods end together once training is done."""
    os.kill(int(layout.pid_file("kubelet").read_text()), signal.SIGUSR1)


def measure_status(layout: Layout, folder: Path, n: int, shape: str, host_length: int, offload: bool,
                   dump: Path | None, losses: tuple[str, ...] = (), controller: dict | None = None) -> dict:
    """Argo's status for one shape through its failures, on to the Workflow's end: the packed
    size once every training pod runs and Argo's status says so, again after each failure once
    every pod runs again, at the end, and the largest seen (each read every few seconds).
    Failures: `job`, every pod of the first attempt deleted (a real job's survivors fail within a
    second of losing a peer); `worker`, one pod of node rank n/2 deleted, which node recovery
    retries alone; `master`, every pod deleted, the master's first: under node recovery the
    master's loss takes the rendezvous store with it, and every node's own retry starts its pod
    again (docs/trainer.md)."""
    recovery = "job" if shape == "job" else "node"
    stages = losses or STAGES[shape]
    values = values_file(folder, n, recovery, max_restarts=len(stages), elastic=n - n // 8 if shape == "elastic" else 0,
                         host_length=host_length, offload=offload)
    verdict, plan, text = guard(values)
    (document,) = check_documents(text)
    spec = json_size(document)
    attempts, budget = status_budget(plan)
    workflow = folder / f"status-{shape}-{n}.yaml"
    workflow.write_text(text, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "testbed.cluster", "--dir", str(layout.root), "register", str(values)],
                   cwd=REPO, check=True, capture_output=True)
    start = time.monotonic()
    name = kubectl(layout, "create", "-f", str(workflow), "-o", "name").strip().split("/")[-1]
    row = {"nodes": n, "shape": shape, "host_length": host_length or len(host_names(1, 0)[0]), "offload": offload,
           "guard": verdict, "spec_bytes": spec, "budget_bytes": spec + budget, "bytes": {}, "seconds": {},
           "largest_packed_bytes": 0, "compressed": False, "offloaded": False, "controller": controller}
    losses = list(stages)  # the failures still to make, in order
    stage, want = "running", n  # what is measured next, once `want` new training pods run
    before: dict = {}
    asked: set[str] = set()  # pods already made to fail
    lost_at = said_at = read_at = 0.0
    wf, nodes = {}, {}
    while time.monotonic() - start < 6 * 3600:
        polled = time.monotonic()
        wf = json.loads(kubectl(layout, "get", "workflow", name, "-o", "json", "--show-managed-fields"))
        status = wf.get("status") or {}
        fresh = time.monotonic() - read_at > 60 or not status.get("offloadNodeStatusVersion")
        size, nodes = held_size(layout, wf, None if fresh else nodes)
        read_at = read_at if not fresh else time.monotonic()
        row["largest_packed_bytes"] = max(row["largest_packed_bytes"], size)
        row["compressed"] |= bool(status.get("compressedNodes"))
        row["offloaded"] |= bool(status.get("offloadNodeStatusVersion"))
        if status.get("phase") in ("Succeeded", "Failed", "Error"):
            break
        pods = ranked_training_pods(layout, name)
        running = [uid for uid, (_, phase, _) in pods.items() if phase == "Running"]
        again = [uid for uid in running if uid not in before]
        if stage and not fresh and len(running) >= n and len(again) >= want:
            # A stage is measured on the database's nodes as they are now, not as read a minute ago
            # (at 4,096 machines such a stale read put a worker's loss at +1 B).
            size, nodes = held_size(layout, wf)
            read_at = time.monotonic()
            row["largest_packed_bytes"] = max(row["largest_packed_bytes"], size)
        shown = sum(1 for node in nodes.values() if node.get("type") == "Pod" and node.get("phase") == "Running"
                    and any(p.get("name") == "node-rank" for p in (node.get("inputs") or {}).get("parameters") or []))
        # The new pods Running in Argo's status too (a pod NAME-TEMPLATE-HASH is node NAME-HASH): its
        # status may still show the lost pod Running, which alone made a worker's loss read +0 B.
        again_shown = sum(1 for uid in again if (nodes.get(f"{name}-{pods[uid][0].rsplit('-', 1)[-1]}") or {})
                          .get("phase") == "Running")
        if time.monotonic() - said_at > 60:
            said_at = time.monotonic()
            print(f"{said_at - start:.0f} s: {status.get('phase')}, waiting for {stage}: {len(running)} training "
                  f"pods Running ({len(again)} new), {shown} in the status; {size} B packed", file=sys.stderr,
                  flush=True)
        if stage and len(running) >= n and shown >= n and again_shown >= want:
            row["bytes"][stage] = size
            row["seconds"][stage] = round(time.monotonic() - (lost_at or start), 1)
            stage = losses.pop(0) if losses else None
            if not stage:  # every stage measured: the job's pods end, and with them the Workflow
                release_held_pods(layout)
            else:
                # The lost node's pod is deleted (rank n/2's, or the master's); under `job` and
                # `master` every other rank's torchrun then exits 1 (a peer lost; the rendezvous store lost).
                lost = next(uid for uid in running if pods[uid][2] == ("0" if stage == "master" else str(n // 2)))
                survivors = [] if stage == "worker" else [pods[uid][0] for uid in running if uid != lost]
                fail_pods(layout, [pods[lost][0]], survivors)
                asked = set(survivors) | {pods[lost][0]}
                before, lost_at, want = pods, time.monotonic(), 1 if stage == "worker" else n
        elif stage == "job":
            # Argo creates a deleted pod again in place when its status is behind: the first
            # attempt's pods are kept failing until it ends.
            kept = {pods[uid][0] for uid in again} | asked
            failing = [pod for pod in first_attempt_pods(layout, name) if pod not in kept]
            fail_pods(layout, [], failing)
            asked.update(failing)
        # Each read (a megabyte of Workflow, thousands of pods) costs the loaded machine: at most a third of it here.
        time.sleep(max(2.0, 2 * (time.monotonic() - polled)))
    status = wf.get("status") or {}
    size, nodes = held_size(layout, wf)
    row["bytes"]["end"] = size
    row["largest_packed_bytes"] = max(row["largest_packed_bytes"], size)
    row.update(phase=status.get("phase"), message=status.get("message", ""), pod_nodes=sum(
        1 for node in nodes.values() if node.get("type") == "Pod"), total_s=round(time.monotonic() - start, 1))
    row["status_bytes"] = row["largest_packed_bytes"] - spec
    if dump:
        dump.mkdir(parents=True, exist_ok=True)
        target = dump / f"status-{shape}-{n}-h{row['host_length']}.json.gz"
        target.write_bytes(gzip.compress(json.dumps({"spec_bytes": spec, "row": row, "workflow": wf,
                                                      "nodes": nodes}).encode()))
    kubectl(layout, "delete", "workflow", name, "--wait=true")
    return row


def agreement(row: dict) -> str:
    """The guard's verdict against Argo's: a Workflow the guard lets through must never
    grow past the limit; one it refuses should be one Argo ends in Error."""
    too_large = (row["phase"] == "Error" and "longer than maximum allowed size" in row["message"])
    ended = row["phase"] in ("Succeeded", "Failed", "Error")
    if row["guard"] == "fits":
        within = not too_large and row["largest_packed_bytes"] <= row["budget_bytes"]
        if not within:
            return "DISAGREES: the guard let through a Workflow Argo could not hold"
        if not ended:
            return f"agrees so far: stopped while {row['phase']} (the status still grows as pods end)"
        return "agrees" if row["second_attempt"] else "agrees so far: no second attempt ran (the restart untested)"
    if too_large:
        return "agrees"
    return "guard stricter than Argo (refused a job Argo held)" if ended else f"undecided: stopped while {row['phase']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--hold", type=float, default=240,
                        help="seconds each pod stays Running (the kubelet's --no-exec-seconds; default 240): "
                             "longer than starting every pod takes, so the deletion meets a job still running")
    parser.add_argument("--crd", choices=("full", "minimal"), default="full",
                        help="the Workflow CRD: Argo v4's default, full (default), or the minimal one")
    parser.add_argument("--keep", help="cluster directory to use and keep (default: a temporary one, removed)")
    parser.add_argument("--recovery", choices=("node", "job"),
                        help="measure one failure's cost under failurePolicy.recovery node or job instead")
    parser.add_argument("--status", choices=tuple(STAGES),
                        help="measure Argo's status for this shape through its failures to the Workflow's end "
                             "instead (job: one whole-job restart; node, elastic: a worker's loss, then the master's)")
    parser.add_argument("--host-length", type=int, default=0,
                        help="with --status: host names of this many characters, each its own, as a hash makes "
                             "them (default: npu-0000...)")
    parser.add_argument("--offload", action="store_true",
                        help="with --status: the controller offloads node status to the cluster's PostgreSQL and the "
                             "values say so (workflow.nodeStatusOffload); default: a controller without a database")
    parser.add_argument("--lose", nargs="+", choices=("worker", "master", "job"),
                        help="with --status: the failures to make, in order (default: job for the job shape; worker, "
                             "then master, otherwise); failurePolicy.maxRestarts is their count")
    parser.add_argument("--dump", help="with --status: write each run's Workflow and node status here (JSON, gzipped)")
    parser.add_argument("--qps", type=float, default=20,
                        help="workflow-controller --qps, its Kubernetes client's requests a second (Argo's default 20)")
    parser.add_argument("--burst", type=int, default=30,
                        help="workflow-controller --burst, that client's burst (Argo's default 30)")
    parser.add_argument("--rate-limit", type=float, nargs=2, metavar=("LIMIT", "BURST"),
                        help="the configmap's resourceRateLimit: pod creations a second and their burst "
                             "(default: none, Argo's unlimited)")
    parser.add_argument("--stop-after", choices=("started", "restarted"),
                        help="end each run once every first-attempt (started) or second-attempt (restarted) pod "
                             "has started, the Workflow still Running (default: hold it to its end)")
    args = parser.parse_args()
    # A SIGTERM (a `timeout`) still takes the cluster down, through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    folder = Path(args.keep or tempfile.mkdtemp(prefix="torchdag-scale-"))
    layout = Layout.of(str(folder / "cluster"))
    rate_limit = args.rate_limit and {"limit": args.rate_limit[0], "burst": int(args.rate_limit[1])}
    controller = {"qps": args.qps, "burst": args.burst, "resourceRateLimit": rate_limit}
    config = {"resourceRateLimit": json.dumps(rate_limit)} if rate_limit else {}
    if args.status and not args.offload:
        config["persistence"] = "null"  # as a cluster without a database: past 1 MiB the Workflow ends in Error
    cluster = Cluster(layout, controller_flags=(f"--qps={args.qps:g}", f"--burst={args.burst}"),
                      controller_config=config)
    try:
        cluster.up(say=lambda *a: None)  # inside: a start that fails midway is taken down too
        if args.crd == "minimal":
            minimal_workflow_crd(layout)
        # Only the training pods are held: the watch and a host check end at once, as a real job's do.
        # Leases renewed every minute or two, not every 10 s: a thousand Nodes' heartbeats at
        # Kubernetes' pace were a hundred writes a second, more than the Workflow's own on 2 cores
        # (the controller manager's --node-monitor-grace-period here is 300 s).
        lease = "120" if max(args.nodes) >= 2048 else "60"
        cluster.kubelet(["--no-exec", "--no-exec-seconds", f"{args.hold:g}", "--no-exec-hold", "torchdag.io/node-rank",
                         "--lease-every", lease], say=lambda *a: None)
        limit = catalog()["argoStatus"]["maxBytes"]
        for n in args.nodes if args.status else []:
            row = measure_status(layout, folder, n, args.status, args.host_length, args.offload,
                                 Path(args.dump) if args.dump else None, tuple(args.lose or ()), controller)
            print(json.dumps(row), flush=True)
            print(f"{n} nodes x 8, {args.status} shape, host names of {row['host_length']} characters: spec "
                  f"{row['spec_bytes']} B; packed {row['bytes']} B at each stage, "
                  f"largest {row['largest_packed_bytes']} B "
                  f"(status {row['status_bytes']} B); guard {row['guard']} (budget {row['budget_bytes']} B); "
                  f"{row['phase']} {row['message']!r} in {row['total_s']} s", flush=True)
        for n in args.nodes if args.recovery and not args.status else []:
            row = measure_recovery(layout, folder, n, args.recovery)
            print(json.dumps(row), flush=True)
            print(f"{n} nodes x 8, recovery {args.recovery}: all pods Running {row['create_to_all_running_s']} s "
                  f"after create; one failure re-created {row['pods_recreated']} pod(s), all Running again "
                  f"{row['deletion_to_all_running_s']} s after the deletion, status +{row['status_bytes_added']} B "
                  f"packed (from {row['status_bytes_before']} B); {row['phase']} when measured, "
                  f"{row['total_s']} s after create",
                  flush=True)
        for n in [] if args.recovery or args.status else args.nodes:
            row = measure(layout, folder, n, args.crd, controller, args.stop_after)
            row["agreement"] = agreement(row)
            print(json.dumps(row), flush=True)
            print(f"{n} nodes x 8 ({args.crd} CRDs, controller {controller}): "
                  f"spec {row['spec_bytes']} B ({row['per_node_bytes']} B/node); "
                  f"guard {row['guard']} (budget {row['budget_bytes']} B of {limit}); Argo: largest Workflow "
                  f"{row['largest_bytes']} B stored, {row['largest_packed_bytes']} B packed, compressed "
                  f"{row['compressed']}, {row['pod_nodes_largest']} pod nodes, second attempt {row['second_attempt']}; "
                  f"all first-attempt pods started {row['create_to_all_started_s']} s after create, all "
                  f"second-attempt ones {row['first_deletion_to_all_restarted_s']} s after the first deletion "
                  f"({row['second_attempt_seen_to_all_restarted_s']} s after the second attempt showed); "
                  f"ended {row['phase']} in {row['total_s']} s "
                  f"{row['message']!r}; {row['agreement']}", flush=True)
    finally:
        procs.stop(layout, "kubelet", Path(sys.executable), grace=30)
        if not args.keep:
            cluster.down(say=lambda *a: None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
