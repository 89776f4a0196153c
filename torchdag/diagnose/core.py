"""What went wrong in a job, from what the cluster knows: the Workflow, its pods, their
events and their logs. Pure functions over plain dicts (the API's JSON), so recorded
snapshots test them (tests/diagnose/test_diagnose.py) and `make smoke` can share them.

The first failure is the earliest CAUSE in time, not the loudest line: every survivor of a
dead rank prints a connection reset or a collective timeout (signatures marked `effect`),
and those are never named first while a cause shows elsewhere. Without any cause, a rank
that went silent while the others waited in a collective is the hang.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from . import signatures
from .views import (  # noqa: F401 -- the names status and the tests use, through core
    _EPOCH,
    NODE_NAME_ANNOTATION,
    RANK_LABEL,
    WORKFLOW_LABEL,
    LogLine,
    PodView,
    build_views,
    first_event_time,
    latest_attempt,
    node_views,
    parse_log,
)

TRACEBACK_LINES = 8  # shown of a traceback: its last lines name the frame and the exception

# What a container's exit code says (128+N: killed by signal N).
EXIT_MEANINGS = {
    1: "a failure the process reported (its log says which)",
    2: "a usage error (bad options or arguments)",
    126: "the command is not executable",
    127: "command not found: the image lacks the command or script",
    134: "SIGABRT: the process aborted (a C++ exception or assertion)",
    135: "SIGBUS: often /dev/shm too small (raise shmSize)",
    137: "SIGKILL: killed, usually by the OOM killer (memory limit) or kill -9",
    139: "SIGSEGV: a segmentation fault",
    143: "SIGTERM: terminated (the job was stopped, or the pod deleted)",
}


def exit_meaning(code: int | None) -> str:
    if code is None:
        return ""
    if code in EXIT_MEANINGS:
        return EXIT_MEANINGS[code]
    return f"killed by signal {code - 128}" if 128 < code < 160 else ""


@dataclass
class Finding:
    pod: PodView
    signature: str
    cause: str
    fix: str
    effect: bool
    time: dt.datetime | None
    evidence: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"rank": self.pod.rank, "host": self.pod.host or self.pod.node_name, "pod": self.pod.name,
                "role": self.pod.role, "attempt": self.pod.attempt, "exitCode": self.pod.exit_code,
                "exitMeaning": exit_meaning(self.pod.exit_code), "signature": self.signature, "cause": self.cause,
                "fix": self.fix, "effect": self.effect, "time": self.time.isoformat() if self.time else None,
                "evidence": self.evidence}


@dataclass
class Diagnosis:
    status: int  # 0 healthy, 1 failed and diagnosed, 2 cannot tell
    phase: str
    first: Finding | None
    others: list[Finding]
    notes: list[str] = field(default_factory=list)

    def as_dict(self, name: str) -> dict:
        return {"workflow": name, "phase": self.phase, "status": self.status,
                "verdict": {0: "healthy", 1: "failed", 2: "unknown"}[self.status],
                "first": self.first.as_dict() if self.first else None,
                "others": [f.as_dict() for f in self.others], "notes": self.notes}


# -- findings ---------------------------------------------------------------------------

def _traceback_before(log: list[LogLine], index: int) -> list[str]:
    start = index
    while start > 0 and index - start < 200 and "Traceback (most recent call last)" not in log[start].text:
        start -= 1
    lines = [line.text for line in log[start:index + 1]] if "Traceback" in log[start].text else [log[index].text]
    lines = [text for text in lines if text.strip().strip("^~")]  # not Python's carets under a frame
    return lines[-TRACEBACK_LINES:] if len(lines) > TRACEBACK_LINES else lines


def findings_of(view: PodView) -> list[Finding]:
    """What one pod's status, events and log say: the first line of each signature."""
    out: list[Finding] = []
    seen: set[str] = set()

    def add(sig, found, time, evidence):
        if sig.id in seen:
            return
        seen.add(sig.id)
        cause, fix = sig.describe(found)
        out.append(Finding(view, sig.id, cause, fix, sig.effect, time, evidence))

    for text in view.states:
        hit = signatures.match(text, "state")
        if hit:
            add(*hit, view.finished or view.created, [text])
    for event in view.events:
        text = f"{event.get('reason', '')}: {event.get('message', '')}"
        hit = signatures.match(text, "event")
        if hit:
            add(*hit, first_event_time(event), [text])
    if view.reason and view.phase == "Pending" and view.message:
        hit = signatures.match(f"{view.reason}: {view.message}", "event")
        if hit:
            add(*hit, view.created, [f"{view.reason}: {view.message}"])
    for index, line in enumerate(view.log):
        hit = signatures.match(line.text, "log")
        if hit:
            sig = hit[0]
            evidence = _traceback_before(view.log, index) if sig.id == "python-exception" else [line.text]
            add(*hit, line.time or view.finished, evidence)
    # The log can be out of reach (its kubelet slow or gone) where the pod's status still holds
    # the termination message, which the scheduling watch writes its verdict to.
    if view.termination:
        hit = signatures.match(view.termination, "log")
        if hit:
            add(*hit, view.finished, [view.termination])
    return out


