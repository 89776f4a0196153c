"""What went wrong in a job, from what the cluster knows: the Workflow, its pods, their
events and their logs. Pure functions over plain dicts (the API's JSON), so recorded
snapshots test them (tests/diagnose/) and `make smoke` can share them.

The first failure is the earliest ROOT in time, not the loudest line: every survivor of a
dead rank prints a connection reset or a collective timeout (signatures of kind
`consequence`), and those are never named first while any rank shows a root. Each finding
keeps the best clock its record has: a log line's time (sub-second, as the kubelet
recorded it), else the torchelastic error file's timestamp (torchrun's Root Cause block,
to the second), else the pod's terminated or event time (to the second); a whole second
stands for its middle when it meets a sub-second time (_when). A hang comes from the ranks' own records
(torchdag/agents/torchdag_flight.py, read by records.py): the collective they wait in and
the rank that never entered it; without records, a rank that went silent while the others
printed that they wait.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from . import records, signatures
from .torchrun import PREFIX, summary_entries, traceback_before
from .views import (  # noqa: F401 -- the names status and the tests use, through core
    _EPOCH,
    NODE_NAME_ANNOTATION,
    RANK_LABEL,
    TRAINING,
    WORKFLOW_LABEL,
    LogLine,
    PodView,
    build_views,
    first_event_time,
    latest_attempt,
    node_views,
    parse_log,
)

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
    effect: bool  # a consequence of another rank's failure
    time: dt.datetime | None
    evidence: list[str] = field(default_factory=list)
    precise: bool = False  # time has sub-second precision (a log line's), not a whole second
    process_rank: int | None = None  # the failed process's global rank, when a record names it

    @property
    def who(self) -> str:
        """`rank 5 (host b)` for a process rank a record named; the pod's label otherwise."""
        if self.process_rank is None:
            return self.pod.label
        return f"rank {self.process_rank} ({self.pod.host or self.pod.node_name or 'unscheduled'})"

    def as_dict(self) -> dict:
        return {"rank": self.pod.rank, "processRank": self.process_rank, "host": self.pod.host or self.pod.node_name,
                "pod": self.pod.name, "role": self.pod.role, "attempt": self.pod.attempt,
                "exitCode": self.pod.exit_code, "exitMeaning": exit_meaning(self.pod.exit_code),
                "signature": self.signature, "kind": "consequence" if self.effect else "root", "cause": self.cause,
                "fix": self.fix, "effect": self.effect, "time": self.time.isoformat() if self.time else None,
                "evidence": self.evidence}


@dataclass
class Diagnosis:
    status: int  # 0 healthy, 1 failed and diagnosed, 2 cannot tell
    phase: str
    first: Finding | None
    others: list[Finding]
    notes: list[str] = field(default_factory=list)
    stragglers: list[records.Straggler] = field(default_factory=list)

    def as_dict(self, name: str) -> dict:
        return {"workflow": name, "phase": self.phase, "status": self.status,
                "verdict": {0: "healthy", 1: "failed", 2: "unknown"}[self.status],
                "first": self.first.as_dict() if self.first else None,
                "others": [f.as_dict() for f in self.others], "notes": self.notes,
                "stragglers": [{"rank": s.rank.rank, "host": s.rank.view.host or s.rank.view.node_name,
                                "pod": s.rank.view.name, "ratio": round(s.ratio, 2), "busyMs": s.busy_ms,
                                "medianMs": s.median_ms, "windows": s.windows, "first": s.first, "last": s.last,
                                "current": s.current} for s in self.stragglers]}


# -- findings ---------------------------------------------------------------------------

