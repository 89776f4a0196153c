"""render.py's secure pod defaults, resource-name overrides and the size of what it may
write (one Kubernetes object), each checked against the chart too where the chart decides."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from argo_helpers import task_pods, validate_kubernetes
from helpers import REPO
from torchdag import pipeline
from torchdag.errors import ValuesError


def render_doc(path):
    text = pipeline.run(path).text
    return next(d for d in yaml.safe_load_all(text) if d and d.get("kind") in ("Workflow", "WorkflowTemplate"))


def test_containers_are_locked_down_by_default_and_loosened_on_request(tmp_path):
    """No privilege escalation, no capabilities, the runtime's seccomp profile, on every
    container torchdag renders (the gang watch included); IPC_LOCK for RDMA on request."""
    doc = render_doc(REPO / "tests" / "cases" / "gang-volcano.yaml")
    containers = [t["container"] for t in doc["spec"]["templates"] if "container" in t]
    assert len(containers) == 3  # two training shapes and the gang watch
    for container in containers:
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                "seccompProfile": {"type": "RuntimeDefault"}}
    assert "automountServiceAccountToken" not in doc["spec"]
    values = tmp_path / "v.yaml"
    values.write_text((REPO / "examples" / "nvidia.yaml").read_text()
                      + "containerSecurity: {addCapabilities: [IPC_LOCK], seccompProfile: ''}\n"
                      "automountServiceAccountToken: false\nexecutorServiceAccountName: argo-executor\n")
    doc = render_doc(values)
    pod = task_pods(doc)["node-0"]
    validate_kubernetes(pod)
    assert pod["spec"]["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                               "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}
    assert doc["spec"]["automountServiceAccountToken"] is False
    assert doc["spec"]["executor"] == {"serviceAccountName": "argo-executor"}


def test_token_off_needs_an_executor_account_and_no_gang(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text((REPO / "tests" / "cases" / "gang-volcano.yaml").read_text()
                      + "automountServiceAccountToken: false\n")
    with pytest.raises(ValuesError) as caught:
        pipeline.run(values)
    assert caught.value.lines() == [
        f"{values}: automountServiceAccountToken: must stay true with a gang scheduler: "
        "the gang watch reads the pods through the API",
        f"{values}: executorServiceAccountName: must be set when automountServiceAccountToken is false: "
        "Argo's executor still needs a token to report each step",
    ]


def test_a_workflow_over_the_object_limit_is_refused_by_both(helm, tmp_path):
    path = tmp_path / "huge.yaml"
    args = ", ".join(f'"{c * 131000}"' for c in "abcdefghi")  # each under Linux's 128 KiB, together over 1 MiB
    path.write_text(f"name: huge\nimage: img:1\nscript: /t.py\nargs: [{args}]\nnodes: [{{name: n1}}]\n")
    with pytest.raises(ValuesError,
                       match=r"nodes: 1 nodes make a Workflow of 1\d{6} bytes as the API server stores it \(JSON\), "
                             r"over the 1048576-byte limit Argo's controller holds a Workflow to \(it ends a larger "
                             r"one in Error before its first pod\)"):
        pipeline.run(path)
    result = subprocess.run([helm, "template", "t", str(REPO / "chart"), "-f", str(path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode != 0
    assert "over the 1048576-byte limit Argo's controller holds a Workflow to" in result.stderr


def test_resource_names_are_overridable_per_kind(helm, tmp_path):
    """HAMi and per-model device plugins name the resource otherwise (issue 9)."""
    values = tmp_path / "v.yaml"
    values.write_text((REPO / "examples" / "ascend910-4x8.yaml").read_text()
                      + "resourceNames: {ascend910: huawei.com/Ascend910B3}\nscheduling: {gang: volcano}\n")
    doc = render_doc(values)
    for name, pod in task_pods(doc).items():
        if name.startswith("node-"):
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            assert limits["huawei.com/Ascend910B3"] == "8" and "huawei.com/Ascend910" not in limits
    manifest = next(t for t in doc["spec"]["templates"] if t["name"] == "gang")["resource"]["manifest"]
    assert yaml.safe_load(manifest)["spec"]["minResources"] == {"huawei.com/Ascend910B3": "32"}
    values.write_text((REPO / "examples" / "cpu.yaml").read_text() + "resourceNames: {ascend: huawei.com/npu}\n")
    with pytest.raises(ValuesError, match=r"resourceNames\['ascend'\]|resourceNames.ascend"):
        pipeline.run(values)
