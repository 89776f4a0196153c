"""Rule workflow-size: what Argo keeps in one object is the spec *and* the status of every
attempt (workflow/packer); both renderers refuse a job whose status would not fit beside
its spec, say what to do, and count the spec alone when node status is offloaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import REPO
from torchdag import pipeline
from torchdag.catalog import catalog
from torchdag.errors import ValuesError
from torchdag.render import check_documents, json_size

sys.path.insert(0, str(REPO / "bench"))
from bench_status import compressed_status

LIMIT = 1048576  # MAX_WORKFLOW_SIZE's default in Argo v4.0.5 workflow/packer, written out here


def big_values(path, n: int, extra: str = ""):
    nodes = "".join(f"  - {{name: atlas-{i:04d}, address: 10.{i // 250}.{i % 250}.1, nic: enp189s0f0, "
                    "accelerator: ascend910, devices: 8}\n" for i in range(n))
    path.write_text(f"name: big\nimage: registry.example.com/train:1.0\nscript: /code/train.py\n{extra}nodes:\n{nodes}")
    return path


def helm_template(helm, path):
    return subprocess.run([helm, "template", "t", str(REPO / "chart"), "-f", str(path)], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.scale
def test_4096_nodes_of_8_fit_with_one_restart_not_two_unless_offloaded(helm, tmp_path):
    """The schema's largest job: at most 100 bytes of spec a machine (the nodes in loop
    tasks), so with one restart it fits beside the status Argo writes when the image holds
    the helpers (the Workflow's own ConfigMap of them, with the scheduling watch's files, is
    about 48 KB: then the guard says so); with two only when the controller offloads node status."""
    path = big_values(tmp_path / "big.yaml", 4096, "failurePolicy: {maxRestarts: 1}\n")
    with pytest.raises(ValuesError, match=r"split the job, carry the helpers in the image \(agents.fromWorkflow: "
                                          r"false\), or, if the controller offloads node status"):
        pipeline.run(path)
    assert "carry the helpers in the image (agents.fromWorkflow: false)" in helm_template(helm, path).stderr
    path = big_values(path, 4096, "failurePolicy: {maxRestarts: 1}\nagents: {fromWorkflow: false}\n")
    (document,) = check_documents(pipeline.run(path).text)
    assert json_size(document) <= 100 * 4096
    assert helm_template(helm, path).returncode == 0
    big_values(path, 4096, "failurePolicy: {maxRestarts: 2}\nworkflow: {nodeStatusOffload: true}\n")
    (document,) = check_documents(pipeline.run(path).text)
    spec = json_size(document)
    big_values(path, 4096, "failurePolicy: {maxRestarts: 2}\n")
    with pytest.raises(ValuesError) as refused:
        pipeline.run(path)
    line = str(refused.value)
    assert f"nodes: 4096 nodes make a Workflow of {spec} bytes (JSON), and Argo's status for 3 attempt(s) adds about" \
        in line
    assert "lower failurePolicy.maxRestarts, split the job, or, if the controller offloads node status to a " \
           "database, set workflow.nodeStatusOffload" in line
    # The chart's Workflow carries Helm's labels too: a few bytes more, counted the same way.
    result = helm_template(helm, path)
    assert result.returncode != 0, result.stdout[-300:]
    assert "nodes: 4096 nodes make a Workflow of " in result.stderr and "and Argo's status for 3 attempt(s) adds "\
        "about" in result.stderr and "set workflow.nodeStatusOffload" in result.stderr


@pytest.mark.scale
def test_every_restart_attempt_is_counted_in_both_renderers(helm, tmp_path):
    """A job that fits with no restart is refused when each restart adds its set of nodes."""
    path = big_values(tmp_path / "v.yaml", 3500)
    pipeline.run(path)
    assert helm_template(helm, path).returncode == 0
    big_values(path, 3500, "failurePolicy: {maxRestarts: 2}\n")
    with pytest.raises(ValuesError, match=r"status for 3 attempt\(s\) adds about \d+ bytes \(failurePolicy"
                                          r"\.maxRestarts 2\)"):
        pipeline.run(path)
    result = helm_template(helm, path)
    assert result.returncode != 0 and "status for 3 attempt(s)" in result.stderr


def test_the_status_budget_covers_the_modelled_status():
    """catalog argoStatus.perPod stays above what bench/bench_status.py's model of Argo's
    compressed node status gives for a finished, restarted job, in either DAG shape (a
    loop task's pod nodes carry their item in their names)."""
    budget = catalog()["argoStatus"]
    assert budget["maxBytes"] == LIMIT
    for n, attempts, loop_items in ((64, 1, 0), (512, 2, 0), (512, 2, catalog()["nodeLoops"]["maxItems"])):
        pods = n + 2  # the training pods, the scheduling watch and a PodGroup or helpers task
        assert compressed_status(n, attempts, loop_items=loop_items) <= attempts * (budget["perAttempt"]
                                                                                    + budget["perPod"] * pods)


def dag(path) -> dict:
    document = next(d for d in yaml.safe_load_all(pipeline.run(path).text) if d)
    return document["spec"]["templates"][0]["dag"]


def test_past_200_dag_tasks_the_nodes_go_in_loop_tasks(tmp_path):
    """Argo v4's full CRDs cap a DAG at 200 tasks (held against the real API server in
    tests/e2e/test_api_server_accepts.py): up to 200 a task per node (the nodes, the schedule watch and
    the helpers' ConfigMap task), past it loop tasks of at most nodeLoops.maxItems machines, each
    item naming its machine."""
    image_agents = "agents: {fromWorkflow: false}\n"  # no ConfigMap task: the nodes' tasks and the watch
    assert [task["name"] for task in dag(big_values(tmp_path / "v.yaml", 199, image_agents))["tasks"]][-2:] == [
        "node-198", "schedule-watch"]
    assert [task["name"] for task in dag(big_values(tmp_path / "v.yaml", 198))["tasks"]][-3:] == [
        "node-197", "schedule-watch", "agents"]
    assert "withItems" in dag(big_values(tmp_path / "v.yaml", 199))["tasks"][0]
    tasks = [task for task in dag(big_values(tmp_path / "v.yaml", 201, image_agents))["tasks"] if "withItems" in task]
    size = catalog()["nodeLoops"]["maxItems"]
    assert [(task["name"], len(task["withItems"])) for task in tasks] == [("nodes-0", size), ("nodes-1", 201 - size)]
    assert tasks[1]["withItems"][-1] == {"host": "atlas-0200", "ip": "10.0.200.1", "rank": "200"}
    # What every machine shares is passed as it is; what names it is always in the item.
    assert {p["name"]: p["value"] for p in tasks[0]["arguments"]["parameters"]} == {
        "host": "{{item.host}}", "node-rank": "{{item.rank}}", "nic": "enp189s0f0", "if-ip": "{{item.ip}}"}


def test_more_templates_than_argos_full_crds_take_is_refused_by_both(helm, tmp_path):
    """201 node shapes make 204 templates and 203 DAG tasks, and 99 under node recovery make
    202 templates (a retry wrapper each, and the host check): the full CRDs refuse both, so
    both renderers do, naming the field (rule templates-too-many)."""
    from torchdag.pipeline import run

    def job(count: int, extra: str = "") -> Path:
        nodes = "".join(f"  - {{name: n{i}, resources: {{limits: {{memory: {i + 1}Gi}}}}}}\n" for i in range(count))
        path = tmp_path / f"v{count}.yaml"
        path.write_text(f"name: shapes\nimage: img:1\nscript: /t.py\n{extra}nodes:\n{nodes}")
        return path

    def refused(path: Path, *counts: tuple[str, int]) -> None:
        with pytest.raises(ValuesError) as error:
            run(path)
        lines = [line.split(": nodes: ", 1)[1] for line in str(error.value).splitlines()]
        for field, count in counts:
            line = next(line for line in lines if f"items in {field};" in line)
            assert f"make {count} items in {field}" in line
            assert f"refuse more than 200 ('{field}: Too many')" in line
            result = subprocess.run([helm, "template", "t", str(REPO / "chart"), "-f", str(path)], capture_output=True,
                                    text=True, timeout=300)
            assert result.returncode != 0 and f"nodes: {line}" in result.stderr, result.stderr[-2000:]

    # the DAG's entry, each shape, the watch, the helpers; the watch's and the helpers' tasks
    refused(job(201), ("spec.templates", 204), ("spec.templates[0].dag.tasks", 203))
    refused(job(99, "failurePolicy: {maxRestarts: 1}\n"), ("spec.templates", 202))
    run(job(98, "failurePolicy: {maxRestarts: 1}\n"))  # 200: taken

