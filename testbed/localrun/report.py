"""Report phase: the summary printed at the end of a run, and the loss it shows.

One attempt (no retryStrategy, or the first attempt succeeded):

    summary of local-smoke-k3x9q (6.9 s):
      node-0  ok       exit 0                 6.9 s  last loss: 0.062957
      node-1  ok       exit 0                 6.9 s  last loss: -
    result: every task exited 0

Several attempts: one block per attempt, headed by what ended it, then the result. A node
restarted alone (recovery node) has a row per process, named as Argo names a retried
task's pods, `node-1(0)`, `node-1(1)`:

    summary of local-smoke-k3x9q (41.0 s, 1 node restart):
      node-0     ok       exit 0                41.0 s  last loss: 0.062957
      node-1(0)  FAILED   killed by SIGKILL      9.1 s  last loss: -
      node-1(1)  ok       exit 0                30.2 s  last loss: -
    result: every task exited 0 (after 1 node restart: node-1)
"""

from __future__ import annotations

import datetime
import re
import time

from .errors import EXIT_OK

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)\b"
# "loss 0.123", "loss: 0.1", "train_loss=1e-3", "loss 1.05 -> 0.06" (the latter number);
# not "loss.backward()", "losses 3" or "gloss 2".
_LOSS = re.compile(rf"(?<![A-Za-z])loss(?![A-Za-z])\s*[:=]?\s*(?P<n>{_NUMBER})(?:\s*->\s*(?P<to>{_NUMBER}))?",
                   re.IGNORECASE)


def loss_value(line: str) -> str | None:
    """The loss a log line reports, as printed (the first `loss N` of the line; of
    `loss A -> B`, B), or None."""
    match = _LOSS.search(line)
    if match is None:
        return None
    return match.group("to") or match.group("n")


def seconds_column(duration: float | None) -> str:
    """A task's run time as the summary's column shows it: `-` for a task that never started."""
    return f"{duration:6.1f} s" if duration is not None else f"{'-':>6}  "


def seconds_after(duration: float | None) -> str:
    """` after 2.0 s`, or nothing for a task that never started."""
    return f" after {duration:.1f} s" if duration is not None else ""


def _status(r) -> str:
    if r.returncode == 0:
        return "ok"
    if r.returncode is None and r.pid is None:
        return "skipped"  # never started: the runner stopped before its turn
    return "stopped" if r.stopped_by_runner else "FAILED"


def _rows(outcome, indent: str = "  ") -> list[str]:
    again = {r.name for r in outcome.node_restarts}
    names = [f"{r.name}({r.restart})" if r.name in again else r.name for r in outcome.results]
    width = max([len(name) for name in names] + [4])
    return [f"{indent}{name:<{width}}  {_status(r):<7}  {r.exit_text():<18}  {seconds_column(r.duration)}  "
            f"last loss: {r.last_loss or '-'}" for name, r in zip(names, outcome.results)]


def diagnosis(outcome):
    """torchdag diagnose's judgement of this attempt's output (the first cause in time, not
    the first exit: the survivors of a dead rank exit within the same second), or None."""
    from torchdag.diagnose import core  # the one module that decides, for the cluster and here

    views, now = [], (datetime.datetime.now(datetime.timezone.utc), time.monotonic())
    for r in outcome.results:
        rank = r.name.rsplit("-", 1)[-1]
        code = None if r.returncode is None else (128 - r.returncode if r.returncode < 0 else r.returncode)
        exit_code = None if r.stopped_by_runner else code  # the runner's stop is no cause (a SIGKILL after --grace)
        ended = now[0] - datetime.timedelta(seconds=now[1] - r.ended) if r.ended is not None else None
        views.append(core.PodView(name=r.name, rank=int(rank) if rank.isdigit() else None, host=r.name,
                                  phase="Running" if code is None else "Succeeded" if code == 0 else "Failed",
                                  exit_code=exit_code, finished=ended, attempt=str(r.restart),
                                  log=[core.LogLine(when, text) for when, text in r.tail]))
    found = core.diagnose({"status": {"phase": "Failed"}}, views)
    return found if found.status == 1 else None


def _failure(outcome, found=None) -> str | None:
    """`node-1 failed first (killed by SIGKILL after 2.0 s); stopped by the runner: node-0`"""
    if not outcome.first_failure:
        return None
    name = found.first.pod.name if found is not None else outcome.first_failure
    stopped = [r.name for r in outcome.results if r.stopped_by_runner and r.name != name]
    tail = f"; stopped by the runner: {', '.join(stopped)}" if stopped else ""
    first = outcome.result(name)
    return f"{name} failed first ({first.exit_text()}{seconds_after(first.duration)}){tail}"


