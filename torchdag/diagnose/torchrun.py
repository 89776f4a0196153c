"""What torchrun and Python print about a failed worker, read from a pod's log: the traceback
before a line (its last lines name the frame and the exception), and torchrun's own failure
summary (`Root Cause (first observed failure):`), whose entries name the rank and its error
file's time."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from .views import LogLine

TRACEBACK_LINES = 8  # shown of a traceback: its last lines name the frame and the exception

PREFIX = re.compile(r"^\[rank(\d+)\]:\s?")  # torch's prefix on a failed rank's traceback lines


def traceback_before(log: list[LogLine], index: int, stop: int = 0) -> list[str]:
    start = index
    while start > stop and index - start < 200 and "Traceback (most recent call last)" not in log[start].text:
        start -= 1
    lines = [line.text for line in log[start:index + 1]] if "Traceback" in log[start].text else [log[index].text]
    lines = [PREFIX.sub("", text) for text in lines if text.strip().strip("^~")]  # not carets under a frame
    return lines[-TRACEBACK_LINES:] if len(lines) > TRACEBACK_LINES else lines


# torchrun's failure summary: `Root Cause (first observed failure):` / `Failures:`, then per
# failed worker `[i]:` and its fields, the last `traceback :` with the lines under it.
SUMMARY_ENTRY = re.compile(r"^\s*\[(\d+)\]:\s*$")
SUMMARY_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
SUMMARY_END = re.compile(r"^\s*(?:={8,}|-{8,})\s*$")


@dataclass
class SummaryEntry:
    """One failed worker in torchrun's summary: its rank, and its error file's time."""

    start: int  # index of its `traceback :` line in the log
    rank: int | None
    time: dt.datetime | None


def summary_entries(log: list[LogLine]) -> dict[int, SummaryEntry]:
    """Log line index -> the summary entry whose traceback holds that line."""
    out: dict[int, SummaryEntry] = {}
    index = 0
    while index < len(log):
        if not SUMMARY_ENTRY.match(log[index].text):
            index += 1
            continue
        fields: dict[str, tuple[int, str]] = {}
        index += 1
        while index < len(log):
            found = SUMMARY_FIELD.match(log[index].text)
            if not found or found.group(1) in fields:
                break
            fields[found.group(1)] = (index, found.group(2))
            index += 1
            if found.group(1) == "traceback":
                break
        if "traceback" not in fields:
            continue
        rank = re.match(r"\s*(\d+)", fields.get("rank", (0, ""))[1])
        stamp = fields.get("time")
        entry = SummaryEntry(fields["traceback"][0], int(rank.group(1)) if rank else None,
                             _summary_time(stamp[1], log[stamp[0]].time) if stamp else None)
        out[entry.start] = entry
        while index < len(log) and not SUMMARY_ENTRY.match(log[index].text) and \
                not SUMMARY_END.match(log[index].text):
            out[index] = entry
            index += 1
    return out


def _summary_time(text: str, printed: dt.datetime | None) -> dt.datetime | None:
    """torchrun prints the error file's timestamp in the node's local time, to the second: read
    as UTC, then moved by the whole quarter hours between it and the time the line was logged
    (the summary follows the failure within seconds)."""
    try:
        local = dt.datetime.strptime(text.strip(), "%Y-%m-%d_%H:%M:%S").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None
    if printed is None:
        return local
    quarter = dt.timedelta(minutes=15)
    return local + round((printed - local) / quarter) * quarter
