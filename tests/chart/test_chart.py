"""The Helm chart on its own: lint, strict Argo validation, generated files in step with
the schema, the documented `--api-versions` behaviour, WorkflowTemplate, optional RBAC."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

import sync_chart
from argo_helpers import KUBERNETES_VERSION, task_pods, validate_argo
from chart_helpers import CHART, REPO, VALUES_FILES, argo_document, chart_workflow, documents, helm_template
from helpers import CLUSTER_SUMMARY, EXAMPLE
from torchdag.values import schema_defaults


def values_file(tmp_path, extra: str, base=EXAMPLE):
    path = tmp_path / "values.yaml"
    path.write_text(base.read_text(encoding="utf-8") + "\n" + extra, encoding="utf-8")
    return path


# --- helm lint and strict validation ---------------------------------------------------

@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_helm_lint_strict_is_clean(helm, values):
    result = subprocess.run([helm, "lint", "--strict", str(CHART), "-f", str(values)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not re.search(r"\[(WARNING|ERROR)\]", result.stdout), result.stdout


def test_helm_lint_passes_without_values(helm):
    """A chart-testing pipeline lints the chart as it is: values.yaml's placeholders for
    the required keys let it render."""
    result = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_install_and_template_refuse_the_placeholders(helm, tmp_path):
    result = subprocess.run([helm, "template", "t", str(CHART)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    for key in ("name", "image", "script", "nodes"):
        assert f"{key}: is required: values.yaml holds only a placeholder" in result.stderr
    # one key forgotten in a real values file is named, the rest is fine
    path = tmp_path / "v.yaml"
    path.write_text(EXAMPLE.read_text(encoding="utf-8").replace("image: 192.168.110.125:8443/agent/ppo_torch:3.1\n",
                                                                ""))
    result = helm_template(helm, path)
    assert result.returncode != 0 and "image: is required: values.yaml holds only a placeholder" in result.stderr
    assert "name: is required" not in result.stderr


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_workflow_validates_strictly_with_argo_models(helm, values):
    doc = chart_workflow(helm, values)
    validate_argo(doc)  # hera's models with unknown fields forbidden, strict types


def test_strict_validation_catches_a_wrong_field(helm):
    doc = chart_workflow(helm, EXAMPLE)
    doc["spec"]["templates"][1]["container"]["envv"] = []
    with pytest.raises(Exception, match="envv"):
        validate_argo(doc)


def test_task_pods_validate_as_kubernetes_pods(helm):
    doc = chart_workflow(helm, REPO / "examples" / "mixed-gloo.yaml")
    pods = task_pods(doc)
    assert sorted(pods) == ["node-0", "node-1", "node-2", "schedule-watch"]
    for pod in pods.values():
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_argo_placeholders_are_exact_tags(helm):
    """Every `{{` in the output is one of the input parameters or the watch's workflow name and
    namespace, with no spaces."""
    text = helm_template(helm, REPO / "examples" / "cpu.yaml").stdout
    tags = set(re.findall(r"\{\{[^}]*\}\}", text))
    assert tags == {"{{inputs.parameters.host}}", "{{inputs.parameters.node-rank}}", "{{inputs.parameters.nic}}",
                    "{{workflow.name}}", "{{workflow.namespace}}"}
    assert text.count("{{") == sum(text.count(tag) for tag in tags)


def test_user_values_never_go_through_tpl():
    for template in (CHART / "templates").iterdir():
        code = re.sub(r"\{\{-? ?/\*.*?\*/ ?-?\}\}", "", template.read_text(encoding="utf-8"),
                      flags=re.S)  # drop comments
        assert not re.search(r"\btpl\b", code), f"{template.name} calls tpl"


def test_dollar_is_doubled_in_command_args_and_env(helm, tmp_path):
    doc = chart_workflow(helm, values_file(tmp_path, 'env: {GREETING: "hi $(USER)"}\nworkingDir: /w$x\n'))
    container = doc["spec"]["templates"][1]["container"]
    assert container["args"][-2:] == ["--type", "example"]
    assert {"name": "GREETING", "value": "hi $$(USER)"} in container["env"]
    assert container["workingDir"] == "/w$x"  # not expanded by Kubernetes: left as is


# --- files generated from the schema ----------------------------------------------------

def test_chart_schema_is_the_schema():
    assert (CHART / "values.schema.json").read_bytes() == (REPO / "schema" / "values.schema.json").read_bytes()


def test_generated_files_are_in_step_with_the_schema():
    result = subprocess.run([sys.executable, str(REPO / "tools" / "sync_chart.py"), "--check"], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


def test_drift_check_notices_an_edit(tmp_path, monkeypatch):
    # Every path sync_chart writes points into tmp_path: the test must not rewrite tracked files.
    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    schema = tmp_path / "values.schema.json"
    shutil.copyfile(REPO / "schema" / "values.schema.json", schema)
    shutil.copytree(REPO / "docs" / "rbac", tmp_path / "docs" / "rbac")
    monkeypatch.setattr(sync_chart, "CHART", copy)
    monkeypatch.setattr(sync_chart, "SCHEMA", schema)
    monkeypatch.setattr(sync_chart, "DOCS_ROOT", tmp_path)
    assert set(sync_chart.outputs()) <= {schema, *copy.rglob("*"), *(tmp_path / "docs" / "rbac").glob("*")}
    assert sync_chart.main(["--check"]) == 0
    values = copy / "values.yaml"
    values.write_text(values.read_text(encoding="utf-8").replace("port: 29500", "port: 29501"), encoding="utf-8")
    assert sync_chart.main(["--check"]) == 1
    assert sync_chart.main([]) == 0 and sync_chart.main(["--check"]) == 0


def test_values_yaml_defaults_are_the_schema_defaults():
    # helm merges values.yaml under the user's file before it checks the schema, and
    # render.py applies the schema's defaults: the two must be the same values, apart from
    # the placeholders of the required keys (which install and template refuse).
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    placeholders = {key: values.pop(key) for key in ("name", "image", "script", "nodes")}
    assert values == schema_defaults()
    assert placeholders == {"name": "replace-me", "image": "replace-me", "script": "/replace-me",
                            "nodes": [{"name": "replace-me"}]}


def test_required_keys_are_documented_as_required():
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    for key in ("name", "image", "script", "nodes"):
        block = re.search(rf"^# -- \(\w+\) \*\*Required\.\*\*(?:.*\n)+?{key}: ", text, re.M)
        assert block, key
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    assert ("| `name` | string | (required; the placeholder only lets `helm lint` render: "
            "install and template refuse it) |") in readme


def _leaves(data, prefix=""):
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _leaves(value, path + ".")
        else:
            yield path


def test_every_values_leaf_is_documented_and_in_the_readme():
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    entries = {entry.key: entry for entry in sync_chart.parse_values_comments(text)}
    leaves = set(_leaves(yaml.safe_load(text)))
    assert leaves <= set(entries), f"undocumented: {sorted(leaves - set(entries))}"
    node_keys = yaml.safe_load((REPO / "schema" / "values.schema.json").read_text())["$defs"]["node"]["properties"]
    assert {f"nodes[].{key}" for key in node_keys} <= set(entries)
    assert all(entry.description for entry in entries.values())
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    for key in entries:
        assert f"| `{key}` |" in readme
    assert entries["nodes[].address"].default == "the node's `name`"  # a `# @default --` override


def test_comment_parser_rejects_an_undocumented_key():
    with pytest.raises(ValueError, match="port has no `# --` comment"):
        sync_chart.parse_values_comments("# -- a documented key\nkind: Workflow\nport: 1\n")


# --- --api-versions, NOTES, kind -----------------------------------------------------------

def test_output_is_the_same_with_and_without_the_argo_api(helm):
    # Documented in chart/README.md: the manifests never depend on the API being visible
    # (offline `helm template` must work, as render.py does); only NOTES.txt warns.
    without = helm_template(helm, EXAMPLE)
    with_api = helm_template(helm, EXAMPLE, "--api-versions", "argoproj.io/v1alpha1")
    assert without.returncode == with_api.returncode == 0
    assert without.stdout == with_api.stdout


def test_notes_name_the_master_and_warn_without_the_argo_api(helm):
    result = subprocess.run([helm, "install", "t", str(CHART), "-f", str(EXAMPLE), "--dry-run=client", "-n",
                             "training"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert notes.lstrip("\n").startswith(CLUSTER_SUMMARY)
    assert "master: 192.168.110.22 (rank 0) at 192.168.110.22:25195" in notes
    assert "argo watch -n training t" in notes and "kubectl get wf -n training t -w" in notes
    assert "WARNING: helm does not see the argoproj.io/v1alpha1 API" in notes




def test_notes_show_the_short_node_table_of_a_large_job(helm, tmp_path):
    nodes = "".join(f"  - {{name: n{i}, address: 10.0.0.{i + 1}, nic: eth{i % 3}, "
                    "accelerator: ascend910, devices: 8}\n" for i in range(20))
    path = tmp_path / "big.yaml"
    path.write_text(f"name: big\nimage: img:1\nscript: /t.py\nnodes:\n{nodes}")
    result = subprocess.run([helm, "install", "t", str(CHART), "-f", str(path), "--dry-run=client"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1].lstrip("\n")
    assert notes.startswith("""\
