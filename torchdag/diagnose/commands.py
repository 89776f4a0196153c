"""`torchdag status NAME [--watch]`, `torchdag logs NAME [--rank R] [--attempt K] [-f]` and
`torchdag diagnose NAME [--json]` (docs/failures.md). Each reads the Workflow, its pods,
their events and logs from the cluster (cluster.py) and judges them with core.py; their
options are parsed where every command's are (torchdag/cli.py).

Exit status: status and logs 0; diagnose 0 healthy (or still running without a failure),
1 failed and diagnosed, 2 failed and not recognised. Bad input (no such Workflow, a
namespace without access, an API server that does not answer, no Kubernetes client) is one
line on stderr and exit 2; a usage error is argparse's, exit 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import threading
import time

from ..errors import run_command
from . import core
from .cluster import Cluster, ClusterUnusable

FINISHED = ("Succeeded", "Failed", "Error")
WATCH_EVERY_S = 2.0
STATUS_TAIL = 300  # log lines read per pod for status: the last step line and the last line's time


def _cluster(args, prog: str) -> Cluster:
    ClusterUnusable.prog = prog
    return Cluster(args.kubeconfig, args.namespace, args.context, args.argo_server)


def _say(prog: str, lines: list[str]) -> None:
    """How the NAME was resolved and how the nodes were read: one stderr line each, so
    stdout stays the table, the log lines or the JSON."""
    for line in lines:
        print(f"{prog}: {line}", file=sys.stderr, flush=True)


def _ago(when: dt.datetime | None, now: dt.datetime) -> str:
    if when is None:
        return "-"
    seconds = int((now - when).total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def _phase(view: core.PodView) -> str:
    if view.phase == "Pending":
        why = view.reason or "waiting to be scheduled" if not view.node_name else view.reason or "starting"
        return f"Pending ({why})"
    if view.phase in ("Failed", "Error"):
        detail = f"exit {view.exit_code}" if view.exit_code is not None else view.reason or view.message[:40]
        reason = view.container_reason or view.reason
        return f"{view.phase} ({detail}{', ' + reason if reason and reason not in detail else ''})"
    return view.phase or "?"


def status_rows(workflow: dict, views: list[core.PodView], now: dt.datetime) -> list[str]:
    name = (workflow.get("metadata") or {}).get("name", "")
    status = workflow.get("status") or {}
    head = f"workflow {name}: {status.get('phase') or 'Pending'}"
    if status.get("progress"):
        head += f", progress {status['progress']} (Argo)"
    if status.get("message"):
        head += f": {status['message']}"
    rows = [["RANK", "HOST", "ADDRESS", "POD", "PHASE", "ATTEMPT", "RESTARTS", "PROGRESS", "LAST LOG"]]
    for view in core.latest_attempt(views):
        rows.append([str(view.rank) if view.rank is not None else view.role, view.host or "-", view.address or "-",
                     view.name, _phase(view), view.attempt, str(view.restarts), view.progress or "-",
                     _ago(view.last_log_time(), now)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [head] + ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def status(args: argparse.Namespace, prog: str = "torchdag status") -> int:
    def body() -> int:
        cluster = _cluster(args, prog)
        workflow = cluster.resolve(args.name)
        _say(prog, cluster.notes)
        name = workflow["metadata"]["name"]
        shown, said = None, []
        while True:
            workflow, pods, events, logs = cluster.snapshot(workflow, tail=STATUS_TAIL, with_events=False)
            if cluster.status_notes != said:
                _say(prog, cluster.status_notes)
                said = cluster.status_notes
            now = dt.datetime.now(dt.timezone.utc)
            lines = status_rows(workflow, core.build_views(workflow, pods, events, logs), now)
            if lines != shown:
                if args.watch and shown is not None and sys.stdout.isatty():
                    sys.stdout.write("\x1b[H\x1b[2J")
                print("\n".join(lines), flush=True)
                shown = lines
            if not args.watch or (workflow.get("status") or {}).get("phase") in FINISHED:
                return 0
            time.sleep(WATCH_EVERY_S)
            workflow = cluster.fetch(name)
    return run_command(body, prog)


# -- logs -------------------------------------------------------------------------------

def _chosen(views: list[core.PodView], rank: int | None, attempt: str | None) -> list[core.PodView]:
    training = [v for v in views if v.role == "train"] or views
    if rank is not None:
        training = [v for v in training if v.rank == rank]
    if attempt is not None:
        return [v for v in training if v.attempt == attempt or v.attempt.split(".")[-1] == attempt]
    return [v for v in core.latest_attempt(training)]


def merged_lines(views: list[core.PodView], timestamps: bool = False) -> list[str]:
    """Every chosen pod's lines in time order, each with `[rank R host]` (a line without a
    time keeps its place after the one before it)."""
    entries = []
    for order, view in enumerate(views):
        prefix = f"[rank {view.rank} {view.host or view.node_name or '-'}]" if view.rank is not None \
            else f"[{view.role} {view.host or '-'}]"
        last = None
        for index, line in enumerate(view.log):
            last = line.time or last
            shown = f"{line.time.isoformat()} " if timestamps and line.time else ""
            entries.append(((last or core._EPOCH), order, index, f"{prefix} {shown}{line.text}"))
    entries.sort(key=lambda e: e[:3])
    return [e[3] for e in entries]


def logs(args: argparse.Namespace, prog: str = "torchdag logs") -> int:
    def body() -> int:
        cluster = _cluster(args, prog)
        workflow = cluster.resolve(args.name)
        _say(prog, cluster.notes + cluster.status_notes)
        workflow, pods, events, logs = cluster.snapshot(workflow, tail=None, with_events=False)
        views = _chosen(core.build_views(workflow, pods, events, logs), args.rank, args.attempt)
        if not views:
            which = f"rank {args.rank}" if args.rank is not None else "any rank"
            raise ClusterUnusable(f"workflow {workflow['metadata']['name']} has no pod for {which}"
                                  + (f" in attempt {args.attempt}" if args.attempt is not None else ""))
        for line in merged_lines(views, args.timestamps):
            print(line, flush=False)
        sys.stdout.flush()
        if args.follow:
            _follow(cluster, views, args.timestamps)
        return 0
    return run_command(body, prog)


def _follow(cluster: Cluster, views: list[core.PodView], timestamps: bool) -> None:
    """New lines of every running pod, as they come (one stream per pod)."""
    lock = threading.Lock()

    def one(view: core.PodView) -> None:
        last = view.last_log_time()
        for raw in cluster.follow(view.name, since_seconds=1):
            line = core.parse_log(raw)[0] if raw else core.LogLine(None, "")
            if last is not None and line.time is not None and line.time <= last:
                continue  # already printed
            with lock:
                print(merged_lines([core.PodView(view.name, view.rank, view.role, view.host, log=[line])],
                                   timestamps)[0], flush=True)
    threads = [threading.Thread(target=one, args=(v,), daemon=True) for v in views if v.phase in ("Running",
                                                                                                   "Pending")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# -- diagnose ---------------------------------------------------------------------------

def diagnose(args: argparse.Namespace, prog: str = "torchdag diagnose") -> int:
    def body() -> int:
        cluster = _cluster(args, prog)
        workflow = cluster.resolve(args.name)
        _say(prog, cluster.notes)
        workflow, pods, events, logs = cluster.snapshot(workflow)
        views = core.build_views(workflow, pods, events, logs)
        result = core.diagnose(workflow, views)
        result.notes += cluster.status_notes
        name = workflow["metadata"]["name"]
        if args.json:
            print(json.dumps(result.as_dict(name), indent=2))
        else:
            print("\n".join(core.report_lines(name, result)))
        return result.status
    return run_command(body, prog)
