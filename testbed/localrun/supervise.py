"""Supervise phase: one attempt of the DAG, every task a local process tree.

A Supervisor starts every task at once, streams their output with a `[task]` prefix and
stops whole process trees (testbed.runtime.ProcessTree): a task's leftovers when its main process exits (as
a pod's would die with it) and, with gang stop, every other task once one fails for good.
Under node recovery a failed task is started again alone, as Argo retries one DAG task's
pod, while the others keep running (restart.py's NodeRetries decides when), and an elastic
member out of restarts is left behind (its task's continueOn). restart.py runs Supervisors
again while the Plan's whole-job restarts allow.
"""

from __future__ import annotations

import datetime
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from testbed.runtime import MARKER_ENV, ProcessTree, process_table

from .errors import EXIT_FAILED, EXIT_OK, stopped_code
from .prepare import LocalTask
from .report import loss_value, seconds_after

TAIL_LINES = 400  # of each task's output, kept for the summary's cause (torchdag/diagnose)


@dataclass
class TaskResult:
    name: str
    restart: int = 0  # TORCHDAG_RESTART of this process (under node recovery, the node's own)
    pid: int | None = None
    returncode: int | None = None
    started: float | None = None  # time.monotonic() at its start; None: never started
    ended: float | None = None
    stopped_by_runner: str | None = None  # why the runner stopped it (gang stop, timeout, ...)
    last_loss: str | None = None  # the number, as the node printed it
    lines: int = 0
    tail: deque = field(default_factory=lambda: deque(maxlen=TAIL_LINES))  # (when, line): the summary's cause

    @property
    def duration(self) -> float | None:
        """Seconds it ran (so far), or None for a task that never started (not the time
        since the machine booted, which time.monotonic() alone would give)."""
        if self.started is None:
            return None
        return (self.ended or time.monotonic()) - self.started

    def exit_text(self) -> str:
        if self.returncode is None:
            return "not started" if self.pid is None else "running"
        if self.returncode < 0:
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        return f"exit {self.returncode}"


@dataclass
class Outcome:
    """One attempt: every task's result (a node restarted alone has one per process, in
    order, after each other), and which task failed first (for good)."""

    workflow: str
    results: list[TaskResult]
    first_failure: str | None = None  # task name
    timed_out: bool = False
    interrupted: bool = False
    elapsed: float = 0.0
    restart: int = 0  # this attempt's restart number (TORCHDAG_RESTART)
    left_behind: list[str] = field(default_factory=list)  # elastic members out of restarts: the job went on

    @property
    def code(self) -> int:
        stopped = stopped_code(self.interrupted, self.timed_out)
        if stopped is not None:
            return stopped
        last = {r.name: r for r in self.results}  # each task's last process
        ok = all(r.returncode == 0 or name in self.left_behind for name, r in last.items())
        return EXIT_OK if ok else EXIT_FAILED

    @property
    def node_restarts(self) -> list[TaskResult]:
        """The processes of tasks started again alone (node recovery)."""
        return [r for r in self.results if r.restart > self.restart]

    def result(self, name: str) -> TaskResult:
        """The task's last process."""
        return next(r for r in reversed(self.results) if r.name == name)


