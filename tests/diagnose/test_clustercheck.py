"""`torchdag check --cluster`'s judgement of what it reads (torchdag/diagnose/clustercheck.py),
on API objects as the server answers them; the reads themselves run against the local cluster
in tests/e2e/test_check_cluster.py. Here: what only a cluster unlike the local one shows (the
minimal CRDs, a CRD whose caps a Workflow passes, Argo's one-key configmap form, a running gang
scheduler, tolerations)."""

from __future__ import annotations

import pytest
import yaml

from torchdag import pipeline
from torchdag.diagnose.clustercheck import Check, Forbidden, _tolerates

FULL_CRD = {"spec": {"versions": [{"storage": True, "schema": {"openAPIV3Schema": {"properties": {"spec": {
    "properties": {"templates": {"maxItems": 200, "items": {"properties": {"dag": {"properties": {
        "tasks": {"maxItems": 200}}}}}}}}}}}}]}}
MINIMAL_CRD = {"spec": {"versions": [{"storage": True, "schema": {"openAPIV3Schema": {
    "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


class FakeReader:
    """The answers of an API server: path -> object (None: 404; Forbidden: 403)."""

    def __init__(self, objects: dict, allowed: bool = True):
        self.objects, self.allowed = objects, allowed
        self.cluster = type("C", (), {"namespace": "team"})()

    def call(self, method, path, body=None, query=None, headers=None):
        if method == "POST":
            return {"status": {"allowed": self.allowed}}
        found = self.objects.get(path)
        if isinstance(found, Exception):
            raise found
        return found

    def crd(self, name):
        return self.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")

    def nodes(self):
        return self.objects.get("nodes", [])


def rendered(tmp_path, **extra):
    body = {"name": "job", "image": "img:1", "script": "/t.py",
            "nodes": [{"name": f"npu-{i}", "accelerator": "ascend910", "devices": 8} for i in range(2)], **extra}
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(body))
    return pipeline.run(path)


def node(name: str, npus: str = "8", **spec) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": spec,
            "status": {"allocatable": {"huawei.com/Ascend910": npus},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def findings(tmp_path, objects: dict, **extra) -> list[tuple[str, str]]:
    return Check(rendered(tmp_path, **extra), FakeReader(objects), "argo").run()


CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workflows.argoproj.io"
CONFIG_PATH = "/api/v1/namespaces/argo/configmaps/workflow-controller-configmap"


def test_the_crd_flavour_and_its_caps(tmp_path):
    base = {CONFIG_PATH: {"data": {}}, "nodes": [node("npu-0"), node("npu-1")]}
    assert ("ok", "Argo's minimal CRDs (workflows.argoproj.io): no cap on templates or tasks") in findings(
        tmp_path, {**base, CRD_PATH: MINIMAL_CRD})
    tight = yaml.safe_load(yaml.safe_dump(FULL_CRD))
    tight["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["templates"][
        "maxItems"] = 3  # a cluster whose CRD caps lower than the Workflow's 5 templates
    lines = findings(tmp_path, {**base, CRD_PATH: tight})
    assert [line for level, line in lines if level == "error" and "cap spec.templates at 3" in line], lines
    assert ("error", "Argo is not installed: no CustomResourceDefinition workflows.argoproj.io (kubectl get crd "
                     "workflows.argoproj.io)") in findings(tmp_path, base)


def test_the_controllers_configmap_as_argo_reads_it(tmp_path):
    """Argo reads one `config` key, or each key as a field (config/controller.go parseConfigMap)."""
    big = [{"name": f"npu-{i:04d}", "accelerator": "ascend910", "devices": 8} for i in range(600)]
    one_key = {"data": {"config": "resourceRateLimit: {limit: 10, burst: 25}\nparallelism: 4\n"}}
    lines = findings(tmp_path, {CRD_PATH: FULL_CRD, CONFIG_PATH: one_key}, nodes=big)
    assert ("ok", "600 machines: the controller creates at most 10 pods a second (resourceRateLimit), so they "
                  "start in about 60 s") in lines
    assert ("warning", "the controller runs at most 4 Workflows at once (parallelism in "
                       "argo/workflow-controller-configmap): this one waits Pending while that many run") in lines
    per_key = {"data": {"persistence": "nodeStatusOffLoad: true\npostgresql: {host: db}\n"}}
    lines = findings(tmp_path, {CRD_PATH: FULL_CRD, CONFIG_PATH: per_key}, nodes=big)
    assert [line for level, line in lines if level == "warning" and "no resourceRateLimit" in line], lines


def test_a_read_the_user_may_not_make_is_a_warning_not_an_error(tmp_path):
    lines = findings(tmp_path, {CRD_PATH: Forbidden("crds is forbidden"), CONFIG_PATH: {"data": {}},
                                "nodes": [node("npu-0"), node("npu-1")]})
    assert ("warning", "cannot tell Argo's CRD workflows.argoproj.io: this kubeconfig's user may not read it "
                       "(crds is forbidden)") in lines
    assert not [line for level, line in lines if level == "error"], lines


def test_a_gang_scheduler_that_runs(tmp_path):
    ready = {"status": {"readyReplicas": 1}}
    objects = {CRD_PATH: FULL_CRD, CONFIG_PATH: {"data": {}}, "nodes": [node("npu-0"), node("npu-1")],
               "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.volcano.sh": {},
               "/apis/apps/v1/namespaces/volcano-system/deployments/volcano-scheduler": ready}
    lines = findings(tmp_path, objects, scheduling={"gang": "volcano"})
    assert ("ok", "scheduling.gang volcano: its CRDs are installed and Deployment volcano-system/volcano-scheduler "
                  "runs") in lines


@pytest.mark.parametrize("toleration, taint, tolerated", [
    ({"key": "a", "operator": "Exists"}, {"key": "a", "effect": "NoSchedule"}, True),
    ({"operator": "Exists"}, {"key": "anything", "effect": "NoExecute"}, True),
    ({"key": "a", "value": "x", "effect": "NoSchedule"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, True),
    ({"key": "a", "value": "x"}, {"key": "a", "value": "y", "effect": "NoSchedule"}, False),
    ({"key": "a", "operator": "Exists", "effect": "NoExecute"}, {"key": "a", "effect": "NoSchedule"}, False),
])
def test_tolerations_match_as_kubernetes_matches_them(toleration, taint, tolerated):
    assert _tolerates(toleration, taint) is tolerated
