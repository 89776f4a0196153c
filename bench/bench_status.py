#!/usr/bin/env python3
"""How many bytes Argo's status adds to a torchdag Workflow, per shape, as its controller packs it.

Argo's controller keeps spec and status in one object (workflow/packer: json.Marshal of the
Workflow against MAX_WORKFLOW_SIZE, 1 MiB); past that it stores `status.nodes` gzipped and
base64-encoded as `compressedNodes`. This builds the node status v4.0.5's controller writes for
each shape torchdag renders, node for node as the local cluster's real controller wrote it
(bench/bench_cluster.py --status dumps them): the fields in Go's struct order, ids from
Workflow.NodeID's FNV-32a, the inputs each node carries, timestamps, resource durations, the
host each pod ran on. The shapes:

- job: whole-job restarts (failurePolicy.recovery job) or none: a Retry node over one DAG node
  per attempt (a bare DAG with maxRestarts 0), each with every machine's pod;
- node: node recovery: each machine's task is a Retry node over one Steps node per attempt,
  its StepGroup and its pod;
- elastic: node recovery with elastic members: each attempt's steps start with the host
  check, Skipped on the first attempt and a pod on every retry;

each with a task per machine (up to 200 DAG tasks) or, past that, loop tasks (`nodes-<k>`,
one TaskGroup node each, every node named after its item). A failure: `job`, every pod of the
attempt fails (the lost node's deleted, the others exit 1) and the DAG runs again; `master`,
under node recovery, the master's pod is lost and every other node's torchrun exits 1, so
every node's retry starts a pod again (docs/trainer.md): the most one failure adds; `worker`,
one node's pod lost and retried alone.

Compared with the real controller (bench/status_measured.json, from bench_cluster.py --status
at 256 and 1,024 machines, short and 63-character host names) with the run's own durations,
the model comes out at or above it; with a long job's durations (resource durations of a
year-long run have more digits) it is what the catalogue's argoStatus.shapes must stay above
(tests/render/test_render_size.py).

    python bench/bench_status.py    # each shape at 256, 1,024 and 4,096 machines, one failure
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import math
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from torchdag.catalog import catalog  # noqa: E402

WORKFLOW = "big-x7k2p"  # render.py names a run "<name>-" and five characters
MEASURED = Path(__file__).with_name("status_measured.json")
SHAPE = "ascend910-x8"  # the node template; its retry wrapper is SHAPE-retry
YEAR = 365 * 86400  # a long job's run time: resource durations with as many digits as any real one


def fnv32a(text: str) -> int:
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def node_id(name: str, workflow: str = WORKFLOW) -> str:
    """Workflow.NodeID: the Workflow's name for its root node, else name-FNV32a(node name)."""
    return workflow if name == workflow else f"{workflow}-{fnv32a(name)}"