def _when(finding: Finding) -> dt.datetime:
    return finding.time or finding.pod.finished or dt.datetime.max.replace(tzinfo=dt.timezone.utc)


WAITING = ("collective-timeout", "hccl-notify-timeout", "nccl-watchdog")  # a rank waiting for a peer
STALL_FOR = re.compile(r"no step finished for (\d+) s")


def hang(views: list[PodView], now: dt.datetime) -> Finding | None:
    """A training rank that went silent while its peers waited in a collective (or timed
    out of it): they kept printing after its last line, by more than twice the interval at
    which a waiting rank prints (trainer/progress.py), so it is not merely waiting too."""
    waits: dict[str, list[dt.datetime]] = {}
    interval = None
    training = [v for v in views if v.role == "train"]
    for view in training:
        for line in view.log:
            hit = signatures.match(line.text, "log") if line.time else None
            if hit and hit[0].id in WAITING:
                waits.setdefault(view.name, []).append(line.time)
                found = STALL_FOR.search(line.text)
                if found:
                    interval = min(interval or 10 ** 9, int(found.group(1)))
    if not waits:
        return None
    margin = dt.timedelta(seconds=2 * (interval or 0) + 2)
    silent = []
    for view in training:
        if view.phase == "Succeeded":
            continue
        last = view.last_log_time()
        if any(last is None or when > last + margin for name, times in waits.items() if name != view.name
               for when in times):
            silent.append(view)
    if not silent:
        return None
    view = min(silent, key=lambda v: v.last_log_time() or _EPOCH)
    last = view.last_log_time()
    quiet = f"silent since {last:%H:%M:%S} ({int((now - last).total_seconds())} s)" if last else "never logged"
    peers = ", ".join(v.label for v in training if v.name in waits and v is not view)
    lines = [line.text for line in view.log[-3:]]
    return Finding(view, "hang", f"this rank stopped making progress ({quiet}, progress {view.progress or '?'}) "
                   f"while {peers} waited in a collective", "see what the process is doing (`py-spy dump --pid` on "
                   "the host, its state in `ps`: T = stopped, D = stuck in the kernel); a deadlock in the script, a "
                   "stopped process or a dead device stops every rank with it", False, last, lines)


def diagnose(workflow: dict, views: list[PodView], now: dt.datetime | None = None) -> Diagnosis:
    now = now or dt.datetime.now(dt.timezone.utc)
    phase = (workflow.get("status") or {}).get("phase") or "Pending"
    findings = [f for v in views for f in findings_of(v)]
    causes = sorted((f for f in findings if not f.effect), key=_when)
    effects = sorted((f for f in findings if f.effect), key=_when)
    notes = []
    if not causes:
        stuck = hang(views, now)
        if stuck is not None:
            causes = [stuck]
    if not causes:
        # No known signature: a failed container's exit code is still a cause when it means something.
        for view in sorted((v for v in views if v.exit_code not in (None, 0)),
                           key=lambda v: v.finished or _EPOCH):
            if view.exit_code in (126, 127, 134, 135, 137, 139):
                causes.append(Finding(view, f"exit-{view.exit_code}", exit_meaning(view.exit_code),
                                      "see the log's last lines (torchdag logs NAME --rank R)", False, view.finished,
                                      [line.text for line in view.log[-5:]]))
                break
    if causes:
        first = causes[0]
        _rendezvous_names(first, views)
        _unplaced_rank(first, views)
        _rbac_role(first, (workflow.get("metadata") or {}).get("namespace") or "<namespace>")
        return Diagnosis(1, phase, first, causes[1:] + effects, notes)
    if phase in ("Failed", "Error") or any(v.phase == "Failed" for v in views):
        failed = sorted((v for v in views if v.phase in ("Failed", "Error")), key=lambda v: v.finished or _EPOCH)
        first = effects[0] if effects else None
        if first is None and failed:
            v = failed[0]
            first = Finding(v, "unknown", f"{v.label} failed (exit code {v.exit_code}"
                            f"{': ' + exit_meaning(v.exit_code) if exit_meaning(v.exit_code) else ''}) and no known "
                            "signature explains it", "read its log: torchdag logs NAME --rank R", False, v.finished,
                            [line.text for line in v.log[-5:]] or ([v.message] if v.message else []))
        notes.append("no known cause found: the first failure below is a guess")
        return Diagnosis(2, phase, first, effects[1:] if effects else [], notes)
    return Diagnosis(0, phase, None, effects, notes)