def findings_of(view: PodView) -> list[Finding]:
    """What one pod's status, events and log say: the first line of each signature."""
    out: list[Finding] = []
    seen: dict[str, Finding] = {}

    def add(sig, found, time, evidence, precise=False, process_rank=None):
        if sig.id in seen:
            if process_rank is not None and seen[sig.id].process_rank is None:
                seen[sig.id].process_rank = process_rank  # torchrun's summary names the rank that raised it
            return
        cause, fix = sig.describe(found)
        seen[sig.id] = Finding(view, sig.id, cause, fix, sig.effect, time, evidence, precise, process_rank)
        out.append(seen[sig.id])

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
    summary = summary_entries(view.log)
    for index, line in enumerate(view.log):
        hit = signatures.match(line.text, "log")
        if not hit:
            continue
        sig = hit[0]
        entry = summary.get(index)
        if entry is not None:
            # a copy in torchrun's summary: the error file's time (the failure's), not the summary's
            evidence = traceback_before(view.log, index, entry.start) if sig.id == "python-exception" \
                else [line.text.strip()]
            evidence = [re.sub(r"^\s*traceback\s*:\s*", "", text).strip() for text in evidence]
            add(*hit, entry.time or line.time or view.finished, evidence, False, entry.rank)
        else:
            evidence = traceback_before(view.log, index) if sig.id == "python-exception" else [line.text]
            prefix = PREFIX.match(line.text)
            add(*hit, line.time or view.finished, evidence, line.time is not None,
                int(prefix.group(1)) if prefix else None)
    # The log can be out of reach (its kubelet slow or gone) where the pod's status still holds
    # the termination message, which the scheduling watch writes its verdict to.
    if view.termination:
        hit = signatures.match(view.termination, "log")
        if hit:
            add(*hit, view.finished, [view.termination])
    return out


_NEVER = dt.datetime.max.replace(tzinfo=dt.timezone.utc)


HALF_SECOND = dt.timedelta(milliseconds=500)


def _when(finding: Finding) -> tuple:
    """Earliest first, by the best clock each finding has. A whole second's clock (an error
    file's, a terminated or event time: truncated) stands for the middle of its second, so
    a sub-second time in the same second orders before it in the first half, after it in
    the second; a tie by rank."""
    time = finding.time or finding.pod.finished or _NEVER
    if not finding.precise and time != _NEVER:
        time = time.replace(microsecond=0) + HALF_SECOND
    rank = finding.process_rank if finding.process_rank is not None else (finding.pod.rank or 0)
    return (time, rank)


# A culprit's own end this soon after its peers began to wait is why it never arrived (torchrun
# logs a SIGKILLed worker within its monitor interval); torchrun's kill of a stopped worker comes
# only after a peer's process-group timeout, far later.
DIED_WHILE_WAITED = dt.timedelta(seconds=5)


def _within(finding: Finding, stuck: Finding, window: dt.timedelta) -> bool:
    """Whether a finding's clock is at most `window` after the stuck rank's."""
    return finding.time is not None and stuck.time is not None and finding.time - stuck.time <= window


def _raised_as_it_began(finding: Finding, stuck: Finding) -> bool:
    """Any rank that raised within DIED_WHILE_WAITED of the wait's start, either side: its
    exception ended the collectives the others were in (CI: rank 1 raised 5 ms after entering
    all_reduce #14, rank 0 had gone on to #15, both records say `failed ... after 0 s`), so the
    ranks' disagreement is its consequence, not a hang of its own."""
    return (finding.signature == "python-exception" and finding.time is not None and stuck.time is not None
            and abs(finding.time - stuck.time) <= DIED_WHILE_WAITED)


WAITING = ("collective-timeout", "hccl-notify-timeout", "nccl-watchdog")  # a rank waiting for a peer
STALL_FOR = re.compile(r"no step finished for (\d+) s")


def silent_rank(views: list[PodView], now: dt.datetime) -> Finding | None:
    """Without the ranks' records (recording off): a training rank that went silent while its
    peers printed that they wait in a collective (or timed out of it): they kept printing
    after its last line, by more than twice the interval at which a waiting rank prints
    (trainer/progress.py), so it is not merely waiting too."""
    waits: dict[str, list[dt.datetime]] = {}
    interval = None
    training = [v for v in views if v.role == TRAINING]
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
                   f"while {peers} waited in a collective", SILENT_FIX, False, last, lines)