def hashed_hosts(n: int, length: int) -> list[str]:
    """Host names of `length` characters drawn as a hash draws them (bench_cluster.host_names)."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    names = []
    for i in range(n):
        digest, text = int.from_bytes(hashlib.sha512(f"host-{i}".encode()).digest(), "big"), ""
        while len(text) < length:
            digest, at = divmod(digest, len(alphabet))
            text += alphabet[at]
        names.append(text)
    return names


@dataclass
class Job:
    """One job as the model sees it. hosts: the machines' host names in rank order (default
    npu-0000...); failures: `job`, `worker` or `master`, in order; seconds: how long its pods
    ran (their resource durations grow with it); loops: machines per loop task (0: a task per
    machine, as torchdag renders up to 200 DAG tasks)."""

    shape: str
    machines: int
    failures: tuple[str, ...] = ()
    hosts: list[str] | None = None
    seconds: int = YEAR
    requests: bool = True  # a training pod's requests (False: none, as the local cluster's pods)
    # Argo's message for a pod whose torchrun exited 1 (no termination message: main's exit code);
    # the local cluster's --no-exec pods add the kubelet's reason to it.
    failed_message: str = "main: Error (exit code 1)"
    # Under node recovery each retry runs the host check beside the node's pod (issue 37);
    # off: as before it, a host check only for elastic members, in a step group of its own.
    check_beside: bool = True
    loops: int | None = None
    workflow: str = WORKFLOW
    restarts: int | None = None  # failurePolicy.maxRestarts (default: one per failure)
    nodes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.hosts = self.hosts or [f"npu-{i:04d}" for i in range(self.machines)]
        # Pods start and end as a busy controller and API server let them: seconds apart at random
        # (the real controller's timestamps, and the durations from them, pack no better).
        self.random = random.Random(f"{self.shape} {self.machines} {self.failures}")
        if self.loops is None:
            self.loops = int(catalog()["nodeLoops"]["maxItems"]) if self.machines + 1 > 200 else 0
        self.restarts = len(self.failures) if self.restarts is None else self.restarts
        self.clock = 0

    # -- what every node shares ------------------------------------------------------------
    def time(self, offset: int) -> str:
        s = 1_780_000_000 + offset
        return f"2026-06-{1 + s // 86400 % 28:02d}T{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z"

    def durations(self, seconds: int) -> dict:
        """resourcesDuration as Argo sums it for a pod that ran `seconds` with a training pod's
        requests (cpu 96 cores, memory 768 GiB in Argo's 100 Mi units, 8 NPUs): as many digits
        as a long run's; the local cluster's pods, with none, count cpu 0.2 and memory 2 a second."""
        seconds = max(seconds, 1)
        if not self.requests:
            return {"cpu": seconds // 5, "huawei.com/Ascend910": seconds * 8, "memory": seconds * 2}
        return {"cpu": seconds * 96, "huawei.com/Ascend910": seconds * 8, "memory": seconds * 7864}

    def add(self, name: str, display: str, kind: str, boundary: str | None, *, template: str | None = None,
            phase: str = "Succeeded", message: str = "", started: int = 0, finished: int | None = None,
            progress: str = "1/1", resources: dict | None = None, flag: dict | None = None,
            inputs: list | None = None, outputs: dict | None = None, children: list | None = None,
            outbound: list | None = None, host: str = "", synced: bool = False) -> str:
        """A NodeStatus, its fields in Go's struct order (workflow_types.go), empty ones left out."""
        node: dict = {"id": node_id(name, self.workflow), "name": name, "displayName": display, "type": kind}
        for key, value in (("templateName", template), ("templateScope", f"local/{self.workflow}"),
                           ("phase", phase), ("boundaryID", boundary), ("message", message),
                           ("startedAt", self.time(started)),
                           ("finishedAt", self.time(finished) if finished is not None else None),
                           ("progress", progress), ("resourcesDuration", resources), ("nodeFlag", flag),
                           ("inputs", {"parameters": [{"name": k, "value": v} for k, v in inputs]} if inputs else None),
                           ("outputs", outputs), ("children", children), ("outboundNodes", outbound),
                           ("hostNodeName", host), ("taskResultSynced", True if synced else None)):
            if value not in (None, "", [], {}) or (key == "nodeFlag" and value is not None):
                node[key] = value
        self.nodes[node["id"]] = node
        return node["id"]

    def pod(self, name: str, display: str, boundary: str, rank: int, inputs: list, *, how: str = "",
            started: int, finished: int, template: str = SHAPE, host: str = "") -> tuple[str, dict | None]:
        """A pod's node and its resource durations: Succeeded; or, `how` it failed, its node lost
        (`deleted`: gone before it reported an end) or its torchrun exiting 1 (`exit`)."""
        host = host or self.hosts[rank]
        if how == "deleted":
            return self.add(name, display, "Pod", boundary, template=template, phase="Error", message="pod deleted",
                            started=started, finished=finished, progress="0/1", inputs=inputs, host=host,
                            synced=True), None
        resources = self.durations(finished - started)
        return self.add(name, display, "Pod", boundary, template=template, phase="Failed" if how else "Succeeded",
                        message=self.failed_message if how else "", started=started, finished=finished,
                        progress="0/1" if how else "1/1", resources=resources, inputs=inputs,
                        outputs={"exitCode": "1" if how else "0"}, host=host, synced=True), resources

    def parameters(self, rank: int) -> list:
        return [("host", self.hosts[rank]), ("node-rank", str(rank)), ("nic", "eth0"),
                ("if-ip", f"198.18.{rank // 250}.{rank % 250 + 1}")]

    def task(self, rank: int) -> tuple[str | None, str]:
        """(the loop task or None, the machine's task display name) as Argo names them."""
        if not self.loops:
            return None, f"node-{rank}"
        loop, index = divmod(rank, self.loops)
        item = f"host:{self.hosts[rank]},ip:198.18.{rank // 250}.{rank % 250 + 1},rank:{rank}"
        return f"nodes-{loop}", f"nodes-{loop}({index}:{item})"

    def timeline(self) -> tuple[list[int], int]:
        """When each failure happens and when the job ends: failures evenly through the run."""
        times = [self.seconds * (i + 1) // (len(self.failures) + 2) for i in range(len(self.failures))]
        return times, self.seconds

    # -- the shapes --------------------------------------------------------------------------
    def build(self) -> dict:
        """The node status at the job's end (every pod ended), through its failures."""
        self.nodes = {}
        return self.build_job() if self.shape == "job" else self.build_node_recovery()

    def build_node_recovery(self) -> dict:
        n, (times, end) = self.machines, self.timeline()
        lost = {"worker": n // 2, "master": 0}
        attempts: dict[int, list[tuple[int, int, str]]] = {rank: [] for rank in range(n)}  # (start, end, how)
        jitter = self.random.randint
        begun = [rank // 10 + jitter(0, 30) for rank in range(n)]  # pods created at about 10 a second
        for when, failure in zip(times, self.failures):
            for rank in [lost[failure]] if failure == "worker" else range(n):
                how = "deleted" if rank == lost[failure] else "exit"
                attempts[rank].append((begun[rank], when + jitter(0, 40), how))
                begun[rank] = when + 45 + rank // 10 + jitter(0, 30)
        dag, finals, groups = self.workflow, [], {}
        for rank in range(n):
            attempts[rank].append((begun[rank], end - jitter(0, 60), ""))
            loop, display = self.task(rank)
            retry_name, children, total = f"{dag}.{display}", [], 0
            for k, (began, ended, how) in enumerate(attempts[rank]):
                steps_name = f"{retry_name}({k})"
                steps_id = node_id(steps_name, self.workflow)
                inputs = self.parameters(rank) + [("restart", str(k)), ("rdzv-host", "true" if rank == 0 else "false")]
                # The host check: Skipped on the first attempt, a pod on each retry; beside the
                # node's pod in its step group, or (check_beside off: torchdag before issue 37,
                # elastic members only) in a step group of its own before it.
                check = None
                if self.check_beside or self.shape == "elastic":
                    group = 0 if self.check_beside else 1
                    name, check_inputs = f"{steps_name}[0].host-check", (
                        [("node-rank", str(rank))] if self.check_beside else [("host", self.hosts[rank])])
                    if k == 0:
                        check = self.add(name, "host-check", "Skipped", steps_id, template="host-check",
                                         phase="Skipped", message="when '0 > 0' evaluated false", started=began,
                                         finished=began, progress="", flag={} if self.check_beside else None,
                                         inputs=None if self.check_beside else check_inputs)
                    else:  # where it runs: any machine (beside), the node's own (before); a few seconds of 50m cpu
                        other = self.hosts[(rank * 7919 + k) % n] if self.check_beside else self.hosts[rank]
                        check = self.add(name, "host-check", "Pod", steps_id, template="host-check", started=began,
                                         finished=began + 3, resources={"cpu": 0, "memory": 1}, inputs=check_inputs,
                                         outputs={"exitCode": "0"}, host=other, synced=True)
                else:
                    group = 0
                pod, resources = self.pod(f"{steps_name}[{group}].train", "train", steps_id, rank, inputs, how=how,
                                          started=began, finished=ended)
                failed, ok = f"child '{pod}' failed" if how else "", "0/1" if how else "1/1"
                step_groups = []
                if check and not self.check_beside:
                    step_groups.append(self.add(f"{steps_name}[0]", "[0]", "StepGroup", steps_id, started=began,
                                                finished=began + 2, flag={}, children=[check]))
                step_groups.append(self.add(f"{steps_name}[{group}]", f"[{group}]", "StepGroup", steps_id,
                                            phase="Failed" if how else "Succeeded", message=failed, started=began,
                                            finished=ended, progress=ok, resources=resources, flag={},
                                            children=[pod, check] if check and self.check_beside else [pod]))
                children.append(self.add(steps_name, f"{display}({k})", "Steps", dag, template=f"{SHAPE}-retry",
                                         phase="Failed" if how else "Succeeded", message=failed, started=began,
                                         finished=ended, progress=ok, resources=resources,
                                         flag={"retried": True}, inputs=self.parameters(rank),
                                         children=step_groups[:1],
                                         outbound=[pod, check] if check and self.check_beside else [pod]))
                total += ended - began if resources else 0
            finals.append(pod)
            retry = self.add(retry_name, display, "Retry", dag, template=f"{SHAPE}-retry", started=attempts[rank][0][0],
                             finished=end, progress=f"1/{len(children)}", resources=self.durations(total),
                             inputs=self.parameters(rank), children=children)
            groups.setdefault(loop, []).append(retry)
        pods = sum(len(a) for a in attempts.values())
        self.finish_dag(dag, groups, finals, end, f"{SHAPE}-retry", progress=f"{n + 1}/{pods + 1}")
        return self.nodes

    def build_job(self) -> dict:
        n, (times, end) = self.machines, self.timeline()
        attempts = []
        bounds, finals = [0, *[when + 5 for when in times]], [*times, end]
        for k, (began, ended) in enumerate(zip(bounds, finals)):
            failed = k < len(times)
            dag = self.workflow if not self.restarts else f"{self.workflow}({k})"
            groups, outbound = {}, []
            for rank in range(n):
                loop, display = self.task(rank)
                how = ("deleted" if rank == n // 2 else "exit") if failed else ""
                inputs = self.parameters(rank) + ([("restart", str(k))] if self.restarts else [])
                pod, _ = self.pod(f"{dag}.{display}", display, node_id(dag, self.workflow), rank, inputs, how=how,
                                  started=began + rank // 10 + self.random.randint(0, 30),
                                  finished=ended + self.random.randint(0, 40) if failed else
                                  ended - self.random.randint(0, 60))
                groups.setdefault(loop, []).append(pod)
                outbound.append(pod)
            done = "0" if failed else str(n + 1)
            if self.restarts:
                attempts.append(self.finish_dag(dag, groups, outbound, ended, SHAPE, failed=failed, attempt=True,
                                                progress=f"{done}/{n + 1}"))
            else:
                self.finish_dag(dag, groups, outbound, ended, SHAPE, progress=f"{done}/{n + 1}")
        if self.restarts:
            self.add(self.workflow, self.workflow, "Retry", None, template="train", started=0, finished=end,
                     progress=f"{n + 1}/{(n + 1) * len(attempts)}", resources=self.durations(end * n),
                     children=attempts)
        return self.nodes

    def finish_dag(self, dag: str, groups: dict, outbound: list, end: int, template: str, failed: bool = False,
                   attempt: bool = False, progress: str = "") -> str:
        """The DAG node: its loop tasks' TaskGroup nodes (or the machines' tasks), the scheduling watch."""
        dag_id = node_id(dag, self.workflow)
        children = []
        for loop, members in groups.items():
            if loop is None:
                children += members
                continue
            children.append(self.add(f"{dag}.{loop}", loop, "TaskGroup", dag_id, template=template,
                                     phase="Failed" if failed else "Succeeded", started=0, finished=end,
                                     progress=f"{len(members)}/{len(members)}",
                                     resources=self.durations(end * len(members)), flag={}, children=members))
        watch = self.add(f"{dag}.schedule-watch", "schedule-watch", "Pod", dag_id, template="schedule-watch",
                         started=1, finished=2, resources={"cpu": 0, "memory": 0}, outputs={"exitCode": "0"},
                         host=self.hosts[-1], synced=True)
        children.append(watch)
        boundary = self.workflow if attempt else None
        return self.add(dag, dag, "DAG", boundary, template="train", phase="Failed" if failed else "Succeeded",
                        message="child failed" if failed else "", started=0, finished=end, progress=progress,
                        resources=self.durations(end * len(outbound)), flag={"retried": True} if attempt else None,
                        children=children, outbound=[*outbound, watch])


def go_gzip_size(raw: bytes) -> int:
    """Bytes of base64(gzip(raw)) as Go's compress/gzip writes it at its default level, which
    Argo's packer uses: Go's deflate packs less than zlib's level 6, about as zlib's level 5 does
    (GO_DEFLATE: the most Go's output exceeded level 5's on the real controller's statuses)."""
    return int(len(base64.b64encode(gzip.compress(raw, 5))) * GO_DEFLATE) + 1


GO_DEFLATE = 1.01


def packed(nodes: dict) -> int:
    """Bytes of status.compressedNodes: the nodes' JSON (Go sorts map keys), gzipped and
    base64-encoded as workflow/packer compressWorkflow does."""
    return go_gzip_size(json.dumps(dict(sorted(nodes.items())), separators=(",", ":")).encode())


# What Argo holds of a finished Workflow beyond the spec as rendered and the packed nodes: the
# status's own fields (phase, times, conditions, the artifact repository, progress, resource
# durations), `"compressedNodes":""`, the metadata the API server and Argo add (uid, versions,
# labels, annotations) and the managedFields once the nodes are packed; measured beside the
# nodes on the real controller at most about 2,200 bytes (bench/status_measured.json), with room.
STATUS_REST = 2600


def status_bytes(job: Job) -> int:
    """The status Argo keeps for the job at its end, packed."""
    return packed(job.build()) + STATUS_REST


def own_bytes(job: Job) -> int:
    """The machines' own bytes as torchdag/render.py distinct_bytes counts them for the model's
    parameters (host, node rank, NIC, address): each less what every machine shares at its start and end."""
    total = 0
    for values in zip(*([value.encode() for _, value in job.parameters(rank)] for rank in range(job.machines))):
        prefix = len(os.path.commonprefix(values))
        suffix = min(len(os.path.commonprefix([value[::-1] for value in values])), min(map(len, values)) - prefix)
        total += sum(map(len, values)) - len(values) * (prefix + suffix)
    return total


def fit(shape: str, margin: int, machines: int = 4096) -> dict:
    """Figures for a shape from the model at `machines` (where a machine's status costs the
    most: ids and ranks grow with the count), with short and 63-character hashed host names,
    with no failure and one: a base for each machine and for each of its own bytes, again for
    each failure, all `margin` percent up (rounded up)."""
    failure = "job" if shape == "job" else "master"
    sizes, own = {}, {}
    for length in (0, 63):
        hosts = hashed_hosts(machines, length) if length else None
        for failures in (0, 1):
            job = Job(shape, machines, (failure,) * failures, hosts=hosts, restarts=1)
            sizes[length, failures] = status_bytes(job)
            own[length] = own_bytes(job)
    up = 1 + margin / 100
    per_byte = (sizes[63, 0] - sizes[0, 0]) / (own[63] - own[0])
    per_failure_byte = (sizes[63, 1] - sizes[63, 0] - sizes[0, 1] + sizes[0, 0]) / (own[63] - own[0])
    per_machine = (sizes[0, 0] - per_byte * own[0]) / machines
    per_failure_machine = (sizes[0, 1] - sizes[0, 0] - per_failure_byte * own[0]) / machines
    figures = {"perMachine": math.ceil(per_machine * up), "perMilliByte": math.ceil(1000 * per_byte * up),
               "perFailureMachine": math.ceil(per_failure_machine * up),
               "perFailureMilliByte": math.ceil(1000 * per_failure_byte * up)}
    # What a job costs whatever its size (the status's own fields, the DAG's node, the watch's
    # pod), and a failure (under `job` a new attempt's DAG node and watch): the most the model
    # gives beyond the per-machine figures at a few small sizes, either DAG shape.
    for failures, key in ((0, "perJob"), (1, "perFailure")):
        rest = 0.0
        for small in (1, 2, 8, 64, 150, 201):
            job = Job(shape, small, (failure,) * failures, restarts=1)
            linear = small * (figures["perMachine"] + failures * figures["perFailureMachine"]) + own_bytes(job) * (
                figures["perMilliByte"] + failures * figures["perFailureMilliByte"]) / 1000
            rest = max(rest, status_bytes(job) - linear - (figures["perJob"] if failures else 0))
        figures[key] = max(0, math.ceil(rest * up))
    return figures


def guard_takes(shape: str, restarts: int, host_length: int, n: int, folder: Path) -> bool:
    """Whether render.py's guard takes n machines × 8 NPUs of the shape, short or hashed host
    names, the helpers carried by the Workflow, node status not offloaded (docs/values.md's table)."""
    from torchdag import pipeline
    from torchdag.errors import ValuesError

    recovery = {"job": "job", "node": "node", "elastic": "node"}[shape]
    hosts = hashed_hosts(n, host_length) if host_length else [f"npu-{i:04d}" for i in range(n)]
    nodes = "".join(f"  - {{name: {hosts[i]}, address: 10.{i // 250}.{i % 250}.1, nic: eth0, "
                    "accelerator: ascend910, devices: 8}\n" for i in range(n))
    extra = f"elastic: {{minNodes: {n - n // 8}}}\n" if shape == "elastic" else ""
    path = folder / "v.yaml"
    path.write_text(f"name: fits\nimage: img:1\nscript: /t.py\nfailurePolicy: {{maxRestarts: {restarts}, "
                    f"recovery: {recovery}}}\n{extra}nodes:\n{nodes}")
    try:
        pipeline.run(path)
        return True
    except ValuesError:
        return False


def most_that_fit(shape: str, restarts: int, host_length: int) -> int:
    """The most machines × 8 NPUs render.py's guard takes for the shape, short or hashed host
    names, by bisection over real renders (the spec as rendered, the status as the guard counts it)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="torchdag-fits-"))
    low, high = 1, 4096
    if guard_takes(shape, restarts, host_length, high, folder):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if guard_takes(shape, restarts, host_length, middle, folder) else (low, middle)
    return low


def measured() -> list[dict]:
    """The real controller's rows (bench/status_measured.json)."""
    return json.loads(MEASURED.read_text(encoding="utf-8"))["rows"] if MEASURED.exists() else []


def record(dumps: list[str]) -> None:
    """Add the rows of bench_cluster.py --status dumps to bench/status_measured.json (a row per
    run: what the model is compared with; the dump itself stays out of the tree)."""
    rows = {(r["shape"], r["nodes"], r["host_length"], tuple(r["failures"])): r for r in measured()}
    for path in dumps:
        dump = json.loads(gzip.decompress(Path(path).read_bytes()))
        run, wf = dump["row"], dump["workflow"]
        failures = [stage for stage in ("job", "worker", "master") if stage in run["bytes"]]
        failed = [n.get("message", "") for n in dump["nodes"].values() if n.get("phase") in ("Failed", "Error")
                  and n.get("type") == "Pod"]  # a deleted pod's node is Error ("pod deleted")
        row = {"date": wf["metadata"]["creationTimestamp"][:10], "shape": run["shape"], "nodes": run["nodes"],
               "host_length": run["host_length"], "failures": failures, "seconds": round(run["total_s"]),
               "failed_message": max(failed, key=failed.count) if failed else "", "spec_bytes": run["spec_bytes"],
               "stages_packed_bytes": run["bytes"], "largest_packed_bytes": run["largest_packed_bytes"],
               "status_bytes": run["status_bytes"],
               "argo_compressed_nodes": len(wf["status"].get("compressedNodes", "")),
               "pod_nodes": run["pod_nodes"], "phase": run["phase"], "offload": run.get("offload", False),
               # the runs of 2026-12-06 were made with these (their dumps predate the field)
               "controller": run.get("controller") or {"qps": 100.0, "burst": 200,
                                                       "resourceRateLimit": {"limit": 10.0, "burst": 25}}}
        rows[row["shape"], row["nodes"], row["host_length"], tuple(row["failures"])] = row
    ordered = sorted(rows.values(), key=lambda r: (r["shape"], r["host_length"], r["nodes"]))
    MEASURED.write_text(json.dumps({"source": "python bench/bench_cluster.py --status SHAPE --nodes 256 1024 "
                                              "[--host-length 63] --dump DIR; python bench/bench_status.py --record "
                                              "DIR/*.json.gz", "rows": ordered}, indent=1) + "\n", encoding="utf-8")


def main() -> int:
    if sys.argv[1:2] == ["--record"]:
        record(sys.argv[2:])
        return 0
    facts = catalog()["argoStatus"]
    print(f"catalogue argoStatus: margin {facts['margin']}%, limit {facts['maxBytes']} B; the model's status at "
          "the job's end (packed), a year-long run's resource durations")
    for shape, failure in (("job", "job"), ("node", "master"), ("node", "worker"), ("elastic", "master")):
        for host_length in (0, 63):
            for n in (256, 1024, 4096):
                hosts = hashed_hosts(n, host_length) if host_length else None
                size = status_bytes(Job(shape, n, (failure,), hosts=hosts))
                print(f"{shape:7s} through a {failure:6s} failure, hosts of {host_length or 8:2d} characters, "
                      f"{n:5d} machines: {size:9d} B, {size / n:6.1f} B a machine")
    for shape in ("job", "node", "elastic"):
        figures = {key: value for key, value in facts["shapes"][shape].items() if key != "name"}
        print(f"{shape}: the model's figures at 4,096 machines + {facts['margin']}%: {fit(shape, facts['margin'])}; "
              f"the catalogue's: {figures}")
    print("the most machines x 8 NPUs the guard takes (render.py; offload off):")
    for shape in ("job", "node", "elastic"):
        for restarts in (0, 1, 2) if shape == "job" else (1, 2):
            counts = [most_that_fit(shape, restarts, length) for length in (0, 63)]
            print(f"  {shape:7s} failurePolicy.maxRestarts {restarts}: {counts[0]} with short host names, "
                  f"{counts[1]} with 63-character ones")
    for row in measured():
        job = Job(row["shape"], row["nodes"], tuple(row["failures"]), seconds=row["seconds"], requests=False,
                  hosts=hashed_hosts(row["nodes"], row["host_length"]) if row["host_length"] > 8 else None,
                  failed_message=row["failed_message"])
        model = status_bytes(job)
        print(f"real controller {row['date']}: {row['shape']} {row['nodes']} machines, hosts of {row['host_length']} "
              f"characters, through {' + '.join(row['failures'])}: status {row['status_bytes']} B; the model with "
              f"the run's durations {model} B ({(model - row['status_bytes']) / row['status_bytes']:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
