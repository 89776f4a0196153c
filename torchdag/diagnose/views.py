"""A job's pods as status and diagnose see them: rank, host, phase, attempt, progress, log
lines with their times; from the pods, and from the Workflow's nodes whose pods are gone."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

RANK_LABEL = "torchdag.io/node-rank"
ROLE_LABEL = "torchdag.io/role"
NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
MAX_POD_PREFIX = 253 - 10 - 1  # Argo's maxPrefixLength - 1 (Kubernetes' name limit less a hash)
STEP = re.compile(r"\bstep (\d+)/(\d+)\b")
EXIT_IN_MESSAGE = re.compile(r"\(exit code (\d+)\)")
TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (.*)$")


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        # RFC 3339 with nanoseconds: Python takes at most microseconds
        head, _, rest = text.partition(".")
        digits = re.match(r"\d+", rest)
        zone = rest[digits.end():] if digits else rest
        try:
            value = dt.datetime.fromisoformat(f"{head}.{(digits.group(0) if digits else '0')[:6]}"
                                              f"{zone.replace('Z', '+00:00')}")
        except ValueError:
            return None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


@dataclass
class LogLine:
    time: dt.datetime | None
    text: str


def parse_log(text: str) -> list[LogLine]:
    """A log as the API returns it with timestamps=true (`<RFC3339> <line>`), or without."""
    out = []
    for raw in text.splitlines():
        found = TIMESTAMP.match(raw)
        out.append(LogLine(parse_time(found.group(1)), found.group(2)) if found else LogLine(None, raw))
    return out


@dataclass
class PodView:
    """One pod of the job (or a Workflow node whose pod is gone), as status and diagnose see it."""

    name: str
    rank: int | None = None
    role: str = "train"  # train, or the watch tasks (gang-watch, schedule-watch), or another task
    host: str = ""  # the host the node asks for (its affinity), else where it was placed
    node_name: str = ""  # where the scheduler placed it ("" while unscheduled)
    address: str = ""
    phase: str = ""
    reason: str = ""  # Pending's or Failed's reason
    message: str = ""
    exit_code: int | None = None
    container_reason: str = ""
    finished: dt.datetime | None = None
    created: dt.datetime | None = None
    attempt: str = "0"
    restarts: int = 0
    progress: str = ""
    states: list[str] = field(default_factory=list)  # "waiting Reason: message" / "terminated Reason: message"
    events: list[dict] = field(default_factory=list)
    log: list[LogLine] = field(default_factory=list)

    @property
    def label(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else self.role
        return f"{who} on {self.host or self.node_name or '(unscheduled)'}"

    def last_log_time(self) -> dt.datetime | None:
        return next((line.time for line in reversed(self.log) if line.time), None)

    def log_progress(self) -> str:
        for line in reversed(self.log):
            found = STEP.search(line.text)
            if found:
                return f"{found.group(1)}/{found.group(2)}"
        return ""


# -- pods -------------------------------------------------------------------------------

def attempt_of(node_name: str) -> str:
    """The attempt numbers in an Argo node name, e.g. `wf.train(1).node-0(2)` -> "1.2"; "0" for none."""
    numbers = re.findall(r"\((\d+)\)", node_name or "")
    return ".".join(numbers) if numbers else "0"


def _affinity_host(spec: dict) -> str:
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("values"):
                return expr["values"][0]
    return (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname", "")


def _main_container(status: dict) -> dict:
    statuses = status.get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == "main"), statuses[0] if statuses else {})


def pod_view(pod: dict) -> PodView:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    rank = labels.get(RANK_LABEL)
    view = PodView(name=meta.get("name", ""), rank=int(rank) if rank and rank.isdigit() else None,
                   role="train" if rank is not None else labels.get(ROLE_LABEL, "task"),
                   host=_affinity_host(spec), node_name=spec.get("nodeName") or "",
                   address=status.get("podIP") or status.get("hostIP") or "", phase=status.get("phase", ""),
                   reason=status.get("reason") or "", message=status.get("message") or "",
                   created=parse_time(meta.get("creationTimestamp")),
                   attempt=attempt_of(annotations.get(NODE_NAME_ANNOTATION, "")))
    view.host = view.host or view.node_name
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and view.phase == "Pending":
            view.reason = view.reason or cond.get("reason") or ""
            view.message = view.message or cond.get("message") or ""
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        view.restarts += int(c.get("restartCount") or 0)
        for kind in ("waiting", "terminated"):
            state = (c.get("state") or {}).get(kind)
            if state and state.get("reason") and not (kind == "waiting" and state["reason"] == "PodInitializing"):
                view.states.append(f"{kind} {state['reason']}" + (f": {state['message']}" if state.get("message")
                                                                   else ""))
    main = _main_container(status)
    term = (main.get("state") or {}).get("terminated") or ((main.get("lastState") or {}).get("terminated") or {})
    if term:
        view.exit_code = term.get("exitCode")
        view.container_reason = term.get("reason") or ""
        view.finished = parse_time(term.get("finishedAt"))
    waiting = (main.get("state") or {}).get("waiting") or {}
    if view.phase == "Pending" and waiting.get("reason") and waiting["reason"] != "PodInitializing":
        view.reason, view.message = waiting["reason"], waiting.get("message", "")
    return view


def node_views(workflow: dict, known: set[str]) -> list[PodView]:
    """Pod nodes of the Workflow's status whose pod is gone (deleted when the job was
    stopped, or garbage-collected): their rank and host come from the task's parameters."""
    name = (workflow.get("metadata") or {}).get("name", "")
    out = []
    for node_id, node in ((workflow.get("status") or {}).get("nodes") or {}).items():
        if node.get("type") != "Pod":
            continue
        pod_name = pod_name_of(name, node_id, node)
        if pod_name in known:
            continue
        params = {p.get("name"): p.get("value") for p in (node.get("inputs") or {}).get("parameters") or []}
        rank = params.get("node-rank")
        view = PodView(name=pod_name, rank=int(rank) if rank and str(rank).isdigit() else None,
                       role="train" if rank is not None else node.get("templateName", "task"),
                       host=params.get("host") or node.get("hostNodeName") or "", node_name=node.get("hostNodeName")
                       or "", phase=node.get("phase", ""), message=node.get("message") or "",
                       created=parse_time(node.get("startedAt")), finished=parse_time(node.get("finishedAt")),
                       attempt=attempt_of(node.get("name", "")), progress=node.get("progress") or "")
        code = EXIT_IN_MESSAGE.search(view.message)  # Argo's "main: Error (exit code 137)": the pod's own is gone
        view.exit_code = int(code.group(1)) if code else None
        out.append(view)
    return out


