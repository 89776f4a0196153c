"""Packaging: pyproject.toml builds a wheel that carries the schema and the template, installs a
`torchdag` command that writes render.py's bytes, and `make render`'s light venv has no torch.

The wheel is built offline with the venv's hatchling (requirements-fast.txt) and installed
into a new venv, with its dependencies (Jinja2, PyYAML, jsonschema, jsonschema-rs) from the package index.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import torchdag
from helpers import REPO
from torchdag import cli

EXAMPLES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "examples").glob("*.yaml"))
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def run(*argv, cwd=REPO, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def requirement_lines(path: Path) -> list[str]:
    lines = (ln.split("#")[0].strip() for ln in path.read_text().splitlines())
    return [ln for ln in lines if ln]


def normalized(requirement: str) -> str:
    name, rest = re.match(r"([A-Za-z0-9._-]+)(.*)", requirement.replace(" ", "")).groups()
    return re.sub(r"[-_.]+", "-", name).lower() + rest


def test_render_requirements_are_the_package_dependencies():
    render = sorted(normalized(r) for r in requirement_lines(REPO / "requirements-render.txt"))
    package = PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["fast"]
    assert render == sorted(normalized(r) for r in package)
    assert render == ["jinja2>=3.1", "jsonschema-rs>=0.60", "jsonschema>=4.23", "pyyaml>=6.0"]
    # each venv holds what the lighter one does: render < fast tier < everything
    assert "-r requirements-render.txt" in requirement_lines(REPO / "requirements-fast.txt")
    assert "-r requirements-fast.txt" in requirement_lines(REPO / "requirements-dev.txt")


def test_project_metadata():
    project = PYPROJECT["project"]
    assert project["scripts"] == {"torchdag": "torchdag.cli:torchdag_main"}
    assert project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "torchdag/__init__.py"
    assert PYPROJECT["build-system"]["build-backend"] == "hatchling.build"


def test_checkout_reads_schema_and_templates_where_they_are_edited():
    assert torchdag.SCHEMA_PATH == REPO / "schema" / "values.schema.json"
    assert torchdag.TEMPLATES_DIR == REPO / "templates"
    assert torchdag.SCHEMA_PATH.is_file() and (torchdag.TEMPLATES_DIR / "workflow.yaml.j2").is_file()


@pytest.mark.parametrize("target, wanted, unwanted", [
    ("render", ["requirements-render.txt", "render.py examples/cluster.yaml"],
     ["requirements-dev.txt", ".venv/", "helm"]),
    ("check", ["requirements-render.txt", "render.py --check"], ["requirements-dev.txt", ".venv/", "helm"]),
    ("test", ["-r requirements-dev.txt", "npm pack", "-m pytest -n 2 --dist loadgroup -m \"not long\" tests"], []),
    ("test-long", ["-r requirements-dev.txt", "npm pack", "-m pytest -n 2 --dist loadgroup -m long tests"], []),
    ("setup", ["-r requirements-dev.txt", "npm pack"], []),
])
def test_make_targets_use_the_right_venv(target, wanted, unwanted):
    """`make -n -B`: what a fresh clone would run, printed, not run."""
    done = run("make", "-n", "-B", target, "VALUES=examples/cluster.yaml", "OUT=/nonexistent")
    assert done.returncode == 0, done.stderr
    assert [w for w in wanted if w in done.stdout] == wanted
    assert [u for u in unwanted if u in done.stdout] == []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    done = run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
               "--disable-pip-version-check", "-w", dist, ".")
    assert done.returncode == 0, done.stderr
    (built,) = dist.glob("torchdag-*.whl")
    return built


def test_wheel_carries_schema_and_templates(wheel):
    assert wheel.name == f"torchdag-{torchdag.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        schema = (REPO / "schema" / "values.schema.json").read_bytes()
        assert zf.read("torchdag/_data/schema/values.schema.json") == schema
        for template in (REPO / "templates").iterdir():
            assert zf.read(f"torchdag/_data/templates/{template.name}") == template.read_bytes()
        info = f"torchdag-{torchdag.__version__}.dist-info"
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        metadata = zf.read(f"{info}/METADATA").decode()
    assert "torchdag = torchdag.cli:torchdag_main" in entry_points
    for dependency in PYPROJECT["project"]["dependencies"]:
        assert f"Requires-Dist: {dependency}".lower() in metadata.lower()
    assert "torchdag/__main__.py" in names and "torchdag/cli.py" in names
    assert not [n for n in names if n.startswith(("tests/", "chart/", "trainer/", "testbed/")) or "__pycache__" in n]
    assert not [n for n in names if "torch" in n and not n.startswith("torchdag")]


# issue 25: the product without its test bed; issue 39: check --cluster and the status model (+200);
# issue 41: +700 (diagnose's records +365 code lines, the recorder every Workflow carries +389);
# issue 42: +250 (the typed Plan, torchdag/plan_model.py, with the job's pod-level fields, and `torchdag plan`);
# +50 (the one device detection the helpers ship, torchdag/agents/torchdag_device.py, less the copies it replaced)
# issue 43: +100 (the scheduling watch keeps watching while the job runs: pods re-created on a lost host and
# their task results; its command line in gangargs.py), and the size guard's count that fits
WHEEL_CODE_LINES = 6_050


def code_lines(source: str) -> int:
    """Lines of Python code, as line-of-code counters count them: not blank, not only a comment,
    not part of a docstring (a module's, a class's or a function's first string)."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(1 for number, line in enumerate(source.splitlines(), 1)
               if line.strip() and not line.lstrip().startswith("#") and number not in docstrings)


