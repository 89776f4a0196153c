"""Whole-job restarts without a Workflow deadline: Argo doubles the wait before each restart
(backoff.duration x factor^(n-1), operator.go processNodeRetries), so with
timeouts.workflowDeadline: null and many restarts the wait would grow to months. Both
renderers then give the retryStrategy Argo's backoff.cap (the catalogue's
restartBackoffCapSeconds, or backoffSeconds when that is longer); with a deadline, rule
restarts-past-deadline bounds the waits instead and no cap is written."""

from __future__ import annotations

import pytest

from chart_helpers import assert_same_workflow, render_py_workflow
from helpers import EXAMPLES_DIR, write
from torchdag.catalog import catalog

CPU = (EXAMPLES_DIR / "cpu.yaml").read_text(encoding="utf-8")
CAP = catalog()["restartBackoffCapSeconds"]

# (failurePolicy, timeouts, the backoff rendered)
BACKOFFS = [
    ("{maxRestarts: 20, recovery: job}", "{workflowDeadline: null}",
     {"duration": "30s", "factor": "2", "cap": f"{CAP}s"}),
    ("{maxRestarts: 1, backoffSeconds: 5, recovery: job}", "{workflowDeadline: null}",
     {"duration": "5s", "factor": "2", "cap": f"{CAP}s"}),
    ("{maxRestarts: 3, backoffSeconds: 7200, recovery: job}",
     "{workflowDeadline: null}",
     {"duration": "7200s", "factor": "2", "cap": "7200s"}),  # the cap never shortens the first wait
    # the deadline's rule bounds the waits
    ("{maxRestarts: 3, recovery: job}", "{}", {"duration": "30s", "factor": "2"}),
]


@pytest.mark.parametrize("policy,timeouts,backoff", BACKOFFS, ids=[f"{p} {t}" for p, t, _ in BACKOFFS])
def test_restarts_without_a_deadline_get_a_capped_backoff_in_both(policy, timeouts, backoff, helm, tmp_path):
    values = write(tmp_path, CPU + f"failurePolicy: {policy}\ntimeouts: {timeouts}\n")
    train = render_py_workflow(values)["spec"]["templates"][0]
    assert train["retryStrategy"]["backoff"] == backoff
    assert_same_workflow(helm, values)


def argo_seconds(duration: str) -> int:
    """A retryStrategy duration as Argo reads it (Go's time.ParseDuration; torchdag writes whole seconds)."""
    assert duration.endswith("s") and duration[:-1].isdigit(), duration
    return int(duration[:-1])


def test_the_cap_bounds_every_wait_as_argo_computes_it(tmp_path):
    """What Argo would wait before each of 20 restarts, from the rendered retryStrategy (Argo's
    formula): nothing over the cap, in all under a day; the typed Plan's policy, which the
    local runner applies, waits the same."""
    from testbed.localrun import RetryPolicy
    from torchdag import pipeline

    values = write(tmp_path, CPU + "failurePolicy: {maxRestarts: 20, recovery: job}\n"
                                   "timeouts: {workflowDeadline: null}\n")
    backoff = render_py_workflow(values)["spec"]["templates"][0]["retryStrategy"]["backoff"]
    duration, factor, cap = argo_seconds(backoff["duration"]), int(backoff["factor"]), argo_seconds(backoff["cap"])
    waits = [min(duration * factor ** (restart - 1), cap) for restart in range(1, 21)]
    assert waits[:3] == [30, 60, 120] and max(waits) == CAP
    assert sum(waits) < 86400  # uncapped: 30 s x (2^20 - 1), about a year
    typed = pipeline.run(values).plan.typed.retry
    assert [typed.delay_seconds(restart) for restart in range(1, 21)] == waits
    assert [RetryPolicy.from_plan(typed).delay(restart) for restart in range(1, 21)] == waits


def test_no_restarts_no_retry_strategy(tmp_path):
    train = render_py_workflow(write(tmp_path, CPU + "timeouts: {workflowDeadline: null}\n"))["spec"]["templates"][0]
    assert "retryStrategy" not in train
