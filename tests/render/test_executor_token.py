"""The executor's token Secret. Whenever executor.serviceAccountName is set, Argo's controller
mounts the Secret `<account>.service-account-token` into every pod (workflowpod.go
setupServiceAccount, util/secrets TokenName; with automountServiceAccountToken: false it is
the only token the executor has), and Kubernetes 1.24 and later no longer create that Secret:
without it every pod waits in ContainerCreating. render.py says so (a warning naming the
Secret and how to create it); the chart's rbac.create creates it, and its NOTES warn when
rbac.create is off."""

from __future__ import annotations

import pytest
from chart_notes import helm_notes

from chart_helpers import documents, helm_template
from helpers import EXAMPLES_DIR, write
from torchdag.cli import main

CPU = (EXAMPLES_DIR / "cpu.yaml").read_text(encoding="utf-8")
WARNING = ("executorServiceAccountName: Argo mounts the Secret 'argo-exec.service-account-token' (the "
           "ServiceAccount's token) into every pod, and Kubernetes 1.24 and later no longer create it: create it "
           "once, after the ServiceAccount, as type kubernetes.io/service-account-token with the annotation "
           "kubernetes.io/service-account.name: argo-exec")

# (values added to examples/cpu.yaml): an executor account, with and without the pods' token
WITH_EXECUTOR = [
    "executorServiceAccountName: argo-exec\n",
    "executorServiceAccountName: argo-exec\nautomountServiceAccountToken: false\n",
    "executorServiceAccountName: argo-exec\nserviceAccountName: trainer\n",
]


@pytest.mark.parametrize("extra", WITH_EXECUTOR)
def test_render_py_warns_naming_the_secret(extra, tmp_path, capsys):
    values = write(tmp_path, CPU + extra)
    assert main([str(values), "-o", str(tmp_path / "wf.yaml")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "service-account-token" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {values}: {WARNING}"), warnings


def test_no_executor_account_no_warning(tmp_path, capsys):
    values = write(tmp_path, CPU)
    assert main([str(values), "-o", str(tmp_path / "wf.yaml")]) == 0
    assert "service-account-token" not in capsys.readouterr().err


def secrets(rendered: str) -> list[dict]:
    return [doc for doc in documents(rendered) if doc["kind"] == "Secret"]


@pytest.mark.parametrize("extra", [
    "executorServiceAccountName: argo-exec\nautomountServiceAccountToken: false\nrbac: {create: true}\n",
    "executorServiceAccountName: argo-exec\nserviceAccountName: trainer\nrbac: {create: true}\n",
])
def test_rbac_create_creates_the_token_secret(extra, helm, tmp_path):
    result = helm_template(helm, write(tmp_path, CPU + extra), "-n", "training")
    assert result.returncode == 0, result.stderr
    assert "# Source: torchdag/templates/executor-token.yaml" in result.stdout  # a resource file of its own
    [secret] = secrets(result.stdout)
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["name"] == "argo-exec.service-account-token"
    assert secret["metadata"]["namespace"] == "training"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "argo-exec"}
    assert "data" not in secret  # the token controller fills it in


@pytest.mark.parametrize("extra", [
    "executorServiceAccountName: argo-exec\n",  # rbac.create off: the user creates it (NOTES say so)
    "serviceAccountName: trainer\nrbac: {create: true}\n",  # no executor account: Argo mounts no such Secret
])
def test_no_secret_without_rbac_create_and_an_executor_account(extra, helm, tmp_path):
    result = helm_template(helm, write(tmp_path, CPU + extra))
    assert result.returncode == 0, result.stderr
    assert secrets(result.stdout) == []


def test_the_chart_notes_warn_when_it_does_not_create_the_secret(helm, tmp_path):
    assert f"WARNING: {WARNING}" in helm_notes(helm, write(tmp_path, CPU + WITH_EXECUTOR[0]))
    created = write(tmp_path, CPU + WITH_EXECUTOR[2] + "rbac: {create: true}\n", name="created.yaml")
    assert "service-account-token" not in helm_notes(helm, created)
