"""The feature matrix (tests/feature_matrix.py) through the real tools: Argo's own validator
(v4, the release the cluster runs) takes every Workflow render.py accepts, and the chart
prints the same spec, or refuses the same combinations with the same lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from feature_matrix import CASES, outcome, values_file

from chart_helpers import assert_same_workflow, helm_template

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("matrix"))


@pytest.fixture(scope="module")
def argolint_v4() -> str:
    for candidate in (os.environ.get("ARGOLINT"), str(REPO / ".tools" / "bin" / "argolint")):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("argolint is not built: run the tests through `make test` (or `make go-tools`)")


@pytest.mark.go
def test_argo_lint_v4_takes_every_accepted_combination(argolint_v4, folder, tmp_path):
    """One argolint run over every accepted case's Workflow (the validator's start-up is most of its cost)."""
    import subprocess

    files = []
    for case in CASES:
        done = outcome(case, folder)
        if done.text is not None:
            files.append(tmp_path / f"{case.id}.workflow.yaml")
            files[-1].write_text(done.text, encoding="utf-8")
    assert len(files) >= len(CASES) // 2
    result = subprocess.run([argolint_v4, *map(str, files)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout == "", f"Argo refused:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_chart_prints_the_same_spec_or_refuses_the_same(helm, case, folder):
    done, path = outcome(case, folder), values_file(case, folder)
    if done.text is not None:
        assert_same_workflow(helm, path)
        return
    result = helm_template(helm, path)
    assert result.returncode != 0
    for field, message in done.refused:
        assert f"{field}: {message}" in result.stderr, result.stderr


@pytest.mark.parametrize("case", [c for c in CASES if c.machines == "3"], ids=lambda c: c.id)
def test_the_charts_role_grants_what_the_render_header_tells_the_user_to_apply(helm, case, folder):
    """One source of the rights a job needs (catalogue `rbac`): the docs' Role files the header's
    `rbac:` line names hold the rules the chart's rbac.create Role grants, no more, no less."""
    import re

    import yaml

    from chart_helpers import documents

    done, path = outcome(case, folder), values_file(case, folder)
    (line,) = [line for line in done.text.splitlines() if line.startswith("# rbac: ")]
    files = re.fullmatch(r"# rbac: kubectl apply -n <namespace> -f (\S+)", line).group(1).split(",")
    assert files[0] == "docs/rbac/job.yaml"
    wanted = [rule for name in files for doc in yaml.safe_load_all((REPO / name).read_text(encoding="utf-8"))
              if doc["kind"] == "Role" for rule in doc["rules"]]
    result = helm_template(helm, path, "--set", "rbac.create=true", "--set", "serviceAccountName=trainer")
    assert result.returncode == 0, result.stderr
    (role,) = [doc for doc in documents(result.stdout) if doc["kind"] == "Role"]
    assert role["rules"] == wanted
