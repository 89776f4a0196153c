"""The admins' paths end to end (issue 17, points 4 and 5): `helm install` of the chart with
`rbac.create` (also for an executor account whose token Secret the chart creates), and a
WorkflowTemplate registered with kubectl and then referenced by a Workflow (what `argo submit
--from` creates), found by the job's label, each run to Succeeded by the real controller with
real nodes (the kubelet, containerd and runc) running the pods, under the RBAC the chart (or
docs/rbac/) grants."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from helpers import REPO

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e, pytest.mark.long]
TWO_NODES = [{"devices": 1, "master": True}, {"devices": 1}]
ARGS = ["--type", "example", "--max-steps", "20", "--log-every", "10"]


def test_helm_install_with_rbac_create_runs_to_succeeded(job):
    # The chart's own Role and ServiceAccount, no docs/rbac/ Role.
    job.rbac = False
    values = job.values([dict(n) for n in TWO_NODES], ARGS,
                        extra="serviceAccountName: trainer\nrbac: {create: true, createServiceAccount: true}\n")
    helm = [str(REPO / ".tools" / "bin" / "helm"), f"--kubeconfig={job.cluster.kubeconfig}", "-n", job.namespace]
    installed = subprocess.run([*helm, "install", "training", str(REPO / "chart"), "-f", str(values)],
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    try:
        (workflow,) = job.cluster.get("workflows", "-n", job.namespace)["items"]
        name = workflow["metadata"]["name"]
        wf = job.wait_finished(name, timeout=300)
        assert wf["status"]["phase"] == "Succeeded", job.explain(name)
        assert {pod["spec"]["serviceAccountName"] for pod in job.pods(name)} == {"trainer"}
    finally:
        subprocess.run([*helm, "uninstall", "training"], capture_output=True, timeout=120)


def test_rbac_create_gives_the_executor_account_its_token_secret(job):
    """automountServiceAccountToken: false: the pods carry no token of their own, and Argo's
    executor reports with the token of executorServiceAccountName, which the controller mounts
    from the Secret `<account>.service-account-token`. Kubernetes >= 1.24 does not create it;
    the chart's rbac.create does, and the token controller fills it in."""
    job.rbac = False  # the chart's rbac.create grants the Roles
    job.cluster.kubectl("create", "serviceaccount", "argo-exec", "-n", job.namespace)
    values = job.values([dict(n) for n in TWO_NODES], ARGS,
                        extra="automountServiceAccountToken: false\nexecutorServiceAccountName: argo-exec\n"
                              "rbac: {create: true}\n")
    helm = [str(REPO / ".tools" / "bin" / "helm"), f"--kubeconfig={job.cluster.kubeconfig}", "-n", job.namespace]
    installed = subprocess.run([*helm, "install", "training", str(REPO / "chart"), "-f", str(values)],
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    try:
        secret = job.cluster.get("secret", "argo-exec.service-account-token", "-n", job.namespace)
        assert secret["type"] == "kubernetes.io/service-account-token"
        (workflow,) = job.cluster.get("workflows", "-n", job.namespace)["items"]
        name = workflow["metadata"]["name"]
        wf = job.wait_finished(name, timeout=300)
        assert wf["status"]["phase"] == "Succeeded", job.explain(name)
        filled = job.cluster.get("secret", "argo-exec.service-account-token", "-n", job.namespace)
        assert filled.get("data", {}).get("token"), "the token controller did not fill the Secret in"
        for pod in job.pods(name):
            assert pod["spec"].get("automountServiceAccountToken") is False
            assert {"name": "exec-sa-token", "secret": {"secretName": "argo-exec.service-account-token",
                                                        "defaultMode": 420}} in pod["spec"]["volumes"]
    finally:
        subprocess.run([*helm, "uninstall", "training"], capture_output=True, timeout=120)


def test_a_workflowtemplate_referenced_by_a_workflow_runs_to_succeeded(job):
    values = job.values([dict(n) for n in TWO_NODES], ARGS, extra="kind: WorkflowTemplate\n")
    rendered = job.render(values)
    (template,) = [d for d in yaml.safe_load_all(rendered.read_text()) if d and d["kind"] == "WorkflowTemplate"]
    job.cluster.kubectl("create", "-f", str(rendered))
    workflow = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": {"generateName": "from-template-", "namespace": job.namespace},
                "spec": {"workflowTemplateRef": {"name": template["metadata"]["name"]}}}
    name = job.cluster.kubectl("create", "-f", "-", "-o", "name", stdin=json.dumps(workflow)).stdout
    name = name.strip().split("/")[-1]
    wf = job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] == "Succeeded", job.explain(name)
    # Argo stores the template's spec in the Workflow's status: the one object holds both.
    assert wf["status"]["storedWorkflowTemplateSpec"]["templates"], "no stored template spec"
    # The run takes the job's labels from the template's spec.workflowMetadata (the controller's
    # updateWorkflowMetadata), so `argo list -l torchdag.io/job=NAME` finds runs from templates too.
    job_label = template["metadata"]["labels"]["torchdag.io/job"]
    assert wf["metadata"]["labels"]["torchdag.io/job"] == job_label
    found = job.cluster.get("workflows", "-n", job.namespace, "-l", f"torchdag.io/job={job_label}")["items"]
    assert [item["metadata"]["name"] for item in found] == [name]