def test_code_lines_skip_blanks_comments_and_docstrings():
    source = '"""Module.\n\nMore."""\n\n# why\nimport os  # os\n\n\ndef f():\n    """Doc."""\n    return 1\n'
    assert code_lines(source) == 3  # import, def, return


def test_wheel_holds_the_product_within_its_line_budget(wheel):
    """The wheel is the product (render, check, the Plan, the catalogue, status/logs/diagnose and the
    helpers a Workflow carries): no test bed, and at most WHEEL_CODE_LINES lines of code."""
    with zipfile.ZipFile(wheel) as zf:
        sources = {name: zf.read(name).decode() for name in zf.namelist() if name.endswith(".py")}
    assert not [name for name in sources if re.search(r"/(testbed|localrun|kubelet|cluster)/", name)]
    assert sum(code_lines(text) for text in sources.values()) <= WHEEL_CODE_LINES


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A new venv with the wheel (and only its dependencies) installed: its bin directory."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    done = run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert done.returncode == 0, done.stderr
    done = run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--quiet",
               "--disable-pip-version-check", wheel)
    assert done.returncode == 0, done.stderr
    return venv / "bin"


def outside_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return env


def test_installed_package_finds_its_data_outside_the_checkout(installed, tmp_path):
    code = ("import torchdag, importlib.util as u; "
            "print(torchdag.SCHEMA_PATH); print(torchdag.TEMPLATES_DIR); print(u.find_spec('torch') is None)")
    done = run(installed / "python", "-c", code, cwd=tmp_path, env=outside_env())
    assert done.returncode == 0, done.stderr
    schema, templates, no_torch = done.stdout.splitlines()
    site = installed.parent / "lib"
    assert Path(schema).is_relative_to(site) and Path(schema).name == "values.schema.json"
    assert Path(templates).is_relative_to(site) and (Path(templates) / "workflow.yaml.j2").is_file()
    assert no_torch == "True"


def test_installed_command_version(installed, tmp_path):
    done = run(installed / "torchdag", "--version", cwd=tmp_path, env=outside_env())
    assert (done.returncode, done.stdout) == (0, f"torchdag {torchdag.__version__}\n"), done.stderr


def test_installed_command_writes_render_py_bytes(installed, tmp_path, capsys):
    for example in EXAMPLES:
        name = Path(example).stem
        ours = run(installed / "torchdag", "render", REPO / example, "-o", tmp_path / f"{name}.x.yaml",
                   cwd=tmp_path, env=outside_env())
        assert ours.returncode == 0, ours.stderr
        if example == "examples/cluster.yaml":  # render.py itself once; cli.main (all render.py runs) for the rest
            theirs = run(sys.executable, "render.py", example, "-o", tmp_path / f"{name}.y.yaml")
            assert theirs.returncode == 0, theirs.stderr
            their_err = theirs.stderr
        else:
            assert cli.main([str(REPO / example), "-o", str(tmp_path / f"{name}.y.yaml")]) == 0
            their_err = capsys.readouterr().err
        assert ours.stderr == their_err
        assert (tmp_path / f"{name}.x.yaml").read_bytes() == (tmp_path / f"{name}.y.yaml").read_bytes(), example


def test_installed_command_check(installed, tmp_path):
    good = run(installed / "torchdag", "check", REPO / "examples" / "cluster.yaml", cwd=tmp_path, env=outside_env())
    assert (good.returncode, good.stdout) == (0, "")
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "examples" / "cluster.yaml").read_text().replace("port: 25195", "port: 70000"))
    ours = run(installed / "torchdag", "check", bad, cwd=tmp_path, env=outside_env())
    theirs = run(sys.executable, "render.py", "--check", bad)
    assert ours.returncode == theirs.returncode == 2
    assert ours.stderr == theirs.stderr and "port" in ours.stderr


def test_make_render_installs_no_torch(tmp_path):
    """`make render` on a fresh clone: a light venv (requirements-render.txt) and render.py's bytes."""
    venv = tmp_path / "venv-render"
    done = run("make", "render", f"RENDER_VENV={venv}", f"OUT={tmp_path / 'out'}", "VALUES=examples/cluster.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (venv / ".installed").is_file()
    probe = run(venv / "bin" / "python", "-c", "import importlib.util as u; print(u.find_spec('torch') is None)")
    assert probe.stdout == "True\n", probe.stderr
    theirs = run(sys.executable, "render.py", "examples/cluster.yaml", "-o", tmp_path / "y.yaml")
    assert theirs.returncode == 0, theirs.stderr
    assert (tmp_path / "out" / "workflow.yaml").read_bytes() == (tmp_path / "y.yaml").read_bytes()
