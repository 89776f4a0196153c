"""Past 200 DAG tasks the nodes go in withItems loop tasks (plan.node_loops): both renderers
print the same spec, and Argo's validator (v4 and v3) takes it: 201 and 1,024 machines × 8
with a restart, and jobs whose machines differ in template, NIC and address, with a gang or
on the pod network."""

from __future__ import annotations

import pytest
from test_argolint import argolint, assert_valid  # noqa: F401 (a fixture)
from test_render_size import big_values

from chart_helpers import assert_same_workflow, helm_template
from torchdag import pipeline

# Every 7th machine alike: seven templates (devices, resources, NIC mode, address), the NIC
# name differing within one of them, so some items carry it and some tasks pass it as is.
PATTERNS = ["nic: eth0, devices: 1", "nic: eth1, devices: 1", "nic: eth0, devices: 2",
            "nic: eth0, devices: 1, resources: {{limits: {{memory: 64Gi}}}}", "devices: 1",
            "address: 192.168.{hi}.{lo}, nic: eth0, devices: 1", "nic: auto, devices: 1"]
MIXED = {
    "gang-volcano": "scheduling: {gang: volcano, queue: research}\nfailurePolicy: {maxRestarts: 2}\n",
    "gang-kueue": "scheduling: {gang: kueue, queue: research}\n",
    "pod-network": "network: {mode: pod}\n",
    "elastic": "failurePolicy: {maxRestarts: 1}\nelastic: {minNodes: 150}\n",  # loop tasks split at minNodes
}


def mixed_values(path, n: int, extra: str):
    nodes = []
    for i in range(n):
        pattern = PATTERNS[i % len(PATTERNS)].format(hi=i // 250, lo=i % 250 + 1)
        if "network" in extra:
            pattern = pattern.replace("nic: auto, ", "")
        nodes.append(f"  - {{name: h{i}, accelerator: ascend310p, {pattern}}}\n")
    path.write_text(f"name: mixed\nimage: img:1\nscript: /t.py\n{extra}nodes:\n{''.join(nodes)}")
    return path


def sizes(tmp_path):
    yield big_values(tmp_path / "201.yaml", 201, "failurePolicy: {maxRestarts: 1}\n")
    for name, extra in MIXED.items():
        yield mixed_values(tmp_path / f"{name}.yaml", 260, extra)


def test_helm_prints_the_same_spec_as_render_py(helm, tmp_path):
    for values in sizes(tmp_path):
        assert_same_workflow(helm, values)


@pytest.mark.go
def test_argo_takes_loop_tasks_from_both_renderers(argolint, helm, tmp_path):  # noqa: F811
    files = []
    offloaded = "failurePolicy: {maxRestarts: 1}\nworkflow: {nodeStatusOffload: true}\n"  # node recovery's status
    for values in [big_values(tmp_path / "1024.yaml", 1024, offloaded), *sizes(tmp_path)]:
        ours, theirs = values.with_suffix(".render.yaml"), values.with_suffix(".helm.yaml")
        ours.write_text(pipeline.run(values).text, encoding="utf-8")
        chart = helm_template(helm, values)
        assert chart.returncode == 0, chart.stderr
        theirs.write_text(chart.stdout, encoding="utf-8")
        files += [ours, theirs]
    assert_valid(argolint, *files)
