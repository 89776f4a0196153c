"""testbed.localrun on a job past 200 nodes: the loop tasks (withItems) expanded as Argo
expands them, one local task per machine."""

from __future__ import annotations

from localrun_helpers import rendered_workflow, values_with
from testbed.localrun import Options, prepare
from torchdag.pipeline import build


def test_loop_tasks_past_200_nodes_are_expanded_as_argo_names_them(tmp_path):
    """Past 200 DAG tasks the nodes come in withItems loop tasks: localrun runs one task per
    item, named as Argo names it, with that machine's parameters."""
    nodes = [{"name": f"node-{i}", "address": f"198.18.{i // 250}.{i % 250 + 1}", "nic": "eno1", "devices": 1}
             for i in range(201)]
    doc = rendered_workflow(build(values_with(tmp_path, nodes=nodes)))
    assert "withItems" in doc["spec"]["templates"][0]["dag"]["tasks"][0]
    _, tasks = prepare(doc, Options(nic=None))
    assert len(tasks) == 201
    last = tasks[-1]
    assert last.name == "nodes-1(72:host:node-200,rank:200)"
    assert last.params == {"host": "node-200", "node-rank": "200", "nic": "eno1"}
    assert "--node_rank=200" in last.argv and "--nnodes=201" in last.argv