torchdag job big: 20 node(s), world size 160, backend hccl (auto: ascend910 nodes)
master: n0 (rank 0) at 10.0.0.1:29500
gang scheduling: none; whole-job restarts: 0
HCCL_EXEC_TIMEOUT: 544 s (timeouts.processGroup 600 s, as CANN reads it: a multiple of 68, at most 17340)
script: start the process group with TORCHDAG_BACKEND=hccl: torchdag_ddp.setup() (docs/byo.md)
helpers: from the Workflow (a ConfigMap of 8 files) at /opt/torchdag/torchdag/agents
rbac: kubectl apply -n <namespace> -f docs/rbac/job.yaml,docs/rbac/helpers.yaml
rank  node  address    nic   accelerator  devices  template
   0  n0    10.0.0.1   eth0  ascend910    8        ascend910-x8
   1  n1    10.0.0.2   eth1  ascend910    8        ascend910-x8
   2  n2    10.0.0.3   eth2  ascend910    8        ascend910-x8
   3  n3    10.0.0.4   eth0  ascend910    8        ascend910-x8
... 12 more node(s) ...
  16  n16   10.0.0.17  eth1  ascend910    8        ascend910-x8
  17  n17   10.0.0.18  eth2  ascend910    8        ascend910-x8
  18  n18   10.0.0.19  eth0  ascend910    8        ascend910-x8
  19  n19   10.0.0.20  eth1  ascend910    8        ascend910-x8
