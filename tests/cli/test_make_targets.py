"""The Makefile's front: `make help` lists every target in one column, and `make helm` prints
the chart's Workflow for VALUES as `make render` writes render.py's (the same spec)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

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


def test_make_render_asks_for_the_python_pyproject_requires(tmp_path):
    """On a host whose python3 is older (Kylin V10's 3.7), one line says what to do instead of
    pip failing deep inside. The interpreter is a stand-in that answers as python3.7 does to
    the one question make asks it (its version); nothing else of it is run."""
    import tomllib

    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert re.search(r"^RENDER_PYTHON_MIN := (\S+)$", (REPO / "Makefile").read_text(), re.M)[1] == \
        requires.removeprefix(">=")
    old = tmp_path / "python3.7"
    old.write_text("#!/bin/sh\n[ \"$1\" = -c ] && { echo 3.7; exit 0; }\necho 'Python 3.7.9'\n")
    old.chmod(0o755)
    venv = tmp_path / "venv"
    for python, says in ((old, "is 3.7"), (tmp_path / "no-python3", "is not found")):
        done = make("render", f"PYTHON_SYS={python}", f"RENDER_VENV={venv}", f"OUT={tmp_path}")
        assert done.returncode != 0 and done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
        assert f"render needs Python {requires.removeprefix('>=')} or later, and {python} {says}" in done.stderr
        assert "helm template NAME chart -f examples/cluster.yaml (make helm)" in done.stderr
        assert not venv.exists()


def test_render_py_on_an_older_python_says_so_in_one_line():
    code = ("import runpy, sys; sys.version_info = (3, 9, 16, 'final', 0); sys.argv = ['render.py', 'x.yaml']; "
            "runpy.run_path('render.py', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("render.py needs Python 3.11 or later, and this is 3.9: ") and \
        done.stderr.count("\n") == 1
