"""The local runner's summary (`make smoke`): what it says about tasks that ran, and about
tasks that never started (skipped, no run time at all: never the machine's uptime)."""

from __future__ import annotations

import io
import sys
import time

from testbed.localrun import LocalTask, Outcome, Supervisor, TaskResult, outcome_lines


def test_a_task_that_never_started_has_no_run_time():
    assert TaskResult("node-1").duration is None
    assert TaskResult("node-0", pid=1, returncode=0, started=10.0, ended=12.5).duration == 2.5


def test_the_summary_shows_a_dash_for_a_task_that_never_started():
    outcome = Outcome("wf-x", [TaskResult("node-0", pid=1, returncode=127, started=5.0, ended=5.25),
                               TaskResult("node-1")], first_failure="node-0", elapsed=0.25)
    lines = outcome_lines(outcome)
    never = lines[2]
    assert never.split()[:4] == ["node-1", "skipped", "not", "started"], lines
    assert " - " in never and " s " not in never, never
    assert lines[1].split()[4:6] == ["0.2", "s"], lines
    # the columns stay aligned: the loss column starts at the same place on both rows
    assert lines[1].index("last loss:") == never.index("last loss:"), lines


def test_a_start_that_fails_leaves_the_later_tasks_without_a_run_time(tmp_path):
    """node-0 cannot be executed; the runner stops there, and node-1, never started, shows no
    duration (it used to show time.monotonic(), i.e. how long the machine had been up)."""
    def task(name: str, argv: list[str]) -> LocalTask:
        return LocalTask(name=name, host=name, rank=int(name[-1]), devices=1, argv=argv, env=[], cwd=str(tmp_path),
                         device="cpu")

    out = io.StringIO()
    supervisor = Supervisor("wf-x", [task("node-0", [str(tmp_path / "no-such-program")]),
                                     task("node-1", [sys.executable, "-c", "pass"])],
                            out=out, timeout=30, grace=1.0, bin_dir=str(tmp_path))
    begin = time.monotonic()
    outcome = supervisor.run()
    lines = outcome_lines(outcome)
    node_1 = next(line for line in lines if line.strip().startswith("node-1"))
    assert node_1.split()[:4] == ["node-1", "skipped", "not", "started"], lines
    assert f"{time.monotonic() - begin:.1f} s" not in node_1, lines
    assert outcome.results[1].duration is None
    assert outcome.results[0].duration is not None and outcome.results[0].duration < 30, lines


def test_a_task_the_runner_killed_after_its_grace_is_not_the_first_failure():
    """node-1 exits 1; node-0, stopped by the gang stop, outlives --grace and is SIGKILLed: its
    exit 137 ("killed, usually by the OOM killer") must not be named as the cause."""
    outcome = Outcome("wf-x", [TaskResult("node-0", pid=1, returncode=-9, started=0, ended=9.0,
                                          stopped_by_runner="node-1 failed"),
                               TaskResult("node-1", pid=2, returncode=1, started=0, ended=5.0)],
                      first_failure="node-1", elapsed=9.0)
    lines = outcome_lines(outcome)
    assert "node-1 failed first (exit 1 after 5.0 s); stopped by the runner: node-0" in lines, lines
    assert not any(line.startswith("cause: SIGKILL") for line in lines), lines