"""), notes


def test_notes_for_a_workflow_template_say_how_to_submit_it(helm, tmp_path):
    path = values_file(tmp_path, "kind: WorkflowTemplate\n")
    result = subprocess.run([helm, "install", "llm", str(CHART), "-f", str(path), "--dry-run=client", "-n", "training"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "argo submit -n training --from workflowtemplate/llm --watch" in notes
    assert "argo watch" not in notes


def test_workflow_template_kind(helm, tmp_path):
    result = helm_template(helm, values_file(tmp_path, "kind: WorkflowTemplate\nnamespace: ml\n"))
    assert result.returncode == 0, result.stderr
    doc = argo_document(result.stdout)
    assert doc["kind"] == "WorkflowTemplate"
    assert doc["metadata"]["name"] == "t" and doc["metadata"]["namespace"] == "ml"
    assert "generateName" not in doc["metadata"]
    validate_argo(doc)


def test_workflow_is_named_after_the_release(helm):
    doc = chart_workflow(helm, EXAMPLE)
    assert doc["metadata"]["name"] == "t" and "generateName" not in doc["metadata"]
    result = helm_template(helm, EXAMPLE, release="a" * 53)  # helm's longest release name
    assert argo_document(result.stdout)["metadata"]["name"] == "a" * 53


# --- chart-only rejections and messages ------------------------------------------------------

@pytest.mark.parametrize(("extra", "message"), [
    ('args: ["ok", "a\\u0000b"]', "args[1]: contains a NUL character"),
    ('annotations: {"team": "a {{x}}"}', 'annotations.team: "a {'),
    ('env: {A: "' + "x" * 100 + '{{"}', 'env.A: "' + "x" * 76 + '... contains'),  # cut like render.py
    # a rule the schema states (x-rule rbac-service-account): helm names the field, render.py words it
    ("rbac: {createServiceAccount: true}", "at '/serviceAccountName'"),
])
def test_chart_rejections_name_the_field(helm, tmp_path, extra, message):
    result = helm_template(helm, values_file(tmp_path, extra))
    assert result.returncode != 0
    assert message in result.stderr


def test_all_problems_are_reported_at_once(helm, tmp_path):
    # Helm checks the schema (and the rules it states) first, then the templates check theirs.
    stderr = helm_template(helm, values_file(tmp_path, "env: {RANK: '1', WORLD_SIZE: '2'}\nbackend: nccl\n")).stderr
    assert "at '/env/RANK'" in stderr and "at '/env/WORLD_SIZE'" in stderr  # the field, not `at ''`
    volumes = ("volumes: [{name: a, mountPath: /d, hostPath: {path: /x}}, "
               "{name: b, mountPath: /d/, hostPath: {path: /y}}]")
    stderr = helm_template(helm,
                           values_file(tmp_path,
                                       f"{volumes}\nbackend: nccl\nannotations: {{a: '{'x' * 262144}'}}\n")).stderr
    assert "invalid values (3 problems)" in stderr
    assert "volumes[1].mountPath: " in stderr and "annotations: hold" in stderr
    assert "backend: nccl needs GPU nodes (device cuda)" in stderr


# --- optional RBAC ------------------------------------------------------------------------------

def test_no_rbac_objects_by_default(helm):
    kinds = [doc["kind"] for doc in documents(helm_template(helm, EXAMPLE).stdout)]
    assert kinds == ["Workflow"]


def test_rbac_objects_when_enabled(helm, tmp_path):
    path = values_file(tmp_path,
                       "serviceAccountName: trainer\nnamespace: ml\nrbac: {create: true, createServiceAccount: true}\n")
    result = helm_template(helm, path)
    assert result.returncode == 0, result.stderr
    docs = {doc["kind"]: doc for doc in documents(result.stdout)}
    assert sorted(docs) == ["Role", "RoleBinding", "ServiceAccount", "Workflow"]
    for kind in ("Role", "RoleBinding", "ServiceAccount"):
        kubernetes_validate.validate(docs[kind], KUBERNETES_VERSION, strict=True)
        assert docs[kind]["metadata"]["namespace"] == "ml"
    assert docs["ServiceAccount"]["metadata"]["name"] == "trainer" == docs["Workflow"]["spec"]["serviceAccountName"]
    assert docs["Role"]["rules"] == [{"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"],
                                      "verbs": ["create", "patch"]},
                                     {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                                     {"apiGroups": ["argoproj.io"], "resources": ["workflows"],
                                      "verbs": ["get", "patch"]},
                                     {"apiGroups": [""], "resources": ["configmaps"],
                                      "verbs": ["get", "create", "patch"]}]
    binding = docs["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": docs["Role"]["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainer", "namespace": "ml"}]


def test_role_is_never_bound_to_the_default_service_account_silently(helm, tmp_path):
    result = helm_template(helm, values_file(tmp_path, "rbac: {create: true}\n"))
    assert result.returncode != 0
    assert "at '/serviceAccountName'" in result.stderr  # render.py's wording: tests/bad_cases.py


def test_role_binds_the_named_service_account_and_legacy_adds_pods(helm, tmp_path):
    text = "serviceAccountName: trainer\nrbac: {create: true, legacyExecutor: true}\n"
    docs = {doc["kind"]: doc for doc in documents(helm_template(helm, values_file(tmp_path, text)).stdout)}
    assert sorted(docs) == ["Role", "RoleBinding", "Workflow"]
    assert docs["RoleBinding"]["subjects"][0]["name"] == "trainer"
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "patch"]} in docs["Role"]["rules"]
    kubernetes_validate.validate(docs["Role"], KUBERNETES_VERSION, strict=True)
