"""testbed.localrun on a job past 200 nodes: the Workflow puts the nodes in loop tasks
(withItems), the Plan still has every machine, so the runner has one task per machine."""

from __future__ import annotations

from localrun_helpers import plan_of, values_with
from testbed.localrun import Job
from testbed.runtime import Options


def test_every_machine_of_a_job_past_200_nodes_is_a_task_of_its_own(tmp_path):
    nodes = [{"name": f"node-{i}", "address": f"198.18.{i // 250}.{i % 250 + 1}", "nic": "eno1", "devices": 1}
             for i in range(201)]
    plan = plan_of(values_with(tmp_path, nodes=nodes))
    assert plan.loops, "past 200 DAG tasks the Workflow has loop tasks"
    job = Job(plan, Options(nic=None), "local-smoke-abcde", [])
    tasks = [job.node_task(node, 0) for node in job.nodes_to_run()]
    assert len(tasks) == 201
    last = tasks[-1]
    assert (last.name, last.host, last.rank) == ("node-200", "node-200", 200)
    assert "--node_rank=200" in last.argv and "--nnodes=201" in last.argv
    assert dict(last.env)["GLOO_SOCKET_IFNAME"] == "eno1"
