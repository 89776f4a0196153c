"""Runs submitted from a WorkflowTemplate: Argo gives such a Workflow the labels and
annotations of the template's spec.workflowMetadata only (common/convert.go
NewWorkflowFromWorkflowTemplate), never the template's own metadata. Both renderers put the
job's labels and annotations there, so `argo list -l torchdag.io/job=NAME` finds every run."""

from __future__ import annotations

import pytest

from chart_helpers import assert_same_workflow, chart_workflow, render_py_workflow
from helpers import CASES, EXAMPLE, write

BARE_TEMPLATE = EXAMPLE.read_text(encoding="utf-8") + "kind: WorkflowTemplate\n"
TEMPLATE = BARE_TEMPLATE + "labels: {team: vision}\nannotations: {owner: ml-platform}\n"


@pytest.mark.parametrize("text,labels,annotations", [
    (TEMPLATE, {"torchdag.io/job": "bladetrain", "team": "vision"}, {"owner": "ml-platform"}),
    (BARE_TEMPLATE, {"torchdag.io/job": "bladetrain"}, None),
], ids=["labels-and-annotations", "the-job-label-alone"])
def test_a_template_gives_its_runs_the_jobs_labels_and_annotations(text, labels, annotations, tmp_path):
    spec = render_py_workflow(write(tmp_path, text))["spec"]
    assert spec["workflowMetadata"]["labels"] == labels
    assert spec["workflowMetadata"].get("annotations") == annotations
    # the pods carry them too, as before
    assert spec["podMetadata"]["labels"] == labels


def test_the_runs_labels_are_the_templates_own(tmp_path):
    document = render_py_workflow(CASES / "workflowtemplate-full.yaml")
    assert document["spec"]["workflowMetadata"]["labels"] == document["metadata"]["labels"]
    assert document["spec"]["workflowMetadata"]["annotations"] == document["metadata"]["annotations"]


def test_a_workflow_needs_no_workflow_metadata(tmp_path):
    """A Workflow carries the labels on its own metadata; workflowMetadata would only repeat them."""
    assert "workflowMetadata" not in render_py_workflow(EXAMPLE)["spec"]


def test_helm_renders_the_same_workflow_metadata(helm, tmp_path):
    values = write(tmp_path, TEMPLATE)
    assert_same_workflow(helm, values)
    spec = chart_workflow(helm, values)["spec"]
    # helm's own labels stay on the template's metadata: the runs get the job's, as with render.py
    assert spec["workflowMetadata"]["labels"] == {"torchdag.io/job": "bladetrain", "team": "vision"}
