"""`torchdag plan FILE --json`: the typed Plan (torchdag/plan_model.py) of every example and
golden case, checked against the values file as a user wrote it and against the Workflow
render.py prints for it: the two must tell the same job."""

from __future__ import annotations

import json

import pytest
import yaml

from helpers import REPO
from torchdag import cli, pipeline

FILES = sorted(str(path.relative_to(REPO)) for folder in ("examples", "tests/cases")
               for path in (REPO / folder).glob("*.yaml"))


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def plan_json(path: str, capsys) -> dict:
    assert cli.torchdag_main(["plan", path, "--json", "-q"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


def workflow_of(path: str) -> dict:
    return next(doc for doc in yaml.safe_load_all(pipeline.run(path).text)
                if doc and doc.get("kind") in ("Workflow", "WorkflowTemplate"))


def node_tasks(workflow: dict) -> dict[str, dict[str, str]]:
    """Each node task's arguments by name, from the train DAG (flat: one task per node)."""
    train = next(t for t in workflow["spec"]["templates"] if t["name"] == workflow["spec"]["entrypoint"])
    return {task["name"]: {p["name"]: p["value"] for p in task.get("arguments", {}).get("parameters", [])}
            for task in train["dag"]["tasks"] if task["name"].startswith("node-")}


@pytest.mark.parametrize("path", FILES)
def test_plan_json_tells_the_values_job(path, capsys):
    plan = plan_json(path, capsys)
    values = yaml.safe_load((REPO / path).read_text(encoding="utf-8"))
    nodes, job = plan["nodes"], plan["job"]
    written = values["nodes"]
    master = next((node for node in written if node.get("master")), written[0])

    assert job["name"] == values["name"] and job["image"] == values["image"]
    assert job["nnodes"] == len(nodes) == len(written)
    assert [node["rank"] for node in nodes] == list(range(len(written)))
    assert nodes[0]["master"] and not any(node["master"] for node in nodes[1:])
    assert nodes[0]["host"] == job["master_host"] == master["name"]
    assert sorted(node["host"] for node in nodes) == sorted(node["name"] for node in written)
    for node in nodes:
        own = written[node["index"]]
        assert node["host"] == own["name"]
        assert node["devices"] == own.get("devices", 1)
        pod_default = (values.get("network") or {}).get("nic", "eth0") if plan["network"]["mode"] == "pod" else None
        assert node["nic"] == (own.get("nic") or pod_default or None)
        if plan["network"]["mode"] == "host":
            assert node["address"] == own.get("address", own["name"])
        assert node["labels"] == own.get("labels", {})
    assert job["world_size"] == sum(node.get("devices", 1) for node in written)
    by_name = {shape["name"]: shape for shape in plan["shapes"]}
    assert sorted(rank for shape in plan["shapes"] for rank in shape["ranks"]) == list(range(len(nodes)))
    for node in nodes:
        assert node["rank"] in by_name[node["shape"]]["ranks"]
        assert by_name[node["shape"]]["devices"] == node["devices"]

    restarts = (values.get("failurePolicy") or {}).get("maxRestarts") or 0
    if restarts:
        assert plan["retry"]["limit"] == restarts
        assert plan["retry"]["recovery"] == values["failurePolicy"].get("recovery", "node")  # the schema default
        assert isinstance(plan["retry"]["backoff_seconds"], int)
    else:
        assert plan["retry"] is None
    minimum = (values.get("elastic") or {}).get("minNodes") or len(written)
    assert job["min_nodes"] == minimum
    assert [node["elastic"] for node in nodes] == [rank >= minimum for rank in range(len(nodes))]
    gang = (values.get("scheduling") or {}).get("gang", "none")
    assert (plan["gang"] or {}).get("kind", "none") == gang


@pytest.mark.parametrize("path", FILES)
def test_plan_json_tells_the_workflows_job(path, capsys):
    """What the Workflow holds as strings, the Plan holds as typed fields: each node task's
    host, rank, NIC and address; the retryStrategy's limit and backoff in seconds."""
    plan = plan_json(path, capsys)
    workflow = workflow_of(path)
    tasks = node_tasks(workflow)
    for node in plan["nodes"]:
        given = tasks[node["task"]]
        assert given["host"] == node["host"] and given["node-rank"] == str(node["rank"])
        assert given.get("nic", node["nic"] or "") == (node["nic"] or "")
        assert ("if-ip" in given) == node["if_ip"]
        if node["if_ip"]:
            assert given["if-ip"] == node["address"]
    templates = {t["name"]: t for t in workflow["spec"]["templates"]}
    everyones = {key for node in plan["nodes"] for key in node["labels"]}
    for node in plan["nodes"]:  # a node's own labels on its pod's template, and no other node's
        labels = templates[node["shape"]]["metadata"]["labels"]
        assert {key: labels[key] for key in everyones if key in labels} == node["labels"]
    retry = plan["retry"]
    printed = [t["retryStrategy"] for t in workflow["spec"]["templates"] if "retryStrategy" in t]
    if retry is None:
        assert printed == []
        return
    assert printed and all(strategy["limit"] == str(retry["limit"]) for strategy in printed)
    for strategy in printed:
        backoff = strategy["backoff"]
        assert backoff["duration"] == f"{retry['backoff_seconds']}s"
        assert backoff["factor"] == str(retry["factor"])
        assert backoff.get("cap") == (f"{retry['cap_seconds']}s" if retry["cap_seconds"] is not None else None)
    on_dag = [t for t in workflow["spec"]["templates"] if "retryStrategy" in t and "dag" in t]
    assert bool(on_dag) == (retry["recovery"] == "job")  # recovery node: on each node's wrapper instead


def test_plan_without_json_prints_the_table(capsys):
    assert cli.torchdag_main(["plan", "examples/cluster.yaml", "-q"]) == 0
    out = capsys.readouterr().out
    assert "rank  node" in out and "192.168.110.22" in out


def test_plan_of_bad_values_is_one_line_and_status_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "examples/cluster.yaml").read_text().replace("port: 25195", "port: 99999999"))
    assert cli.torchdag_main(["plan", str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "port" in captured.err and "Traceback" not in captured.err