def _ending(outcome) -> list[str]:
    lines = []
    if outcome.timed_out:
        lines.append("timed out: every task was stopped")
    if outcome.interrupted:
        lines.append("interrupted: every task was stopped")
    return lines


def _node_restarts(outcome) -> str:
    """`1 node restart: node-1` (recovery node), or nothing."""
    again = outcome.node_restarts
    names = ", ".join(dict.fromkeys(r.name for r in again))
    return f"{len(again)} node restart{'s' if len(again) != 1 else ''}: {names}" if again else ""


def _single(outcome) -> list[str]:
    count = f", {_node_restarts(outcome).split(':')[0]}" if outcome.node_restarts else ""
    lines = [f"summary of {outcome.workflow} ({outcome.elapsed:.1f} s{count}):"] + _rows(outcome)
    found = diagnosis(outcome) if outcome.first_failure else None
    failure = _failure(outcome, found)
    if failure:
        lines.append(failure)
    if found is not None:
        lines += [f"cause: {found.first.cause} [{found.first.signature}]", f"fix: {found.first.fix}"]
    lines += _ending(outcome)
    if outcome.left_behind:
        lines.append(f"left behind: {', '.join(outcome.left_behind)} (elastic members: the job went on without them)")
    again = _node_restarts(outcome)
    if outcome.code == EXIT_OK:
        but = f"but {', '.join(outcome.left_behind)} " if outcome.left_behind else ""
        lines.append(f"result: every task {but}exited 0"
                     + (f" (after {again})" if again else ""))
    elif again and outcome.first_failure:
        lines.append(f"result: FAILED (exit {outcome.code}): {outcome.first_failure} failed for good, after {again}")
    else:
        lines.append(f"result: FAILED (exit {outcome.code})")
    return lines


def _attempt_header(number: int, outcome) -> str:
    if outcome.first_failure:
        what = _failure(outcome, diagnosis(outcome))
    elif outcome.timed_out:
        what = "timed out"
    elif outcome.interrupted:
        what = "interrupted"
    elif outcome.code == EXIT_OK:
        what = "every task exited 0"
    else:
        what = f"exit {outcome.code}"
    return f"attempt {number} (restart {outcome.restart}, {outcome.elapsed:.1f} s): {what}"


def _job(job) -> list[str]:
    attempts = job.attempts
    count = f"{len(attempts)} attempt{'s' if len(attempts) != 1 else ''}"
    lines = [f"summary of {job.workflow} ({job.elapsed:.1f} s, {count}):"]
    for number, outcome in enumerate(attempts, 1):
        lines.append(_attempt_header(number, outcome))
        lines += _rows(outcome)
    last = job.last
    lines += _ending(last)
    if job.timed_out:
        lines.append("timed out while waiting to restart")
    if job.interrupted:
        lines.append("interrupted while waiting to restart")
    restarts = len(attempts) - 1
    said = f"{restarts} restart{'s' if restarts != 1 else ''}"
    if job.code == EXIT_OK:
        lines.append(f"result: every task exited 0 on attempt {len(attempts)} (after {said})")
    elif last.first_failure and not (last.timed_out or last.interrupted or job.timed_out or job.interrupted):
        why = f"; {job.no_restart}" if job.no_restart else ""
        lines.append(f"result: FAILED (exit {job.code}): {last.first_failure} failed on attempt {len(attempts)} "
                     f"(after {said}){why}")
    else:
        lines.append(f"result: FAILED (exit {job.code}) on attempt {len(attempts)} (after {said})")
    return lines


def outcome_lines(outcome) -> list[str]:
    """The summary of an Outcome (one attempt) or a JobOutcome (every attempt)."""
    attempts = getattr(outcome, "attempts", None)
    if attempts is None:
        return _single(outcome)
    if len(attempts) > 1 or outcome.timed_out or outcome.interrupted:
        return _job(outcome)
    lines = _single(attempts[0])
    lines[0] = lines[0].replace(f"({attempts[0].elapsed:.1f} s", f"({outcome.elapsed:.1f} s", 1)
    if outcome.no_restart and outcome.code != EXIT_OK:
        lines[-1] += f"; no restart: {outcome.no_restart}"
    return lines