UNPLACED = re.compile(r"node-rank (\d+)(?: on host (\S+))?")


def _unplaced_rank(first: Finding, views: list[PodView]) -> None:
    """The watch's verdict names the rank it stopped the job for: the finding is that rank's
    (its pod may be gone: Argo deletes Pending pods when it stops a job)."""
    if first.signature not in ("never-scheduled", "gang-not-placed") or first.pod.rank is not None:
        return
    found = UNPLACED.search(" ".join(first.evidence))
    if not found:
        return
    rank = int(found.group(1))
    owner = next((v for v in views if v.rank == rank and v.role == "train"), None)
    first.pod = owner or PodView(name="", rank=rank, host=found.group(2) or "", phase="Pending")
    if found.group(2):
        first.pod.host = found.group(2)


FORBIDDEN = re.compile(r'cannot (\w+) resource "([^"]+)"(?: in API group "([^"]*)")?')


def _rbac_role(first: Finding, namespace: str) -> None:
    """A call the API refused names the Role that grants it (catalogue `rbac`, docs/rbac/) and
    every verb that Role gives on the resource, so one apply fixes the job."""
    found = FORBIDDEN.search(" ".join(first.evidence)) if first.signature == "forbidden" else None
    if not found:
        return
    from ..catalog import catalog

    verb, resource, group = found.group(1), found.group(2), found.group(3) or ""
    entry = catalog()["rbac"]
    for name, grant in entry["grants"].items():
        rule = next((r for r in grant["rules"] if resource in r["resources"] and group in r["apiGroups"]), None)
        if rule:
            verbs = ", ".join(rule["verbs"][:-1]) + f" and {rule['verbs'][-1]}" if len(rule["verbs"]) > 1 \
                else rule["verbs"][0]
            first.cause = (f"the API refused the ServiceAccount the job's pods run as: it may not {verb} {resource} "
                           f"(RBAC); "
                           f"{verbs} on {resource} are needed for {grant['why']}")
            first.fix = (f"kubectl apply -n {namespace} -f {entry['folder']}/{name}.yaml (the Role "
                         f"{entry['roleName'].replace('{name}', name)}, docs/rbac.md; with the chart, rbac.create)")
            return


def _rendezvous_names(first: Finding, views: list[PodView]) -> None:
    """A rendezvous timeout names the ranks that never joined: those that never logged, or never ran."""
    if first.signature != "rendezvous-timeout":
        return
    absent = [v for v in views if v.role == "train" and v is not first.pod and (not v.log or v.phase == "Pending")]
    if absent:
        first.cause += "; never joined: " + ", ".join(f"{v.label} ({v.phase or 'no pod'})" for v in absent)


# -- text -------------------------------------------------------------------------------

def report_lines(name: str, diagnosis: Diagnosis) -> list[str]:
    d = diagnosis
    verdict = {0: "no failure found", 1: "failed", 2: "failed, cause not recognised"}[d.status]
    lines = [f"workflow {name}: {d.phase}; {verdict}"]
    f = d.first
    if f is not None:
        when = f" at {f.time:%H:%M:%S}" if f.time else ""
        code = (f", exit code {f.pod.exit_code}" + (f" ({exit_meaning(f.pod.exit_code)})"
                if exit_meaning(f.pod.exit_code) else "")) if f.pod.exit_code not in (None, 0) else ""
        lines.append(f"first failure: {f.pod.label} (pod {f.pod.name}, attempt {f.pod.attempt}){when}{code}")
        lines.append(f"cause: {f.cause} [{f.signature}]")
        lines += [f"  | {text}" for text in f.evidence]
        lines.append(f"fix: {f.fix}")
    for other in d.others[:8]:
        tag = "then" if other.effect else "also"
        lines.append(f"{tag}: {other.pod.label}: {other.cause} [{other.signature}]")
    lines += [f"note: {note}" for note in d.notes]
    return lines
