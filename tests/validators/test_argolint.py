"""Argo's own validator holds every Workflow torchdag writes.

`argolint` (tools/argo, tools/argo-v3) is the code behind `argo lint --offline --strict`,
built from Argo's modules at the pinned releases (v4 and the newest v3). It checks what
the schema-based checks of test_render.py cannot: that every DAG task names a template
that exists, that every `{{...}}` is in scope where it is used, `depends` expressions,
duplicate mount paths, resource manifests, names.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from plain_yaml import MixedDumper
from test_chart_parity import values_strategy

from chart_helpers import VALUES_FILES, helm_template

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.go  # the Go-built tools under .tools/bin
GOLDEN_FILES = sorted((REPO / "tests" / "golden").glob("*/*.yaml"))
LINTERS = {"v4": ("ARGOLINT", "argolint"), "v3": ("ARGOLINT_V3", "argolint-v3")}


@pytest.fixture(scope="session", params=sorted(LINTERS))
def argolint(request) -> str:
    """Each Argo release line's validator, as `make` built it into .tools/bin."""
    variable, name = LINTERS[request.param]
    for candidate in (os.environ.get(variable), str(REPO / ".tools" / "bin" / name)):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail(f"{name} is not built: run the tests through `make test` (or `make go-tools`), which builds it with Go")


def lint(argolint: str, *files: Path | str) -> subprocess.CompletedProcess:
    return subprocess.run([argolint, *map(str, files)], capture_output=True, text=True, timeout=120)


def assert_valid(argolint: str, *files: Path | str) -> None:
    result = lint(argolint, *files)
    assert result.returncode == 0 and result.stdout == "", f"Argo refused:\n{result.stdout}{result.stderr}"


def test_reports_its_argo_release(argolint):
    version = subprocess.run([argolint, "--version"], capture_output=True, text=True, check=True).stdout
    module = "v3" if argolint.endswith("-v3") else "v4"
    pinned = (REPO / "tools" / ("argo-v3" if module == "v3" else "argo") / "go.mod").read_text(encoding="utf-8")
    release = next(line.split()[1] for line in pinned.splitlines()
                   if line.strip().startswith(f"github.com/argoproj/argo-workflows/{module} "))
    assert version == f"argolint (Argo Workflows {release})\n"


def test_every_golden_file_is_valid(argolint):
    assert GOLDEN_FILES, "no golden files found"
    assert_valid(argolint, *GOLDEN_FILES)


def test_every_example_and_case_rendered_by_both_renderers_is_valid(argolint, helm, tmp_path):
    from torchdag import pipeline

    files = []
    for index, values in enumerate(VALUES_FILES):
        ours = tmp_path / f"{index}-render.yaml"
        ours.write_text(pipeline.run(values).text, encoding="utf-8")
        chart = helm_template(helm, values)
        assert chart.returncode == 0, chart.stderr
        theirs = tmp_path / f"{index}-helm.yaml"
        theirs.write_text(chart.stdout, encoding="utf-8")
        files += [ours, theirs]
    assert_valid(argolint, *files)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                   HealthCheck.function_scoped_fixture])
@given(values=values_strategy())
def test_random_values_render_workflows_argo_accepts(argolint, helm, values):
    """A sample of the chart-parity property test's values files: what both renderers
    print, Argo's validator takes."""
    import yaml

    from torchdag import pipeline

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "values.yaml"
        text = yaml.dump(values, Dumper=MixedDumper, allow_unicode=True, width=2**20, sort_keys=False)
        path.write_text(text, encoding="utf-8")
        ours = Path(folder) / "render.yaml"
        ours.write_text(pipeline.run(path).text, encoding="utf-8")
        chart = helm_template(helm, path)
        assert chart.returncode == 0, chart.stderr
        theirs = Path(folder) / "helm.yaml"
        theirs.write_text(chart.stdout, encoding="utf-8")
        assert_valid(argolint, ours, theirs)


# --- The check can fail: Workflows only Argo's semantic checks refuse --------------------

HEAD = """apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: job-
spec:
  entrypoint: train
  templates:
"""
NODE_TEMPLATE = """  - name: node
    inputs:
      parameters:
      - name: rank
    container:
      image: busybox
      args: ["{{inputs.parameters.rank}}"]
"""


def task(name: str, rank: str = "'0'", template: str = "node", extra: str = "") -> str:
    """A DAG task passing `rank` (and whatever `extra` adds) to its template."""
    return f"{{name: {name}, template: {template}{extra}, arguments: {{parameters: [{{name: rank, value: {rank}}}]}}}}"


def dag(*tasks: str) -> str:
    return "  - name: train\n    dag:\n      tasks:\n" + "".join(f"      - {task}\n" for task in tasks)


