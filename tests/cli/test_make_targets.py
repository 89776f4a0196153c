"""The Makefile's front: `make help` lists every target in one column, and `make helm` prints
the chart's Workflow for VALUES as `make render` writes render.py's (the same spec)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from chart_helpers import spec_text
from helpers import EXAMPLES_DIR, REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_help_lists_every_documented_target_in_one_column():
    documented = re.findall(r"^([a-z0-9-]+):.*## ", (REPO / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    lines = make("help").stdout.splitlines()
    assert [line.split()[0] for line in lines] == documented
    columns = {len(line) - len(line[len(name):].lstrip()) for line, name in zip(lines, documented)}
    assert len(columns) == 1, lines  # every description starts at the same column
    assert columns.pop() == max(map(len, documented)) + 2
    assert "helm" in documented


def test_make_helm_prints_the_charts_workflow_with_render_pys_spec(helm):
    from torchdag import pipeline

    values = EXAMPLES_DIR / "cpu.yaml"
    done = make("helm", f"VALUES={values}", f"HELM={helm}", "RELEASE=train")
    assert done.returncode == 0, done.stderr
    workflow = done.stdout[done.stdout.index("# Source: torchdag/templates/workflow.yaml"):]
    assert "\nkind: Workflow\n" in workflow and '\n  name: "train"\n' in workflow
    assert spec_text(workflow) == spec_text(pipeline.run(values).text)


def test_make_helm_refuses_what_the_chart_refuses(helm, tmp_path):
    values = tmp_path / "bad.yaml"
    values.write_text((EXAMPLES_DIR / "cpu.yaml").read_text(encoding="utf-8") + "scheduling: {queue: q}\n")
    done = make("helm", f"VALUES={values}", f"HELM={helm}")
    assert done.returncode != 0 and "at '/scheduling/queue'" in done.stderr, done.stderr
