"""scheduling.schedulerName and scheduling.queue: every key either reaches the Workflow or is
refused. schedulerName is the training pods' scheduler with or without a gang (a gang only
picks its default); a queue only means something to a gang scheduler with queues (Volcano's
queue, Kueue's LocalQueue), so beside gang none or coscheduling it is refused, naming it."""

from __future__ import annotations

import pytest

from chart_helpers import assert_same_workflow, helm_template, render_py_workflow
from helpers import EXAMPLES_DIR, write
from torchdag.cli import main

CPU = (EXAMPLES_DIR / "cpu.yaml").read_text(encoding="utf-8")


def training_schedulers(document: dict) -> set:
    """The schedulerName of every container template that runs torchrun (not the scheduling watch)."""
    return {template.get("schedulerName") for template in document["spec"]["templates"]
            if "container" in template and template["name"] not in ("gang-watch", "schedule-watch")}


# (scheduling values, the training pods' schedulerName)
SCHEDULERS = [
    ("{}", {None}),
    ("{schedulerName: my-scheduler}", {"my-scheduler"}),
    ("{gang: volcano}", {"volcano"}),
    ("{gang: volcano, schedulerName: volcano-2}", {"volcano-2"}),
    ("{gang: coscheduling}", {"scheduler-plugins-scheduler"}),
    ("{gang: kueue, queue: research}", {None}),
    ("{gang: kueue, queue: research, schedulerName: my-scheduler}", {"my-scheduler"}),
]


@pytest.mark.parametrize("scheduling,names", SCHEDULERS, ids=[s for s, _ in SCHEDULERS])
def test_the_scheduler_name_reaches_the_training_pods(scheduling, names, helm, tmp_path):
    values = write(tmp_path, CPU + f"scheduling: {scheduling}\n")
    assert training_schedulers(render_py_workflow(values)) == names
    assert_same_workflow(helm, values)


# (scheduling values) a queue nothing would read
IGNORED_QUEUES = ["{queue: research}", "{gang: none, queue: research}", "{gang: coscheduling, queue: research}"]


@pytest.mark.parametrize("scheduling", IGNORED_QUEUES)
def test_a_queue_without_a_gang_with_queues_is_refused_by_both(scheduling, helm, tmp_path, capsys):
    values = write(tmp_path, CPU + f"scheduling: {scheduling}\n")
    assert main([str(values), "--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{values}: scheduling.queue: 'research' would be ignored: only a gang scheduler with queues "
                   "reads it (scheduling.gang volcano: its queue; kueue: its LocalQueue), and gang none or "
                   "coscheduling has none; set scheduling.gang, or remove queue"]
    result = helm_template(helm, values)
    assert result.returncode != 0 and "at '/scheduling/queue'" in result.stderr, result.stderr


@pytest.mark.parametrize("scheduling", ["{gang: volcano, queue: research}", "{gang: kueue, queue: research}",
                                        "{queue: ''}", "{gang: coscheduling, queue: ''}"])
def test_a_queue_a_gang_reads_or_an_empty_one_is_accepted_alike(scheduling, helm, tmp_path):
    assert_same_workflow(helm, write(tmp_path, CPU + f"scheduling: {scheduling}\n"))