SEMANTIC_ERRORS = {
    "missing template": (
        HEAD + dag(task("node-0", template="node-0")) + NODE_TEMPLATE,
        "template name 'node-0' undefined",
    ),
    "undeclared input parameter": (
        HEAD + dag(task("node-0"))
        + NODE_TEMPLATE.replace('args: ["{{inputs.parameters.rank}}"]', 'args: ["{{inputs.parameters.y}}"]'),
        "failed to resolve {{inputs.parameters.y}}",
    ),
    "undeclared workflow parameter": (
        HEAD + dag(task("node-0", rank="'{{workflow.parameters.rank}}'")) + NODE_TEMPLATE,
        "failed to resolve {{workflow.parameters.rank}}",
    ),
    "output of a task that is not a dependency": (
        HEAD + dag(task("node-0"), task("node-1", rank="'{{tasks.node-0.outputs.result}}'")) + NODE_TEMPLATE,
        "missing dependency 'node-0'",
    ),
    "depends on a task that does not exist": (
        HEAD + dag(task("node-0", extra=", depends: gang"))
        + NODE_TEMPLATE,
        "gang",
    ),
    "two volumes mounted at one path": (
        HEAD + dag(task("node-0"))
        + NODE_TEMPLATE + "      volumeMounts: [{name: a, mountPath: /data}, {name: b, mountPath: /data}]\n"
        + "    volumes: [{name: a, emptyDir: {}}, {name: b, emptyDir: {}}]\n",
        "already mounted",
    ),
    "argument for an input the template does not take": (
        HEAD + dag(task("node-0").replace("}]}}", "}, {name: nic, value: lo}]}}"))
        + NODE_TEMPLATE.replace('args: ["{{inputs.parameters.rank}}"]', 'args: ["{{inputs.parameters.nic}}"]'),
        "failed to resolve {{inputs.parameters.nic}}",
    ),
    "resource template with an unknown action": (
        HEAD + dag("{name: gang, template: gang}")
        + "  - name: gang\n    resource:\n      action: make\n      manifest: 'kind: PodGroup'\n",
        "resource.action must be one of",
    ),
}


@pytest.mark.parametrize("case", sorted(SEMANTIC_ERRORS))
def test_refuses_what_only_argos_semantic_checks_catch(argolint, case, tmp_path):
    text, fragment = SEMANTIC_ERRORS[case]
    path = tmp_path / "workflow.yaml"
    path.write_text(text, encoding="utf-8")
    result = lint(argolint, path)
    assert result.returncode == 1, result
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith(f"{path}: ") for line in lines), result.stdout
    assert fragment in result.stdout, result.stdout


@pytest.mark.parametrize("case", sorted(SEMANTIC_ERRORS))
def test_the_shape_checks_alone_miss_them(case):
    """hera's strict models (Argo's published schema) take each of these Workflows: they
    are wrong only in ways Argo's Go validator sees."""
    import yaml

    from argo_helpers import validate_argo

    validate_argo(yaml.safe_load(SEMANTIC_ERRORS[case][0]))


def test_usage_errors_exit_2(argolint, tmp_path):
    assert lint(argolint).returncode == 2
    assert lint(argolint, "--bogus", GOLDEN_FILES[0]).returncode == 2
    missing = lint(argolint, tmp_path / "absent.yaml")
    assert missing.returncode == 2 and "absent.yaml" in missing.stderr


def test_other_kinds_are_named_and_skipped_and_broken_yaml_is_a_problem(argolint, tmp_path):
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(GOLDEN_FILES[0].read_text(encoding="utf-8")
                     + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n", encoding="utf-8")
    result = lint(argolint, mixed)
    assert result.returncode == 0 and f"{mixed}: skipped ConfigMap/settings" in result.stderr, result
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Workflow\nspec: [\n", encoding="utf-8")
    result = lint(argolint, broken)
    assert result.returncode == 1 and result.stdout.startswith(f"{broken}: "), result
    nothing = tmp_path / "nothing.yaml"
    nothing.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", encoding="utf-8")
    result = lint(argolint, nothing)
    assert result.returncode == 1 and "no Workflow or WorkflowTemplate to lint" in result.stdout, result


def test_make_argo_lint_runs_both_releases():
    result = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "argo-lint", f"FILES={GOLDEN_FILES[0]}"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Argo Workflows v4." in result.stdout and "Argo Workflows v3." in result.stdout


def test_argo_lets_tags_of_unknown_prefixes_through(argolint, tmp_path):
    """Why torchdag refuses `{{` in every value: Argo resolves only the prefixes it knows
    and leaves `{{retries}}` outside a retrying template, or `{{foo.bar}}`, as literal
    text for the pod (docs/validators.md)."""
    path = tmp_path / "workflow.yaml"
    path.write_text(HEAD + dag(task("node-0", rank="'{{retries}}'"))
                    + NODE_TEMPLATE.replace("{{inputs.parameters.rank}}", "{{foo.bar}} {{inputs.parameters.rank}}"),
                    encoding="utf-8")
    assert_valid(argolint, path)
