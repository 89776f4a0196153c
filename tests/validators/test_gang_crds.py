"""The PodGroups of gang scheduling (scheduling.gang) against the schedulers' real CRDs.

The schemas in tests/crds/ are copied from the projects' CRD files (see each "x-source");
tests/crd_helpers.py makes them strict. The first tests show the checker accepts what the
CRDs allow and refuses what they do not (each refusal is a test that can fail); the last
ones check the PodGroup that real renders create.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from crd_helpers import CRDS, SAMPLE_RUN_NAME, crd_schema, podgroup_from_workflow, to_json_schema, validate_crd_object
from helpers import REPO

CASES = REPO / "tests" / "cases"

VOLCANO = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": SAMPLE_RUN_NAME},
    "spec": {
        "minMember": 3,
        "queue": "training",
        "priorityClassName": "batch-high",
        "minResources": {"huawei.com/Ascend910": "16", "nvidia.com/gpu": "4"},
    },
}

COSCHEDULING = {
    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
    "kind": "PodGroup",
    "metadata": {"name": SAMPLE_RUN_NAME},
    "spec": {"minMember": 3, "scheduleTimeoutSeconds": 1800},
}


def changed(obj: dict, path: str, value) -> dict:
    """A copy of obj with the dotted path set to value (a missing leaf is added)."""
    out = copy.deepcopy(obj)
    *parents, leaf = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    node[leaf] = value
    return out


def without(obj: dict, path: str) -> dict:
    out = copy.deepcopy(obj)
    *parents, leaf = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    del node[leaf]
    return out


# --- the stored schemas -----------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(CRDS.glob("*.json")), ids=lambda p: p.name)
def test_stored_schema_names_its_source(path):
    stored = json.loads(path.read_text())
    repo_path, _, commit = stored["x-source"].partition("@")
    assert ":" in repo_path and len(commit) == 40, stored["x-source"]
    assert stored["x-kind"] == "PodGroup"
    assert set(stored["properties"]) == {"apiVersion", "kind", "metadata", "spec"}  # status left out
    assert crd_schema(stored["x-apiVersion"], stored["x-kind"]) is not None


def test_conversion_closes_objects_and_bounds_int32():
    schema = to_json_schema({
        "type": "object",
        "properties": {
            "n": {"type": "integer", "format": "int32", "minimum": 1},
            "open": {"type": "object", "properties": {"a": {"type": "string"}},
                     "x-kubernetes-preserve-unknown-fields": True},
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
            "q": {"x-kubernetes-int-or-string": True},
        },
    })
    assert schema["additionalProperties"] is False
    assert schema["properties"]["n"] == {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
    assert "additionalProperties" not in schema["properties"]["open"]
    assert schema["properties"]["map"]["additionalProperties"] == {"type": "string"}
    assert schema["properties"]["q"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert not any(key.startswith("x-kubernetes-") for key in json.dumps(schema).split('"'))


# --- Volcano: scheduling.volcano.sh/v1beta1 PodGroup ------------------------------------

def test_volcano_valid():
    assert validate_crd_object(VOLCANO) == []


def test_volcano_valid_without_optional_fields():
    assert validate_crd_object({**VOLCANO, "spec": {"minMember": 1}}) == []


@pytest.mark.parametrize("path, value, expected", [
    ("spec.minMember", "3", "spec.minMember: '3' is not of type 'integer'"),
    ("spec.minMember", 2**31, "spec.minMember: 2147483648 is greater than the maximum of 2147483647"),
    ("spec.minMember", True, "spec.minMember: True is not of type 'integer'"),
    ("spec.queue", 7, "spec.queue: 7 is not of type 'string'"),
    ("spec.priorityClassName", ["high"], "spec.priorityClassName: ['high'] is not of type 'string'"),
    ("spec.minResources", {"nvidia.com/gpu": "4 GPUs"}, "spec.minResources.nvidia.com/gpu: '4 GPUs' does not match"),
    ("spec.minResources", {"nvidia.com/gpu": 4.5},
     "spec.minResources.nvidia.com/gpu: 4.5 is not valid under any of the given schemas"),
    ("spec.minResources", ["nvidia.com/gpu"], "spec.minResources: ['nvidia.com/gpu'] is not of type 'object'"),
    ("spec.minMembers", 3, "spec: Additional properties are not allowed ('minMembers' was unexpected)"),
    ("spec.scheduleTimeoutSeconds", 60,
     "spec: Additional properties are not allowed ('scheduleTimeoutSeconds' was unexpected)"),
    ("spec.networkTopology", {"mode": "strict"}, "spec.networkTopology.mode: 'strict' is not one of ['hard', 'soft']"),
    ("spec.networkTopology", {"tier": 1},
     "spec.networkTopology: Additional properties are not allowed ('tier' was unexpected)"),
    ("status", {"phase": "Running"}, "<root>: Additional properties are not allowed ('status' was unexpected)"),
    ("metadata.name", "{{workflow.name}}", "metadata.name: '{{workflow.name}}' does not match"),
    ("metadata.name", "Job_1", "metadata.name: 'Job_1' does not match"),
    ("metadata.labels", {"torchdag.io/node-rank": 0},
     "metadata.labels.torchdag.io/node-rank: 0 is not of type 'string'"),
])
def test_volcano_invalid(path, value, expected):
    errors = validate_crd_object(changed(VOLCANO, path, value))
    assert any(error.startswith(expected) for error in errors), errors


def test_volcano_needs_a_name():
    errors = validate_crd_object(without(VOLCANO, "metadata.name"))
    assert errors and errors[0].startswith("metadata: "), errors


# --- scheduler-plugins coscheduling: scheduling.x-k8s.io/v1alpha1 PodGroup --------------

def test_coscheduling_valid():
    assert validate_crd_object(COSCHEDULING) == []


@pytest.mark.parametrize("path, value, expected", [
    ("spec.minMember", "3", "spec.minMember: '3' is not of type 'integer'"),
    ("spec.minMember", 0, "spec.minMember: 0 is less than the minimum of 1"),
    ("spec.minMember", 1.5, "spec.minMember: 1.5 is not of type 'integer'"),
    ("spec.scheduleTimeoutSeconds", "1800", "spec.scheduleTimeoutSeconds: '1800' is not of type 'integer'"),
    ("spec.scheduleTimeoutSeconds", 2**31, "spec.scheduleTimeoutSeconds: 2147483648 is greater than the maximum"),
    ("spec.scheduleTimeoutSeconds", "30m", "spec.scheduleTimeoutSeconds: '30m' is not of type 'integer'"),
    ("spec.queue", "training", "spec: Additional properties are not allowed ('queue' was unexpected)"),
    ("spec.minResources", {"cpu": "two"}, "spec.minResources.cpu: 'two' does not match"),
])
def test_coscheduling_invalid(path, value, expected):
    errors = validate_crd_object(changed(COSCHEDULING, path, value))
    assert any(error.startswith(expected) for error in errors), errors


@pytest.mark.parametrize("obj, expected", [
    ({**COSCHEDULING, "apiVersion": "scheduling.x-k8s.io/v1"},
     "<root>: no CRD schema for apiVersion 'scheduling.x-k8s.io/v1'"),
    ({**VOLCANO, "kind": "Queue"}, "<root>: no CRD schema for apiVersion 'scheduling.volcano.sh/v1beta1' kind 'Queue'"),
    ({**VOLCANO, "apiVersion": "scheduling.sigs.k8s.io/v1alpha1"}, "<root>: no CRD schema"),
])
def test_unknown_api_version_or_kind(obj, expected):
    errors = validate_crd_object(obj)
    assert len(errors) == 1 and errors[0].startswith(expected), errors


# --- podgroup_from_workflow ---------------------------------------------------------------

def workflow_with_gang(manifest: str, **resource) -> dict:
    return {"kind": "Workflow", "spec": {"templates": [
        {"name": "train", "dag": {"tasks": []}},
        {"name": "gang", "resource": {"action": "apply", "setOwnerReference": True, "manifest": manifest, **resource}},
    ]}}


MANIFEST = """\
apiVersion: "scheduling.x-k8s.io/v1alpha1"
kind: "PodGroup"
metadata:
  name: "{{workflow.name}}"
