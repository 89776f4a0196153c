"""What the ranks' recorders said in their logs (torchdag/agents/torchdag_flight.py): which
collective each rank waits in, which rank is stuck outside every collective and where, and
which rank's steps are slow. Pure functions over the pods' views, as core.py's.

A hang: the collective most waiting ranks report (a process group and its sequence number);
every other member of that group is the cause: one stuck outside any collective (its main
thread's frames), one waiting in another collective (the ranks disagree), one that exited,
or one silent since before its peers began to wait (stopped, or stuck where Python cannot
run: a live rank in a collective or outside one says so within the report delay).

A straggler: per window (the wall clock's multiples, the same on every rank) each rank's
mean busy time a step; a rank whose busy time is at least SLOW_RATIO of the median rank's
(the lower median), SLOW_WINDOWS windows in a row, until as many windows in a row are not
(one window of load on every rank does not clear it). A job slow everywhere has no straggler.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from dataclasses import dataclass, field

from .views import TRAINING, PodView, parse_time

SLOW_RATIO = 1.3
SLOW_WINDOWS = 3
SILENCE_MARGIN_S = 10.0  # past the report delay: two ticks of the recorder, and the log's own delay

RECORD = re.compile(r"\[torchdag\] rank (\d+) (.*)$")
START = re.compile(r"^of (\d+): recording collectives \(([^)]*)\); report after ([\d.]+) s, window ([\d.]+) s")
WAIT = re.compile(r"^(waiting|failed) in (\S+) #(\d+) of (the default group|group \S+(?: \(ranks [^)]*\))?) "
                  r"(?:for|after) (\d+) s \(entered (\S+); sizes (\S*); completed #(-?\d+)\)")
OUTSIDE = re.compile(r"^outside any collective for (\d+) s \(last (.*?)\); main thread at (.*)$")
WINDOW = re.compile(r"^window (\S+) ([\d.]+) s: (\d+) steps, step ([\d.]+) ms, busy ([\d.]+|-) ms")
PATTERNS = (("start", START), ("wait", WAIT), ("outside", OUTSIDE), ("window", WINDOW))
GROUP_RANKS = re.compile(r"\(ranks ([^)]*)\)")


@dataclass
class Record:
    kind: str  # start, waiting, failed, outside, window
    rank: int
    time: dt.datetime | None  # the log line's
    text: str
    match: re.Match


@dataclass
class Rank:
    """One process rank as its recorder told it."""

    rank: int
    view: PodView
    records: list[Record] = field(default_factory=list)
    world: int | None = None
    report_s: float = 20.0
    window_s: float = 20.0

    @property
    def label(self) -> str:
        return f"rank {self.rank} ({self.view.host or self.view.node_name or 'unscheduled'})"

    @property
    def last(self) -> Record | None:
        return next((r for r in reversed(self.records) if r.kind != "start"), None)

    @property
    def last_time(self) -> dt.datetime | None:
        return next((r.time for r in reversed(self.records) if r.time), None)


def _current_views(views: list[PodView]) -> list[PodView]:
    """Each training rank's latest pod (an earlier attempt's records are history)."""
    latest: dict[int, PodView] = {}
    for view in views:
        if view.role != TRAINING or view.rank is None:
            continue
        known = latest.get(view.rank)
        if known is None or (view.created or dt.datetime.min.replace(tzinfo=dt.timezone.utc)) >= \
                (known.created or dt.datetime.min.replace(tzinfo=dt.timezone.utc)):
            latest[view.rank] = view
    return [latest[r] for r in sorted(latest)]


def ranks_of(views: list[PodView]) -> dict[int, Rank]:
    ranks: dict[int, Rank] = {}
    for view in _current_views(views):
        for line in view.log:
            found = RECORD.search(line.text)
            if not found:
                continue
            number, rest = int(found.group(1)), found.group(2)
            kind, hit = next(((k, p.match(rest)) for k, p in PATTERNS if p.match(rest)), ("", None))
            if hit is None:
                continue
            rank = ranks.get(number)
            if rank is None or (kind == "start" and rank.view is not view):
                rank = ranks[number] = Rank(number, view)  # a restarted worker starts its records anew
            if kind == "start":
                rank.world, rank.report_s, rank.window_s = int(hit.group(1)), float(hit.group(3)), float(hit.group(4))
            elif kind == "wait":
                kind = hit.group(1)
            rank.records.append(Record(kind, number, line.time, rest, hit))
    return ranks


def ranges(numbers: list[int]) -> str:
    numbers, out, i = sorted(set(numbers)), [], 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        out.append(f"{numbers[i]}-{numbers[j]}" if j > i else str(numbers[i]))
        i = j + 1
    return ", ".join(out)


def _members(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit():
            out += range(int(lo), int(hi) + 1) if hi.isdigit() else [int(lo)]
    return out


# -- hangs ------------------------------------------------------------------------------

@dataclass
class Culprit:
    rank: Rank
    how: str  # silent, outside, elsewhere, exited
    detail: str
    evidence: list[str]


@dataclass
class Hang:
    op: str
    seq: int
    group: str
    entered: dt.datetime
    waited_s: int
    waiting: list[Rank]
    culprits: list[Culprit]
    pending: list[int]  # members not heard from yet: too early to tell

    @property
    def collective(self) -> str:
        return f"{self.op} #{self.seq} of {self.group}"

    def waiting_text(self) -> str:
        who = "rank" if len(self.waiting) == 1 else "ranks"
        return f"{who} {ranges([r.rank for r in self.waiting])} waiting {self.waited_s} s"


def _nobody() -> PodView:
    return PodView(name="", rank=None, phase="")


def hang(views: list[PodView], now: dt.datetime) -> Hang | None:
    ranks = ranks_of(views)
    waits = {r: rank.last for r, rank in ranks.items() if rank.last and rank.last.kind in ("waiting", "failed")}
    if not waits:
        return None
    by_key: dict[tuple, list[int]] = {}
    for r, record in waits.items():
        by_key.setdefault((record.match.group(4), int(record.match.group(3))), []).append(r)
    (group, seq), waiting = max(by_key.items(), key=lambda item: (len(item[1]), -item[0][1]))
    records = [waits[r] for r in waiting]
    entered = min(parse_time(rec.match.group(6)) or now for rec in records)
    ops = sorted({rec.match.group(2) for rec in records})
    running = any(ranks[r].view.phase == "Running" and rec.kind == "waiting" for r, rec in zip(waiting, records))
    waited = int((now - entered).total_seconds()) if running else max(int(rec.match.group(5)) for rec in records)
    if group == "the default group":
        world = max((rank.world or 0 for rank in ranks.values()), default=0) or (max(ranks) + 1)
        members = list(range(world))
    else:
        found = GROUP_RANKS.search(group)
        members = _members(found.group(1)) if found else sorted(ranks)
    report = max((ranks[r].report_s for r in waiting), default=20.0)
    told_by = entered + dt.timedelta(seconds=report + SILENCE_MARGIN_S)  # every live member has spoken by then
    culprits, pending = [], []
    for member in members:
        if member in waiting:
            continue
        rank = ranks.get(member)
        last = rank.last if rank else None
        since = last.time if last else None
        if last is not None and last.kind in ("waiting", "failed") and since and since >= entered:
            culprits.append(Culprit(rank, "elsewhere", f"waits in {last.match.group(2)} #{last.match.group(3)} of "
                                    f"{last.match.group(4)} instead", [last.text]))
        elif last is not None and last.kind == "outside" and since and since >= entered:
            culprits.append(Culprit(rank, "outside", last.match.group(3), [last.text]))
        elif last is not None and last.kind == "window" and since and since > told_by:
            culprits.append(Culprit(rank, "elsewhere", "still steps without entering it (its last window "
                                    f"{last.match.group(1)})", [last.text]))
        elif rank is not None and rank.view.phase in ("Failed", "Succeeded") and \
                not (rank.view.finished and rank.view.finished >= entered):
            culprits.append(Culprit(rank, "exited", f"its pod {rank.view.phase}", [last.text] if last else []))
        elif now >= told_by and (since is None or since < entered
                                 or now >= since + dt.timedelta(seconds=report + SILENCE_MARGIN_S)):
            # heard from after the wait began, it was alive then: the report delay runs from its own
            # last record (a CPU-starved rank's waiting record comes late; it is not the cause)
            quiet = f"silent since {since:%H:%M:%S}" if since else "no record from it"
            culprits.append(Culprit(rank or Rank(member, _nobody()), "silent", quiet, [last.text] if last else []))
        else:
            pending.append(member)
    return Hang("/".join(ops), seq, group, entered, waited, [ranks[r] for r in sorted(waiting)], culprits, pending)


# -- stragglers -------------------------------------------------------------------------

@dataclass
class Straggler:
    rank: Rank
    ratio: float  # its busy time over the median rank's, over the streak
    busy_ms: float
    median_ms: float
    windows: int  # slow windows since it was named
    first: str  # their first and last window ends
    last: str
    current: bool  # still named at the rank's latest window, and that window is recent


def stragglers(views: list[PodView], now: dt.datetime, ratio: float = SLOW_RATIO,
               windows: int = SLOW_WINDOWS) -> list[Straggler]:
    ranks = ranks_of(views)
    busy: dict[str, dict[int, float]] = {}
    width = {}
    for rank in ranks.values():
        for record in rank.records:
            if record.kind == "window" and record.match.group(5) != "-":
                busy.setdefault(record.match.group(1), {})[rank.rank] = float(record.match.group(5))
                width[rank.rank] = float(record.match.group(2))
    ends = sorted(busy, key=lambda end: parse_time(end) or now)
    medians = {end: statistics.median_low(busy[end].values()) for end in ends if len(busy[end]) >= 2}
    out = []
    for rank in ranks.values():
        step = dt.timedelta(seconds=width.get(rank.rank, rank.window_s))
        episodes: list[list[str]] = []  # the windows of each time it was slow, from its third slow one in a row
        run: list[str] = []
        flagged, fast, previous = False, 0, None
        # the windows the rank measured, in a row (a window without a step says nothing: a step
        # longer than a window leaves gaps, and three one-step windows still make three)
        for end in (e for e in ends if rank.rank in busy[e] and medians.get(e)):
            when = parse_time(end)
            if busy[end][rank.rank] >= ratio * medians[end]:
                run.append(end)
                fast = 0
                if flagged:
                    episodes[-1].append(end)
                elif len(run) >= windows:
                    flagged = True
                    episodes.append(list(run))
            else:
                run = []
                fast += 1
                if flagged and fast >= windows:  # as many windows in a row to clear it as to set it
                    flagged = False
            previous = when
        if not episodes:
            continue
        last = episodes[-1]
        mine = [busy[end][rank.rank] for end in last]
        median = [medians[end] for end in last]
        current = flagged and previous is not None and now - previous <= step * 2 + dt.timedelta(seconds=5)
        out.append(Straggler(rank, sum(mine) / sum(median), statistics.median(mine), statistics.median(median),
                             len(last), last[0], last[-1], current))
    return sorted(out, key=lambda s: s.rank.rank)


def straggler_text(s: Straggler) -> str:
    when = "is" if s.current else "was"
    return (f"{s.rank.label} {when} slow: busy {s.ratio:.1f}x the median rank's ({s.busy_ms:.1f} ms vs "
            f"{s.median_ms:.1f} ms a step) in {s.windows} windows, {s.first[11:19]}-{s.last[11:19]}")