SILENT_FIX = ("see what the process does: `py-spy dump --pid PID` in its container, its state in `ps` (T: stopped, "
              "D: stuck in the kernel), or `kill -USR1 PID` (its threads' stacks in its log, when recording); a "
              "stopped process, a deadlock or a dead device stops every rank with it")
OUTSIDE_FIX = ("the code at the frame named never reaches the collective its peers wait in: an endless loop, a wait "
               "on something else (data, a file, a lock), or a condition that differs between ranks; fix the script "
               "there")
ELSEWHERE_FIX = ("the ranks call different collectives (or in a different order): make every rank of the group call "
                 "the same collectives in the same order")
ALL_WAIT_FIX = ("the collective itself does not finish: check the network between the hosts (the NIC each uses) and "
                "the devices; raise timeouts.processGroup only when it is legitimately that slow")


LIBRARY_FRAME = re.compile(r"\(<|/site-packages/|/dist-packages/|/lib/python3\.\d+/")


def script_frame(stack: str) -> str:
    """The innermost frame of the script's own code in a recorder's `f (file:line) < g (...)`
    (not Python's library, not an installed package's), and the innermost one when it differs."""
    frames = stack.split(" < ")
    own = next((frame for frame in frames if not LIBRARY_FRAME.search(frame)), frames[0])
    return own if own == frames[0] else f"{own}, at {frames[0]}"


def record_hang(views: list[PodView], now: dt.datetime) -> tuple[Finding | None, list[str]]:
    """The hang the ranks' records show, and notes (ranks not heard from yet)."""
    found = records.hang(views, now)
    if found is None:
        return None, []
    notes = []
    if found.pending:
        notes.append(f"{found.waiting_text()} in {found.collective}; not heard from yet: rank(s) "
                     f"{records.ranges(found.pending)} (a live rank says where it is within "
                     f"{int(found.waiting[0].report_s)} s)")
    evidence = [found.waiting[0].records[-1].text]
    if not found.culprits:
        if found.pending:
            return None, notes
        first = found.waiting[0]
        return Finding(first.view, "hang", f"every rank of the group waits in {found.collective} "
                       f"({found.waiting_text()})", ALL_WAIT_FIX, False, found.entered, evidence), notes
    outside = [c for c in found.culprits if c.how == "outside"]
    chosen = outside or found.culprits
    culprit = chosen[0]
    who = ", ".join(c.rank.label for c in chosen)
    if culprit.how == "outside":
        cause = (f"{who} hung outside any collective, in {script_frame(culprit.detail)}; {found.waiting_text()} in "
                 f"{found.collective}")
        signature, fix = "hang-outside", OUTSIDE_FIX
    elif culprit.how == "elsewhere":
        cause = f"{who} never entered {found.collective} ({culprit.detail}); {found.waiting_text()}"
        signature, fix = "hang", ELSEWHERE_FIX
    else:
        detail = culprit.detail + (": stopped, or stuck where Python cannot run" if culprit.how == "silent" else "")
        cause = f"{who} never entered {found.collective}; {found.waiting_text()} ({detail})"
        signature, fix = "hang", SILENT_FIX
    finding = Finding(culprit.rank.view, signature, cause, fix, False, found.entered,
                      culprit.evidence + evidence, True, culprit.rank.rank)
    return finding, notes