spec:
  minMember: 2
  scheduleTimeoutSeconds: 600
"""


def test_podgroup_from_workflow_substitutes_the_run_name():
    podgroup = podgroup_from_workflow(workflow_with_gang(MANIFEST))
    assert podgroup["metadata"] == {"name": SAMPLE_RUN_NAME}
    assert podgroup["spec"] == {"minMember": 2, "scheduleTimeoutSeconds": 600}
    assert validate_crd_object(podgroup) == []


def test_podgroup_from_workflow_none_without_gang_template():
    assert podgroup_from_workflow({"kind": "Workflow", "spec": {"templates": [{"name": "train"}]}}) is None


@pytest.mark.parametrize("resource, expected", [
    ({"action": "create"}, "action 'create'"),
    ({"setOwnerReference": False}, "setOwnerReference False"),
])
def test_podgroup_from_workflow_refuses_other_resource_templates(resource, expected):
    with pytest.raises(ValueError, match=expected):
        podgroup_from_workflow(workflow_with_gang(MANIFEST, **resource))


def test_podgroup_from_workflow_refuses_two_documents():
    with pytest.raises(ValueError, match="2 documents"):
        podgroup_from_workflow(workflow_with_gang(MANIFEST + "---\n" + MANIFEST))


# --- real renders ---------------------------------------------------------------------------

# What a training pod carries to join the gang named "{{workflow.name}}" (the facts the
# schedulers read: pod annotation for Volcano, pod label for coscheduling).
JOIN = {
    "gang-volcano.yaml": ("volcano", "annotations", "scheduling.k8s.io/group-name"),
    "gang-coscheduling.yaml": ("scheduler-plugins-scheduler", "labels", "scheduling.x-k8s.io/pod-group"),
}


@pytest.mark.parametrize("case", sorted(JOIN))
def test_rendered_podgroup_matches_crd(case):
    path = CASES / case
    from torchdag import pipeline

    docs = [d for d in yaml.safe_load_all(pipeline.run(path).text) if d]
    workflow = next(d for d in docs if d.get("kind") in ("Workflow", "WorkflowTemplate"))
    podgroup = podgroup_from_workflow(workflow)
    assert podgroup is not None, "no PodGroup: the Workflow has no template named gang"
    assert validate_crd_object(podgroup) == []

    templates = {t["name"]: t for t in workflow["spec"]["templates"]}
    tasks = [task for t in templates.values() if "dag" in t for task in t["dag"]["tasks"]]
    nodes = [task for task in tasks if task["name"].startswith("node-")]
    assert nodes
    assert podgroup["spec"]["minMember"] == len(nodes)
    assert [task["name"] for task in tasks].count("gang") == 1
    # after the gang's PodGroup and the helpers' ConfigMap (agents.fromWorkflow)
    waits = [task.get("dependencies") for task in nodes]
    assert all(wait == ["gang", "agents"] for wait in waits), waits

    scheduler, where, key = JOIN[case]
    for shape in sorted({task["template"] for task in nodes}):
        template = templates[shape]
        assert template.get("schedulerName") == scheduler, shape
        group = template["metadata"][where][key].replace("{{workflow.name}}", SAMPLE_RUN_NAME)
        assert group == podgroup["metadata"]["name"], shape