class Supervisor:
    """One attempt of the DAG (see the module's docstring). `timeout` is said in the
    message; `deadline` (time.monotonic()) is when to stop, default start + timeout."""

    def __init__(self, workflow: str, tasks: list[LocalTask], *, out: TextIO | None = None,
                 gang_stop: bool = True, timeout: float | None = None, grace: float = 5.0,
                 base_env: dict[str, str] | None = None, bin_dir: str | None = None,
                 on_line: Callable[[str, str], None] | None = None, poll: float = 0.1,
                 deadline: float | None = None, restart: int = 0, node_retries=None):
        """`node_retries`: restart.NodeRetries under node recovery, else None."""
        self.workflow = workflow
        self.tasks = tasks
        self.out = out or sys.stdout
        self.gang_stop = gang_stop
        self.timeout = timeout
        self.deadline = deadline
        self.restart = restart
        self.grace = grace
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.bin_dir = bin_dir or str(Path(sys.executable).parent)
        self.on_line = on_line
        self.poll = poll
        self.node_retries = node_retries
        self.results = {t.name: TaskResult(t.name, restart) for t in tasks}  # each task's current process
        self.current = {t.name: t for t in tasks}
        self._due: dict[str, float] = {}  # node recovery: task -> when it starts again
        self.trees: dict[str, ProcessTree] = {}
        self._popens: dict[str, subprocess.Popen] = {}
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._kill_at: dict[str, float] = {}  # task -> when SIGKILL follows the SIGTERM
        self.run_id = f"{os.getpid()}-{time.time_ns()}"
        self._interrupted = False

    def say(self, text: str) -> None:
        with self._lock:
            self.out.write(f"[localrun] {text}\n")
            self.out.flush()

    def request_stop(self, reason: str, interrupted: bool = False) -> None:
        """Stop every task (thread- and signal-handler-safe: acted on by the run loop)."""
        if self._stop_reason is None:
            self._stop_reason = reason
        self._interrupted = self._interrupted or interrupted

    def signal_task(self, name: str, sig: int) -> list[int]:
        """Send sig to one task's whole tree (tests use it to freeze or kill a node)."""
        return self.trees[name].signal(sig)

    def task_pids(self, name: str) -> list[int]:
        """Every live process of one task: its main process, torchrun's workers, orphans."""
        tree = self.trees[name]
        tree.refresh(scan_environ=True)
        return tree.alive()

    def _pump(self, name: str, stream) -> None:
        result = self.results[name]
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            loss = loss_value(line)
            if loss is not None:
                result.last_loss = loss
            result.lines += 1
            result.tail.append((datetime.datetime.now(datetime.timezone.utc), line))
            with self._lock:
                self.out.write(f"[{name}] {line}\n")
                self.out.flush()
            if self.on_line is not None:
                self.on_line(name, line)
        stream.close()

    def _start(self, task: LocalTask, outcome: Outcome | None = None) -> None:
        argv = task.prefix + task.argv
        result = self.results[task.name]
        if outcome is not None:  # a node started again alone: a row of its own, after its earlier ones
            result = self.results[task.name] = TaskResult(task.name, task.restart)
            outcome.results.insert(outcome.results.index(outcome.result(task.name)) + 1, result)
            self.current[task.name] = task
        result.started = time.monotonic()
        # A session of its own: Ctrl-C reaches the runner only, which then stops the trees.
        env = task.process_env(self.base_env, self.bin_dir)
        marker = f"{self.run_id}/{task.name}"
        env[MARKER_ENV] = marker  # inherited by every process of this node: finds its orphans
        popen = subprocess.Popen(argv, env=env, cwd=task.cwd,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self._popens[task.name] = popen
        self.trees[task.name] = ProcessTree(popen.pid, marker)
        result.pid = popen.pid
        self.say(f"{task.name}: pid {popen.pid}: {shlex.join(argv)}")
        reader = threading.Thread(target=self._pump, args=(task.name, popen.stdout), daemon=True)
        reader.start()
        self._readers.append(reader)

    def _stop(self, name: str, reason: str, now: float) -> None:
        if name in self._kill_at or self._popens[name].poll() is not None:
            return
        self.results[name].stopped_by_runner = reason
        self.trees[name].signal(signal.SIGTERM)
        self._kill_at[name] = now + self.grace

    def run(self) -> Outcome:
        begin = time.monotonic()
        outcome = Outcome(self.workflow, [self.results[t.name] for t in self.tasks], restart=self.restart)
        try:
            for task in self.tasks:
                self._start(task)
        except OSError as err:
            self.say(f"cannot start {task.name}: {err}")
            self.request_stop(f"{task.name} could not start")
            self.results[task.name].returncode = 127
            self.results[task.name].ended = time.monotonic()
            outcome.first_failure = task.name
        deadline = self.deadline if self.deadline is not None else (begin + self.timeout if self.timeout else None)
        try:
            self._loop(outcome, deadline)
        except KeyboardInterrupt:
            self.request_stop("interrupted", interrupted=True)
            self._loop(outcome, None)
        self._cleanup()
        outcome.interrupted = self._interrupted
        outcome.elapsed = time.monotonic() - begin
        return outcome

    def _loop(self, outcome: Outcome, deadline: float | None) -> None:
        while True:
            now = time.monotonic()
            table = process_table()
            for name, popen in self._popens.items():
                result, tree = self.results[name], self.trees[name]
                tree.refresh(table)
                if result.returncode is None and popen.poll() is not None:
                    result.returncode, result.ended = popen.returncode, now
                    # Pod semantics: when the main process ends, the container's others die with it.
                    tree.signal(signal.SIGKILL)
                    if popen.returncode != 0 and result.stopped_by_runner is None:
                        self._failed(name, outcome, now)
            for name, when in list(self._due.items()):
                if self._stop_reason is not None:
                    self.say(f"no restart of {name}: {self._stop_reason}")
                elif now >= when:
                    self._start(self.node_retries.task_again(self.current[name], self.say), outcome)
                else:
                    continue
                del self._due[name]
            if deadline is not None and now >= deadline and self._stop_reason is None:
                outcome.timed_out = True
                self.request_stop(f"timed out after {self.timeout:g} s" if self.timeout else "timed out")
            if self._stop_reason is not None:
                for name in self._popens:
                    if self.results[name].returncode is None and name not in self._kill_at:
                        self.say(f"stopping {name} ({self._stop_reason})")
                    self._stop(name, self._stop_reason, now)
            for name, when in self._kill_at.items():
                if now >= when and self.trees[name].alive(table):
                    self.trees[name].signal(signal.SIGKILL)
            if not self._due and all(self.results[name].returncode is not None for name in self._popens):
                return
            time.sleep(self.poll)

    def _failed(self, name: str, outcome: Outcome, now: float) -> None:
        """A task failed on its own: its node's restart, or the DAG goes on without an elastic
        member (continueOn), or it is the job's failure (gang stop ends the others)."""
        result, task = self.results[name], self.current[name]
        if self.node_retries is not None and self._stop_reason is None:
            wait = self.node_retries.after_failure(task, result, self.say)
            if wait is not None:
                self._due[name] = now + wait
                return
            if task.elastic:
                outcome.left_behind.append(name)
                self.say(f"{name} left behind ({result.exit_text()}): an elastic member, the job goes on without it")
                return
        if outcome.first_failure is None:
            outcome.first_failure = name
            self.say(f"{name} failed first ({result.exit_text()}{seconds_after(result.duration)})")
            if self.gang_stop:
                self.request_stop(f"{name} failed")

    def _cleanup(self) -> None:
        """Nothing we started outlives the run (orphans included: found by their marker)."""
        for tree in self.trees.values():
            tree.signal(signal.SIGKILL)
        for reader in self._readers:
            reader.join(timeout=3)
