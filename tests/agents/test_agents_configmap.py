"""The helpers the Workflow carries (agents.fromWorkflow): the files hold no Argo tag, the
ConfigMap manifest gives them back byte for byte, and a pod whose image has no torchdag
files (the process kubelet not mapping /opt/torchdag onto the checkout) runs them from the
Workflow's ConfigMap alone. On the real control plane: tests/e2e/test_e2e_byo.py."""

from __future__ import annotations

import io
import os
import sys

import pytest
import yaml
from test_kubelet_pods import FakeApi, mounts_allowed, run  # noqa: F401 (a fixture); the stand-ins

from helpers import write
from sync_chart import agent_files
from testbed.kubelet.kubelet import Kubelet
from testbed.runtime import Options
from torchdag import pipeline

AGENTS = "/opt/torchdag/torchdag/agents"
VALUES = """
name: byo
image: registry.example.com/team/ascend-pytorch:1
script: /workspace/check.py
preflight: {enabled: true}
scheduling: {gang: volcano}
nodes: [{name: a}, {name: b}]
"""
CHECK = "import torchdag_ddp\nprint('helper from', torchdag_ddp.__file__)\n"


def test_the_helpers_hold_no_argo_tag():
    """Argo substitutes `{{` anywhere in a template, the ConfigMap's manifest included."""
    assert {name: text.count("{{") for name, text in agent_files().items()} == dict.fromkeys(agent_files(), 0)


def rendered(tmp_path) -> dict:
    text = pipeline.run(write(tmp_path, VALUES, "byo.yaml")).text
    return next(d for d in yaml.safe_load_all(text) if d and "spec" in d)


def test_the_configmap_gives_the_files_back_byte_for_byte(tmp_path):
    templates = {t["name"]: t for t in rendered(tmp_path)["spec"]["templates"]}
    manifest = yaml.safe_load(templates["agents"]["resource"]["manifest"])
    assert manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"] == "{{workflow.name}}-agents"
    assert manifest["data"] == agent_files()  # all six: the runner, torchdag_ddp, preflight, the gang watch's three
    watch_mounts = templates["gang-watch"]["container"]["volumeMounts"]
    assert watch_mounts == [{"name": "torchdag-agents", "mountPath": AGENTS, "readOnly": True}]


class ConfigMapApi(FakeApi):
    def __init__(self, data: dict):
        super().__init__()
        self.data = data

    def config_map_data(self, namespace, name):
        return self.data if name == "byo-abcde-agents" else None


@pytest.mark.torch  # record.py runs the script under torch's @record
def test_a_pod_runs_the_helpers_from_the_workflows_configmap_alone(tmp_path, mounts_allowed):  # noqa: F811
    assert not os.path.exists(f"{AGENTS}/record.py")  # not on this machine: only the pod's mount has it
    doc = rendered(tmp_path)
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    data = yaml.safe_load(templates["agents"]["resource"]["manifest"])["data"]
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "check.py").write_text(CHECK)
    node = templates["cpu-x1"]["container"]
    volumes = [dict(v, configMap={"name": "byo-abcde-agents"}) for v in doc["spec"]["volumes"]]
    main = {"name": "main", "image": node["image"], "volumeMounts": node["volumeMounts"],
            "command": [sys.executable, f"{AGENTS}/record.py", "/workspace/check.py"]}
    pod = {"metadata": {"name": "byo-abcde-node-0", "namespace": "team", "uid": "uid-byo-0"},
           "spec": {"nodeName": "node-a", "restartPolicy": "Never", "containers": [main], "volumes": volumes},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}}
    api = ConfigMapApi(data)
    options = Options(checkout_map=False, maps=[("/workspace", str(workspace))])
    said = io.StringIO()
    kubelet = Kubelet(api, ["node-a"], state_dir=tmp_path / "kubelet", options=options, out=said)
    run(kubelet, pod, timeout=60)
    log = (tmp_path / "kubelet" / "logs" / "team" / "byo-abcde-node-0" / "main.log").read_text()
    assert api.statuses[-1]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0, log + said.getvalue()
    assert log == f"helper from {AGENTS}/torchdag_ddp.py\n"
