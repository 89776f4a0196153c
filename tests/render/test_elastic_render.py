"""Node recovery and elastic membership in the rendered Workflow (both renderers): the c10d
rendezvous arguments, each node task calling its shape's retry wrapper, elastic members with
`dependencies` and `continueOn` (Argo v4's full CRDs refuse continueOn beside depends), loop
tasks split where the elastic members begin, and the rules on elastic.minNodes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from argo_helpers import task_pods
from chart_helpers import assert_same_workflow, helm_template, render_py_workflow
from cli_helpers import render_py
from helpers import EXAMPLES_DIR, write

CPU = (EXAMPLES_DIR / "cpu.yaml").read_text(encoding="utf-8")


def big_values(path, n: int, extra: str = ""):
    nodes = "".join(f"  - {{name: m-{i:04d}, address: 10.{i // 250}.{i % 250}.1, nic: eth0}}\n" for i in range(n))
    path.write_text(f"name: big\nimage: registry.example.com/train:1.0\nscript: /code/train.py\n{extra}nodes:\n{nodes}")
    return path


def _train_dag(document: dict) -> list[dict]:
    return next(t for t in document["spec"]["templates"] if t["name"] == "train")["dag"]["tasks"]


def test_node_recovery_is_the_default_with_restarts(helm, tmp_path):
    values = write(tmp_path, CPU + "failurePolicy: {maxRestarts: 2, backoffSeconds: 1}\n")
    document = render_py_workflow(values)
    templates = {t["name"]: t for t in document["spec"]["templates"]}
    assert "retryStrategy" not in templates["train"]
    nodes = [task for task in _train_dag(document) if task["name"].startswith("node-")]
    assert all(task["template"].endswith("-retry") for task in nodes)
    wrapper = templates[nodes[0]["template"]]
    assert wrapper["retryStrategy"]["limit"] == "2"
    train = wrapper["steps"][-1][0]
    assert {"name": "restart", "value": "{{retries}}"} in train["arguments"]["parameters"]
    args = templates[train["template"]]["container"]["args"]
    assert "--rdzv-backend=c10d" in args and "--max-restarts=2" in args
    assert not any(arg.startswith(("--node_rank", "--master_addr")) for arg in args)
    # rank 0 hosts the store: the wrapper computes is_host from the node's rank
    assert not any(p["name"] == "rdzv-host" for task in nodes for p in task["arguments"]["parameters"])
    pods = task_pods(document)
    assert [any(arg.endswith("is_host=true") for arg in pods[f"node-{rank}"]["spec"]["containers"][0]["args"])
            for rank in range(len(nodes))] == [True] + [False] * (len(nodes) - 1)
    assert_same_workflow(helm, values)


def test_recovery_job_keeps_the_whole_dag_retry(helm, tmp_path):
    values = write(tmp_path, CPU + "failurePolicy: {maxRestarts: 2, recovery: job}\n")
    document = render_py_workflow(values)
    assert document["spec"]["templates"][0]["retryStrategy"]["limit"] == "2"
    assert not any(t["name"].endswith("-retry") for t in document["spec"]["templates"])
    assert_same_workflow(helm, values)


def test_loop_tasks_split_where_the_elastic_members_begin(helm, tmp_path):
    values = big_values(tmp_path / "201.yaml", 201, "failurePolicy: {maxRestarts: 1}\nelastic: {minNodes: 150}\n")
    tasks = [task for task in _train_dag(render_py_workflow(values)) if "withItems" in task]
    ranks = [[int(item["rank"]) for item in task["withItems"]] for task in tasks]
    assert [r for group in ranks for r in group] == list(range(201))
    for task, group in zip(tasks, ranks):
        assert all(rank >= 150 for rank in group) or all(rank < 150 for rank in group)
        assert ("continueOn" in task) == (group[0] >= 150)
        assert "depends" not in task
    assert_same_workflow(helm, values)


@pytest.mark.parametrize("extra,message", [
    ("failurePolicy: {maxRestarts: 0}\nelastic: {minNodes: 1}\n", "elastic.minNodes: needs failurePolicy.maxRestarts"),
    ("failurePolicy: {maxRestarts: 1, recovery: job}\nelastic: {minNodes: 1}\n", "needs failurePolicy.maxRestarts > 0"),
    ("failurePolicy: {maxRestarts: 1}\nelastic: {minNodes: 9}\n", "elastic.minNodes: is 9, but the job has 3 nodes"),
])
def test_elastic_min_nodes_rules(extra, message, helm, tmp_path):
    values = write(tmp_path, CPU + extra)
    result = render_py(str(values))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    chart = helm_template(helm, values)
    assert chart.returncode != 0 and message in chart.stderr, chart.stderr


def test_the_local_runner_runs_node_recovery_the_default(tmp_path):
    """`make smoke` takes an ordinary values file with restarts (recovery node by default) and
    says what it will do (tests/testbed/test_localrun_restart.py runs it)."""
    values = write(tmp_path, CPU + "failurePolicy: {maxRestarts: 1}\n")
    done = subprocess.run([sys.executable, "-m", "testbed.localrun", "--dry-run", str(values)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "\n[localrun] failurePolicy (recovery node): restarts up to 1 per node, backoff 30 s x2 " in done.stdout