def pod_name_of(workflow: str, node_id: str, node: dict) -> str:
    """Argo's pod name for a node (POD_NAMES v2, workflow/util/pod_name.go GeneratePodName):
    `<workflow>-<template>` (at most 242 characters) and the FNV-1a hash of the node's name."""
    template, name = node.get("templateName") or "", node.get("name") or ""
    if not name:
        return node_id
    if name == workflow:
        return workflow
    prefix = f"{workflow}-{template}" if template else workflow
    digest = 0x811C9DC5
    for byte in name.encode():
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{prefix[:MAX_POD_PREFIX]}-{digest}"


def build_views(workflow: dict, pods: list[dict], events: list[dict], logs: dict[str, str]) -> list[PodView]:
    """Every pod of the job with its events, its log and the progress Argo recorded."""
    views = [pod_view(p) for p in pods]
    views += node_views(workflow, {v.name for v in views})
    progress = {}
    wf_name = (workflow.get("metadata") or {}).get("name", "")
    for node_id, node in ((workflow.get("status") or {}).get("nodes") or {}).items():
        if node.get("type") == "Pod" and node.get("progress"):
            progress[pod_name_of(wf_name, node_id, node)] = node["progress"]
    for view in views:
        view.events = sorted((e for e in events if (e.get("involvedObject") or {}).get("name") == view.name),
                             key=lambda e: event_time(e) or dt.datetime.min.replace(tzinfo=dt.timezone.utc))
        view.log = parse_log(logs.get(view.name, ""))
        # Argo shows every pod as 0/1 or 1/1 until the container reports N/M: the log's step is better then
        argo = progress.get(view.name) or view.progress
        own = argo if argo and not argo.endswith("/1") else ""
        view.progress = own or view.log_progress() or argo
    views.sort(key=lambda v: (v.rank is None, v.rank if v.rank is not None else 0, v.created or _EPOCH, v.name))
    return views


_EPOCH = dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def event_time(event: dict) -> dt.datetime | None:
    return parse_time(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
                      or (event.get("metadata") or {}).get("creationTimestamp"))


def first_event_time(event: dict) -> dt.datetime | None:
    return parse_time(event.get("firstTimestamp") or event.get("eventTime") or event.get("lastTimestamp")
                      or (event.get("metadata") or {}).get("creationTimestamp"))


def latest_attempt(views: list[PodView]) -> list[PodView]:
    """Per rank (and per watch task), the pod of the latest attempt: what status shows; its
    restarts count the earlier attempts' pods too."""
    latest: dict[tuple, PodView] = {}
    earlier: dict[tuple, int] = {}
    for view in sorted(views, key=lambda v: v.created or _EPOCH):
        key = (view.rank, view.role)
        if key in latest:
            earlier[key] = earlier.get(key, 0) + latest[key].restarts + 1
        latest[key] = view
    for key, view in latest.items():
        view.restarts += earlier.get(key, 0)
    return sorted(latest.values(), key=lambda v: (v.rank is None, v.rank or 0, v.role))


