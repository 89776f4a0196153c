"""Hangs and slow ranks from the ranks' own records (issue 41), in logs of real runs
(tests/diagnose_logs/user-*, recorded by its record.py: a user's script under the Workflow's
record.py, which records every rank's collectives through PyTorch's flight recorder): a rank
that SIGSTOPped itself while its peers wait in an all-reduce, named while they wait and after
their timeout; a rank spinning in a Python loop, named with its frame; a rank under a CPU
quota, named slow, and the same job unthrottled, named nothing."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from torchdag.diagnose import core, records
from torchdag.diagnose.commands import status_rows
from torchdag.diagnose.views import parse_time

LOGS = Path(__file__).resolve().parents[1] / "diagnose_logs"
HOSTS = ("host-a", "host-b", "host-c")
ENTERED = re.compile(r"entered (\S+);")


def lines_of(fixture: str, node: int) -> list[core.LogLine]:
    return core.parse_log((LOGS / f"{fixture}-node{node}.log").read_text())


def text(lines: list[core.LogLine]) -> str:
    return "".join(f"{line.time.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z {line.text}\n" for line in lines if line.time)


def pod(node: int, finished: dt.datetime | None) -> dict:
    state = {"running": {"startedAt": "2026-12-06T07:50:00Z"}} if finished is None else {
        "terminated": {"exitCode": 1, "reason": "Error", "finishedAt": finished.strftime("%Y-%m-%dT%H:%M:%SZ")}}
    return {"metadata": {"name": f"job-node-{node}", "labels": {core.RANK_LABEL: str(node)},
                         "creationTimestamp": "2026-12-06T07:50:00Z"},
            "spec": {"nodeName": HOSTS[node]},
            "status": {"phase": "Running" if finished is None else "Failed",
                       "containerStatuses": [{"name": "main", "state": state}]}}


def job(fixture: str, nodes: int, until: dt.datetime | None = None, ended: bool = False):
    """(workflow, views, now): the logs as read at `until` (the pods Running), or whole (each
    pod ended a second after its last line)."""
    logs = [lines_of(fixture, n) for n in range(nodes)]
    if until is not None:
        logs = [[line for line in lines if line.time and line.time <= until] for lines in logs]
    last = max(line.time for lines in logs for line in lines if line.time)
    pods = [pod(n, (max(line.time for line in logs[n] if line.time) + dt.timedelta(seconds=1)) if ended else None)
            for n in range(nodes)]
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed" if ended else "Running"}}
    views = core.build_views(workflow, pods, [], {f"job-node-{n}": text(lines) for n, lines in enumerate(logs)})
    return workflow, views, until or last + dt.timedelta(seconds=2)


def stop_entered() -> dt.datetime:
    found = next(ENTERED.search(line.text) for line in lines_of("user-stop", 0) if ENTERED.search(line.text))
    return parse_time(found.group(1))


def test_a_stopped_rank_is_named_with_the_collective_it_never_entered_while_the_others_wait():
    entered = stop_entered()
    workflow, views, now = job("user-stop", 2, until=entered + dt.timedelta(seconds=35))
    result = core.diagnose(workflow, views, now=now)
    first = result.first
    assert (result.status, first.signature, first.process_rank, first.pod.host) == (1, "hang", 3, "host-b"), \
        core.report_lines("job", result)
    assert first.cause.startswith("rank 3 (host-b) never entered all_reduce #36 of the default group; ranks 0-2 "
                                  "waiting 35 s"), first.cause
    report = core.report_lines("job", result)
    assert report[1].startswith("hang: rank 3 (host-b) never entered all_reduce #36 of the default group; ranks 0-2 "
                                "waiting"), report


def test_a_rank_heard_from_after_the_others_began_to_wait_is_not_blamed_for_its_late_record():
    """Real nodes, 2026-12-07: rank 2's waiting record was in, ranks 0 and 1's not yet (their
    containers starved of CPU), though their window summaries came after rank 2 entered the
    all-reduce. They were alive then: only the rank silent since before the wait is named, and
    the note says who is awaited (before, ranks 0 and 1 were named beside rank 3)."""
    entered = stop_entered()
    until = entered + dt.timedelta(seconds=35)
    late = re.compile(r"\[torchdag\] rank [01] waiting in ")
    logs = [[line for line in lines_of("user-stop", n) if line.time and line.time <= until
             and not (n == 0 and late.search(line.text))] for n in range(2)]
    assert any("window" in line.text and line.time > entered for line in logs[0])  # heard from after the wait began
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Running"}}
    views = core.build_views(workflow, [pod(n, None) for n in range(2)], [],
                             {f"job-node-{n}": text(lines) for n, lines in enumerate(logs)})
    result = core.diagnose(workflow, views, now=until)
    first = result.first
    assert (first.signature, first.process_rank, first.pod.host) == ("hang", 3, "host-b"), \
        core.report_lines("job", result)
    assert first.cause.startswith("rank 3 (host-b) never entered all_reduce #36 of the default group; "
                                  "rank 2 waiting"), first.cause
    assert any("not heard from yet: rank(s) 0-1" in note for note in result.notes), result.notes


def test_before_every_rank_could_speak_nothing_is_blamed_yet():
    """At 21 s some waiting ranks have said so, not all: the stopped rank is not named yet (a
    live rank has the report delay to say where it is), and a note says who is awaited."""
    entered = stop_entered()
    workflow, views, now = job("user-stop", 2, until=entered + dt.timedelta(seconds=21))
    result = core.diagnose(workflow, views, now=now)
    assert result.status == 0 and result.first is None, core.report_lines("job", result)
    assert any("not heard from yet: rank(s) 3" in note or "not heard from yet" in note for note in result.notes), \
        result.notes


def test_after_the_timeout_the_stopped_rank_is_still_the_cause_not_the_timeouts():
    workflow, views, now = job("user-stop", 2, ended=True)
    result = core.diagnose(workflow, views, now=now + dt.timedelta(minutes=5))
    first = result.first
    assert (result.status, first.signature, first.process_rank, first.pod.host) == (1, "hang", 3, "host-b"), \
        core.report_lines("job", result)
    assert "all_reduce #36 of the default group" in first.cause
    timeouts = [f for f in result.others if f.signature == "collective-timeout"]
    assert timeouts and all(f.effect for f in timeouts)


def test_torchrun_killing_the_stopped_worker_after_the_timeout_does_not_hide_the_hang():
    """Seen on the local cluster: once its peer timed out, the stopped rank's torchrun SIGKILLs
    it, and its summary says `exitcode : -9` (worker-killed, a root of its own): it came after
    the others began to wait, so the hang stays first."""
    workflow, views, now = job("user-stop", 2, ended=True)
    last = max(line.time for line in views[1].log if line.time)
    summary = ["Failures:", "[1]:", f"  time      : {last:%Y-%m-%d_%H:%M:%S}", "  host      : host-b",
               "  rank      : 3 (local_rank: 1)", "  exitcode  : -9 (pid: 4242)  (SIGKILL)", "  error_file: <N/A>",
               "  traceback : Signal 9 (SIGKILL) received by PID 4242", "=" * 60]
    views[1].log += [core.LogLine(last + dt.timedelta(seconds=1), line) for line in summary]
    result = core.diagnose(workflow, views, now=now + dt.timedelta(minutes=5))
    assert (result.first.signature, result.first.process_rank) == ("hang", 3), core.report_lines("job", result)
    assert any(f.signature == "worker-killed" and f.process_rank == 3 for f in result.others), result.others


def test_a_worker_killed_as_its_peers_began_to_wait_is_the_cause_not_a_hang():
    """Seen in CI: rank 1's worker SIGKILLed inside all_reduce #15, torchrun's summary 96 ms
    after its peer entered it: the kill is why the rank never arrived, not a hang."""
    entered = stop_entered()
    workflow, views, now = job("user-stop", 2, until=entered + dt.timedelta(seconds=35))
    killed = entered + dt.timedelta(milliseconds=100)
    summary = ["Failures:", "[1]:", f"  time      : {killed:%Y-%m-%d_%H:%M:%S}", "  host      : host-b",
               "  rank      : 3 (local_rank: 1)", "  exitcode  : -9 (pid: 4242)  (SIGKILL)", "  error_file: <N/A>",
               "  traceback : Signal 9 (SIGKILL) received by PID 4242", "=" * 60]
    views[1].log += [core.LogLine(killed, line) for line in summary]
    result = core.diagnose(workflow, views, now=now)
    assert (result.first.signature, result.first.process_rank) == ("worker-killed", 3), \
        core.report_lines("job", result)
    assert any(f.signature == "hang" and f.effect for f in result.others), result.others


def test_a_rank_in_an_endless_python_loop_is_hung_outside_any_collective_with_its_frame():
    workflow, views, now = job("user-loop", 2)
    result = core.diagnose(workflow, views, now=now)
    first = result.first
    assert (result.status, first.signature, first.process_rank, first.pod.host) == (
        1, "hang-outside", 2, "host-b"), core.report_lines("job", result)
    assert re.match(r"rank 2 \(host-b\) hung outside any collective, in wait_for_shard \(\S+faulty_user\.py:\d+\); "
                    r"ranks 0-1, 3 waiting \d+ s in all_reduce #36 of the default group$", first.cause), first.cause


def test_a_rank_under_a_cpu_quota_is_slow_in_status_and_diagnose():
    workflow, views, now = job("user-slow", 3)
    slow = records.stragglers(views, now)
    assert [(s.rank.rank, s.rank.view.host, s.current) for s in slow] == [(1, "host-b", True)]
    assert slow[0].ratio >= records.SLOW_RATIO and slow[0].windows >= records.SLOW_WINDOWS
    rows = status_rows(workflow, views, now)
    columns = {row.split()[0]: row for row in rows[2:]}
    assert re.search(r"rank 1 \d+\.\dx$", columns["1"]) and columns["0"].endswith(" -"), rows
    lines = core.report_lines("job", core.diagnose(workflow, views, now=now))
    assert any(line.startswith("slow: rank 1 (host-b) is slow: busy ") for line in lines), lines


def test_the_same_job_unthrottled_has_no_straggler_nor_a_job_slow_everywhere():
    workflow, views, now = job("user-even", 3)
    assert records.stragglers(views, now) == []
    # every rank three times as busy from the third window on: slow everywhere is no straggler
    for view in views:
        for line in view.log:
            found = records.WINDOW.search(line.text.split("] rank ", 1)[-1].split(" ", 1)[-1])
            if found and found.group(1) >= "2026-12-06T08:06:50Z":
                line.text = line.text.replace(f"busy {found.group(5)} ms", f"busy {float(found.group(5)) * 3:.1f} ms")
    assert records.stragglers(views, now) == []


def test_a_straggler_that_recovered_is_history_not_slow_now():
    workflow, views, now = job("user-slow", 3)
    later = now + dt.timedelta(minutes=2)
    slow = records.stragglers(views, later)
    assert [(s.rank.rank, s.current) for s in slow] == [(1, False)]
    assert all(row.endswith(" -") for row in status_rows(workflow, views, later)[2:])
    assert "rank 1 (host-b) was slow" in records.straggler_text(slow[0])


def test_one_window_of_load_on_every_rank_does_not_clear_a_straggler():
    """Seen on the local cluster: a burst of load made every rank as busy as the throttled one
    for one window; the straggler stays named (as many windows in a row clear it as set it)."""
    workflow, views, now = job("user-slow", 3)
    ends = sorted({m.group(1) for v in views for line in v.log if (m := records.WINDOW.search(
        line.text.split("] rank ", 1)[-1].split(" ", 1)[-1]))})
    spike = ends[-2]  # the last window but one: every rank as busy as the slow one
    for view in views:
        for line in view.log:
            found = records.WINDOW.search(line.text.split("] rank ", 1)[-1].split(" ", 1)[-1])
            if found and found.group(1) == spike:
                line.text = line.text.replace(f"busy {found.group(5)} ms", "busy 400.0 ms")
    slow = records.stragglers(views, now)
    assert [(s.rank.rank, s.current) for s in slow] == [(1, True)], slow


def test_a_rank_that_raised_is_not_hung_though_its_exception_is_logged_after_its_peers_began_to_wait():
    """Seen on the local cluster (tests/diagnose_logs/user-raise-hang-*, rank 1 raises at step 30):
    its peers entered all_reduce #36 a few ms before rank 1's exception reached its log, and its
    recorder said on the way out which collective it left: rank 1's exception is the root, the
    hang it leaves behind a consequence."""
    workflow, views, now = job("user-raise-hang", 2, ended=True)
    result = core.diagnose(workflow, views, now=now + dt.timedelta(minutes=1))
    first = result.first
    assert (result.status, first.signature, first.process_rank, first.pod.host) == (
        1, "python-exception", 1, "host-a"), core.report_lines("job", result)
    assert first.evidence[-1] == "ValueError: bad batch at step 30 on rank 1: (32, 64)", first.evidence
    assert all(f.effect for f in result.others if f.signature == "hang"), result.others


def test_a_rank_that_raised_as_the_collectives_failed_is_the_cause_not_their_disagreement():
    """Seen in CI (tests/e2e/test_diagnose_e2e.py, the raise fault): rank 1 raised 5 ms after
    entering all_reduce #14 while rank 0 had gone on to #15; both records say `failed ... after
    0 s`. The exception is the cause; the ranks' disagreement is what it left behind."""
    start = dt.datetime(2026, 12, 6, 16, 7, 22, 817000, tzinfo=dt.timezone.utc)

    def at(ms: float) -> str:
        return (start + dt.timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def record(rank: int, seq: int, entered: float, logged: float) -> str:
        return (f"{at(logged)} [torchdag] rank {rank} failed in all_reduce #{seq} of the default group after 0 s "
                f"(entered {at(entered)[:23]}Z; sizes [[1]]; completed #{seq - 1})\n")

    head = "[torchdag] rank {} of 2: recording collectives (flight recorder, gloo); report after 20 s, window 20 s\n"
    logs = {
        "job-node-0": f"{at(-5000)} {head.format(0)}" + record(0, 15, 3, 30)
        + f"{at(38)} RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:36266\n",
        "job-node-1": f"{at(-5000)} {head.format(1)}"
        + f"{at(4)} Traceback (most recent call last):\n"
        + f'{at(4)}   File "/w/faults.py", line 29, in faulty_batch\n'
        + f'{at(4)}     raise RuntimeError(f"injected failure at step {{STEP}}")\n'
        + f"{at(5)} RuntimeError: injected failure at step 5\n" + record(1, 14, 0, 20),
    }
    ended = start + dt.timedelta(seconds=1)
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed"}}
    views = core.build_views(workflow, [pod(0, ended), pod(1, ended)], [], logs)
    result = core.diagnose(workflow, views, now=ended + dt.timedelta(seconds=5))
    first = result.first
    assert (first.signature, first.pod.rank, first.pod.host) == ("python-exception", 1, "host-b"), \
        core.report_lines("job", result)
    assert not [f for f in [first, *result.others] if f.signature == "hang" and not f.effect], result.others
