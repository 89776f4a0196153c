"""Running `helm template` on chart/ and reading what it prints, for the chart's tests."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import yaml

from helpers import REPO

CHART = REPO / "chart"
RELEASE = "t"
ARGO_KINDS = ("Workflow", "WorkflowTemplate")
# Every values file render.py's golden tests cover, and chart-testing's values files.
VALUES_FILES = (sorted((REPO / "examples").glob("*.yaml")) + sorted((REPO / "tests" / "cases").glob("*.yaml"))
                + sorted((CHART / "ci").glob("*-values.yaml")))  # chart-testing's values files

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def helm_template(helm: str, values: Path | str, *extra: str, release: str = RELEASE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [helm, "template", release, str(CHART), "-f", str(values), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def documents(text: str) -> list[dict]:
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc is not None]


def argo_document(text: str) -> dict:
    """The one Workflow or WorkflowTemplate among the rendered documents."""
    found = [doc for doc in documents(text) if doc.get("kind") in ARGO_KINDS]
    assert len(found) == 1, f"expected one Workflow/WorkflowTemplate, got {[d.get('kind') for d in documents(text)]}"
    return found[0]


def chart_workflow(helm: str, values: Path | str, *extra: str) -> dict:
    result = helm_template(helm, values, *extra)
    assert result.returncode == 0, f"helm template failed for {values}:\n{result.stderr}"
    return argo_document(result.stdout)


# The chart's debug template (chart/templates/plan.yaml): printed only for this API version.
PLAN_API_VERSION = "torchdag.io/plan"
PLAN_TEMPLATE = "templates/plan.yaml"


def chart_plan(helm: str, values: Path | str) -> subprocess.CompletedProcess:
    """`helm template ... --api-versions torchdag.io/plan --show-only templates/plan.yaml`: the
    chart's typed Plan, the twin of `torchdag plan FILE --json` (read it with plan_json)."""
    return helm_template(helm, values, "--api-versions", PLAN_API_VERSION, "--show-only", PLAN_TEMPLATE)


def plan_json(stdout: str) -> dict:
    """The JSON object helm prints after its `---` and `# Source:` lines."""
    head, source, body = stdout.split("\n", 2)
    assert (head, source) == ("---", f"# Source: torchdag/{PLAN_TEMPLATE}"), stdout[:200]
    return json.loads(body)


def render_py_workflow(values: Path | str) -> dict:
    from torchdag import pipeline

    return argo_document(pipeline.run(values).text)


def helm_spellings(field: str) -> list[str]:
    """How helm's schema errors can name a field render.py calls e.g. `nodes[2].nic`:
    as a JSON pointer (`at '/nodes/2/nic'`), or, for errors about a key (unknown, missing,
    bad name), as the enclosing object plus the quoted key (`at '/nodes/2': ... 'nic'`); a key
    with '/' in it as RFC 6901 writes it (`at '/labels/torchdag.io~1x'`).
    For a bad key name (propertyNames) helm v4 reports the location as '' whatever the
    object, so there only `invalid propertyName 'KEY'` names it."""
    # render.py writes plain keys as `.key`, indexes as `[2]` and other keys as `['a b']`
    parts = [plain or index or ast.literal_eval(quoted)
             for plain, index,
             quoted in re.findall(r"\.?([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[('(?:[^'\\]|\\.)*')\]", field)]
    pointer = "/" + "/".join(parts)
    parent = "/" + "/".join(parts[:-1]) if len(parts) > 1 else ""
    key = parts[-1]
    escaped = "/" + "/".join(part.replace("~", "~0").replace("/", "~1") for part in parts)  # RFC 6901
    return [
        field,
        f"at '{pointer}'",
        f"at '{escaped}'",
        f"at '{parent}': additional properties '{key}' not allowed",
        f"at '{parent}': missing property '{key}'",
        f"invalid propertyName '{key}'",
    ]


def spec_text(rendered: str) -> str:
    """The Workflow's `spec:` block as printed: from its line to the end of the document."""
    start = rendered.index("\nspec:\n") + 1
    end = rendered.find("\n---", start)
    return rendered[start:] if end < 0 else rendered[start:end + 1]


def assert_same_workflow(helm: str, values: Path) -> None:
    """The spec is the same text, byte for byte (a reviewer can diff the two outputs);
    outside it only what Helm adds differs. One helm run and one render per values file."""
    from torchdag import pipeline

    result = helm_template(helm, values)
    assert result.returncode == 0, f"helm template failed for {values}:\n{result.stderr}"
    workflow_source = result.stdout[result.stdout.index("# Source: torchdag/templates/workflow.yaml"):]
    rendered = pipeline.run(values).text
    assert spec_text(workflow_source) == spec_text(rendered)
    ours, theirs = argo_document(result.stdout), argo_document(rendered)
    assert ours["kind"] == theirs["kind"]
    # Outside spec only the name differs (helm names it after the release; render.py
    # leaves generateName to Argo) and helm adds its standard labels.
    assert ours["metadata"]["name"] == RELEASE
    assert theirs["metadata"]["labels"].items() <= ours["metadata"]["labels"].items()
    assert ours["metadata"].get("annotations") == theirs["metadata"].get("annotations")
    if "namespace" in theirs["metadata"]:
        assert ours["metadata"]["namespace"] == theirs["metadata"]["namespace"]