def diagnose(workflow: dict, views: list[PodView], now: dt.datetime | None = None) -> Diagnosis:
    now = now or dt.datetime.now(dt.timezone.utc)
    phase = (workflow.get("status") or {}).get("phase") or "Pending"
    findings = [f for v in views for f in findings_of(v)]
    roots = [f for f in findings if not f.effect]
    effects = sorted((f for f in findings if f.effect), key=_when)
    stuck, notes = record_hang(views, now)
    if stuck is not None:
        # a culprit that raised, or whose own root came before the others began to wait (it was
        # killed): that says why it never arrived (its exception can be logged a few ms after its
        # peers entered the collective it left); a root after (torchrun killing its stopped
        # worker once a peer timed out) does not
        if any(f.pod is stuck.pod and f.process_rank in (None, stuck.process_rank)
               and (f.signature == "python-exception" or _when(f) <= _when(stuck)
                    or _within(f, stuck, DIED_WHILE_WAITED)) for f in roots) \
                or any(_raised_as_it_began(f, stuck) for f in roots):
            stuck.effect = True
            effects.append(stuck)
        else:
            roots.append(stuck)
    elif not roots:
        stuck = silent_rank(views, now)
        if stuck is not None:
            roots.append(stuck)
    roots.sort(key=_when)
    slow = records.stragglers(views, now)
    if not roots:
        # No known signature: a failed container's exit code is still a cause when it means something.
        for view in sorted((v for v in views if v.exit_code not in (None, 0)),
                           key=lambda v: v.finished or _EPOCH):
            if view.exit_code in (126, 127, 134, 135, 137, 139):
                roots.append(Finding(view, f"exit-{view.exit_code}", exit_meaning(view.exit_code),
                                     "see the log's last lines (torchdag logs NAME --rank R)", False, view.finished,
                                     [line.text for line in view.log[-5:]]))
                break
    if roots:
        first = roots[0]
        _rendezvous_names(first, views)
        _unplaced_rank(first, views)
        _rbac_role(first, (workflow.get("metadata") or {}).get("namespace") or "<namespace>")
        return Diagnosis(1, phase, first, roots[1:] + effects, notes, slow)
    if phase in ("Failed", "Error") or any(v.phase == "Failed" for v in views):
        failed = sorted((v for v in views if v.phase in ("Failed", "Error")), key=lambda v: v.finished or _EPOCH)
        first = effects[0] if effects else None
        if first is not None:
            notes.append(f"no rank shows a root cause: {first.who}'s is a consequence (what a rank prints after "
                         "another failed or stopped); the failure that caused it is not in the logs read (the "
                         "peer's pod gone, or its log cut): read every rank's log, torchdag logs NAME")
        elif failed:
            v = failed[0]
            first = Finding(v, "unknown", f"{v.label} failed (exit code {v.exit_code}"
                            f"{': ' + exit_meaning(v.exit_code) if exit_meaning(v.exit_code) else ''}) and no known "
                            "signature explains it", "read its log: torchdag logs NAME --rank R", False, v.finished,
                            [line.text for line in v.log[-5:]] or ([v.message] if v.message else []))
            notes.append("no known cause found: the first failure below is a guess")
        return Diagnosis(2, phase, first, effects[1:] if effects else [], notes, slow)
    return Diagnosis(0, phase, None, effects, notes, slow)


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
    owner = next((v for v in views if v.rank == rank and v.role == TRAINING), None)
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
    absent = [v for v in views if v.role == TRAINING and v is not first.pod and (not v.log or v.phase == "Pending")]
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
        kind = " (a consequence: no rank shows a root cause)" if f.effect else ""
        if f.signature.startswith("hang"):
            lines.append(f"hang: {f.cause}")
        lines.append(f"first failure: {f.who} (pod {f.pod.name}, attempt {f.pod.attempt}){when}{code}{kind}")
        lines.append(f"cause: {f.cause} [{f.signature}]")
        lines += [f"  | {text}" for text in f.evidence]
        lines.append(f"fix: {f.fix}")
    for other in d.others[:8]:
        tag = "then" if other.effect else "also"
        lines.append(f"{tag}: {other.who}: {other.cause} [{other.signature}]")
    lines += [f"slow: {records.straggler_text(s)}" for s in d.stragglers]
    lines += [f"note: {note}" for note in d.notes]
    return lines
