"""Gangs at 4,096 machines × 8 with a restart (the schema's largest job, in loop tasks): Kueue
makes one Workload podSet per role hash, which torchdag sets to each node template's name
(else Kueue hashes each pod's spec, host pin included: one podSet per machine, and a Workload
holds at most 8; more than 8 node templates: tests/bad_cases.py); Volcano's
and coscheduling's PodGroups count every machine and, for Volcano, every device. The image
carries torchdag's helpers here (agents.fromWorkflow false): a gang's helpers in the Workflow
(about 60 KB, docs/byo.md) leave no room for a restart's status at this size."""

from __future__ import annotations

import pytest
import yaml
from test_render_size import big_values

from crd_helpers import podgroup_from_workflow, validate_crd_object
from torchdag import pipeline

pytestmark = pytest.mark.scale  # make test runs it; make test-fast leaves it out
MACHINES = 4096
GANGS = {"kueue": "{gang: kueue, queue: research}", "volcano": "{gang: volcano, queue: research}",
         "coscheduling": "{gang: coscheduling}"}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    out = {}
    for kind, scheduling in GANGS.items():
        path = big_values(tmp_path_factory.mktemp(kind) / "v.yaml", MACHINES,
                          f"scheduling: {scheduling}\nfailurePolicy: {{maxRestarts: 1}}\n"
                          "agents: {fromWorkflow: false}\n")
        out[kind] = next(d for d in yaml.safe_load_all(pipeline.run(path).text) if d)
    return out


def test_a_kueue_gang_of_4096_machines_is_one_podset(rendered):
    templates = {t["name"]: t for t in rendered["kueue"]["spec"]["templates"]}
    training = [t for t in templates.values()
                if "container" in t and "torchdag.io/role" not in (t.get("metadata") or {}).get("labels", {})]
    assert [t["name"] for t in training] == ["ascend910-x8"]
    for template in training:
        annotations = template["metadata"]["annotations"]
        assert annotations["kueue.x-k8s.io/role-hash"] == template["name"]
        assert annotations["kueue.x-k8s.io/pod-group-total-count"] == str(MACHINES)
    assert "kueue.x-k8s.io/role-hash" not in templates["gang-watch"].get("metadata", {}).get("annotations", {})


@pytest.mark.parametrize("kind", ["volcano", "coscheduling"])
def test_the_podgroup_counts_every_machine_and_device(rendered, kind):
    group = podgroup_from_workflow(rendered[kind])
    assert validate_crd_object(group) == []  # the projects' own CRD schemas (tests/crds)
    spec = group["spec"]
    assert spec["minMember"] == MACHINES
    if kind == "volcano":
        assert spec["minResources"] == {"huawei.com/Ascend910": str(MACHINES * 8)}
