"""Supervise phase, restarts: failurePolicy as the Plan has it.

Recovery job (the Plan's `retry`: Argo's retryStrategy on the train DAG, which makes every
node's pod anew): when an attempt fails (a node exits non-zero or is killed; gang stop has
stopped the others) and a restart is left, the runner says

    [localrun] restart 1/2 in 10 s: node-1 failed (exit 1)

waits the backoff (times --backoff-scale), and starts every node again with
TORCHDAG_RESTART = the restart number.

Recovery node (the Plan's `node_retry`: each node task's own retryStrategy, on its retry
wrapper): a failed node alone waits its backoff and starts again with TORCHDAG_RESTART = its
own restart number, while the others keep running (their torchrun agents restart their
workers into the next rendezvous round, which the restarted node joins):

    [localrun] restart 1/2 of node-1 in 1 s: node-1 failed (killed by SIGKILL); the others keep running
    [localrun] restart 1/2 of node-1: starting node-1 again (TORCHDAG_RESTART=1)

A timeout (--timeout, timeouts.workflowDeadline: the whole run, every attempt and wait
included) or an interrupt ends the run without a restart.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from .errors import stopped_code
from .prepare import Job, LocalTask, RetryPolicy
from .supervise import Outcome, Supervisor, TaskResult


@dataclass
class JobOutcome:
    """Every attempt of one run, first to last."""

    workflow: str
    attempts: list[Outcome]
    retry: RetryPolicy | None = None
    elapsed: float = 0.0
    no_restart: str | None = None  # why the last failure was not restarted (with restarts only)
    timed_out: bool = False  # during a backoff wait
    interrupted: bool = False  # during a backoff wait

    @property
    def last(self) -> Outcome:
        return self.attempts[-1]

    @property
    def results(self) -> list[TaskResult]:
        return self.last.results

    @property
    def first_failure(self) -> str | None:
        return self.last.first_failure

    @property
    def code(self) -> int:
        stopped = stopped_code(self.interrupted, self.timed_out)  # during a backoff wait
        return self.last.code if stopped is None else stopped


class NodeRetries:
    """failurePolicy recovery node: each node's own restarts, for the Supervisor that runs
    the DAG. `no_restart` says why the last failure for good was not restarted."""

    def __init__(self, job: Job, backoff_scale: float):
        self.job, self.backoff_scale = job, backoff_scale
        self.no_restart: str | None = None

    def after_failure(self, task: LocalTask, result: TaskResult, say: Callable[[str], None]) -> float | None:
        """Seconds until the failed node starts again, or None: it has no restart left."""
        retry, restart = self.job.retry, task.restart + 1
        self.no_restart = retry.refusal(restart)
        if self.no_restart is not None:
            return None
        wait = retry.delay(restart) * self.backoff_scale
        say(f"restart {retry.of_limit(restart)} of {task.name} in {round(wait, 2):g} s: {task.name} failed "
                 f"({result.exit_text()}); the others keep running")
        return wait

    def task_again(self, task: LocalTask, say: Callable[[str], None]) -> LocalTask:
        restart = task.restart + 1
        say(f"restart {self.job.retry.of_limit(restart)} of {task.name}: starting {task.name} again "
                 f"(TORCHDAG_RESTART={restart})")
        return self.job.task_again(task.name, restart)


class JobRunner:
    """Attempts of a prepared Job, one Supervisor each (see the module's docstring).
    `current` is the attempt's Supervisor (tests signal its tasks); `on_attempt(n,
    supervisor)` is called before restart n starts."""

    def __init__(self, job: Job, *, backoff_scale: float = 1.0,
                 on_attempt: Callable[[int, Supervisor], None] | None = None, **attempt):
        """`attempt`: Supervisor's keyword arguments (out, gang_stop, timeout, grace,
        base_env, bin_dir, on_line, poll), the same for every attempt."""
        self.job = job
        self.backoff_scale = backoff_scale
        self.on_attempt = on_attempt
        attempt["out"] = attempt.get("out") or sys.stdout
        attempt["base_env"] = dict(os.environ if attempt.get("base_env") is None else attempt["base_env"])
        self.attempt = attempt
        self.out = attempt["out"]
        self.timeout = attempt.get("timeout")
        self.current: Supervisor | None = None
        self._stop: tuple[str, bool] | None = None
        self._wake = threading.Event()

    def say(self, text: str) -> None:
        self.out.write(f"[localrun] {text}\n")
        self.out.flush()

    def request_stop(self, reason: str, interrupted: bool = False) -> None:
        """Stop the running attempt and start no other (signal-handler safe)."""
        if self._stop is None:
            self._stop = (reason, interrupted)
        current = self.current
        if current is not None:
            current.request_stop(reason, interrupted)
        self._wake.set()

    def run(self) -> JobOutcome:
        begin = time.monotonic()
        deadline = begin + self.timeout if self.timeout else None
        result = JobOutcome(self.job.workflow, [], self.job.retry)
        restart = 0
        node_retries = NodeRetries(self.job, self.backoff_scale) if self.job.node_recovery else None
        while True:
            tasks = self.job.tasks_for(restart)
            supervisor = Supervisor(self.job.workflow, tasks, deadline=deadline, restart=restart,
                                    node_retries=node_retries, **self.attempt)
            self.current = supervisor
            if self.on_attempt is not None:
                self.on_attempt(restart, supervisor)
            if self._stop is not None:  # a stop that came while preparing
                supervisor.request_stop(*self._stop)
            outcome = supervisor.run()
            result.attempts.append(outcome)
            if outcome.code == 0 or outcome.timed_out or outcome.interrupted or self._stop is not None:
                break
            retry = self.job.retry
            if node_retries is not None:  # the DAG's one attempt: its nodes restarted alone
                result.no_restart = node_retries.no_restart if outcome.first_failure else None
                break
            if retry is None:
                break
            restart += 1
            wait = retry.delay(restart) * self.backoff_scale
            result.no_restart = retry.refusal(restart)
            if result.no_restart is not None:
                break
            failed = outcome.first_failure
            cause = f"{failed} failed ({outcome.result(failed).exit_text()})" if failed else "a task failed"
            self.say(f"restart {retry.of_limit(restart)} in {round(wait, 2):g} s: {cause}")
            if not self._wait(wait, deadline, result):
                break
            self.say(f"restart {retry.of_limit(restart)}: starting {len(tasks)} task(s) again "
                     f"(TORCHDAG_RESTART={restart})")
        self.current = None
        result.elapsed = time.monotonic() - begin
        return result

    def _wait(self, seconds: float, deadline: float | None, result: JobOutcome) -> bool:
        """The backoff; False when a stop or the deadline came first (result says which)."""
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            if self._stop is not None:
                reason, interrupted = self._stop
                self.say(f"no restart: {reason}")
                result.interrupted = interrupted
                return False
            if deadline is not None and now >= deadline:
                self.say(f"no restart: timed out after {self.timeout:g} s")
                result.timed_out = True
                return False
            if now >= end:
                return True
            self._wake.wait(min(end, deadline if deadline is not None else end) - now)
            self._wake.clear()
