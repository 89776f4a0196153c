"""The command line does what a user expects. `check -o` is refused with
a line saying why; `-` reads standard input; several values files (`FILE -f FILE`, Helm's
habit) are merged as Helm merges them, and each problem is reported in the file its field
came from; the help texts name every option; the schema's key rules say what is allowed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from chart_helpers import helm_template, spec_text
from cli_helpers import BASE, REPO, render_py, write
from torchdag import cli, pipeline
from torchdag.values import blame

SITE = "port: 29400\nenv: {SITE: b}\nnodes:\n  - {name: 10.1.0.1, nic: eth0, master: true}\n  - {name: 10.1.0.2}\n"


# --- check -o --------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, fragment", [
    (["check", "FILE", "-o", "OUT"], "check writes nothing, so -o has no file to write: use render FILE -o OUT"),
    (["render", "FILE", "--check", "-o", "OUT"], "--check writes nothing, so -o would write no file: drop --check"),
    (["check", "FILE", "--summary"], "unrecognized arguments: --summary"),
])
def test_check_with_an_output_is_refused_saying_why(argv, fragment, tmp_path, capsys):
    values, out = write(tmp_path, BASE), tmp_path / "out.yaml"
    argv = [str(values) if word == "FILE" else str(out) if word == "OUT" else word for word in argv]
    with pytest.raises(SystemExit) as exited:
        cli.torchdag_main(argv)
    assert exited.value.code == 2 and fragment in capsys.readouterr().err
    assert not out.exists()


def test_render_py_refuses_check_with_an_output_too(tmp_path):
    done = render_py(str(write(tmp_path, BASE)), "--check", "-o", str(tmp_path / "out.yaml"))
    assert done.returncode == 2 and "--check writes nothing" in done.stderr and "Traceback" not in done.stderr


# --- standard input ------------------------------------------------------------------------------

def test_a_dash_reads_standard_input(tmp_path):
    done = render_py("-", input=BASE)
    assert done.returncode == 0, done.stderr
    assert done.stdout == pipeline.run(write(tmp_path, BASE)).text


def test_standard_input_is_named_in_messages():
    done = render_py("-", "--check", input=BASE.replace("port: 25195", "port: 0"))
    assert done.returncode == 2
    assert done.stderr == "<stdin>: port: must be at least 1, got 0 (allowed: 1-65535)\n"


def test_standard_input_under_torchdag_check():
    done = subprocess.run([sys.executable, "-m", "torchdag", "check", "-"], input="name: [", text=True,
                          capture_output=True, cwd=REPO, timeout=30)
    assert done.returncode == 2 and done.stderr.startswith("<stdin>: (top level): not valid YAML at line ")


# --- several values files ---------------------------------------------------------------------

def test_several_files_merge_as_helm_merges_them(helm, tmp_path):
    base, site = write(tmp_path, BASE + "env: {BASE: a}\n"), write(tmp_path, SITE, "site.yaml")
    done = render_py(str(base), "-f", str(site))
    assert done.returncode == 0, done.stderr
    result = helm_template(helm, base, "-f", str(site))
    assert result.returncode == 0, result.stderr
    assert spec_text(done.stdout) == spec_text(result.stdout[result.stdout.index("# Source: torchdag/templates/wor"):])
    assert '"--master_port=29400"' in done.stdout and '"BASE"' in done.stdout and '"SITE"' in done.stdout
    assert "10.1.0.2" in done.stdout and "192.168.110.23" not in done.stdout  # a list is replaced whole
    assert render_py(str(base), str(site)).stdout == done.stdout  # several FILE arguments: the same
    assert render_py("-f", str(base), "-f", str(site)).stdout == done.stdout


def test_each_problem_is_reported_in_the_file_its_field_came_from(tmp_path):
    base = write(tmp_path, BASE.replace("script: /code/rl/BladeTrain.py\n", "") + "env: {A: x}\n")
    site = write(tmp_path, "port: 0\nenv: {B: 1}\nnodes: [{name: a, nic: 'x y'}]\n", "site.yaml")
    done = render_py(str(base), "-f", str(site), "--check")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"{site}: env.B: must be a string, got integer 1",
        f"{site}: nodes[0].nic: 'x y' is not an interface name: letters, digits, '_', '.' and '-', starting with "
        "a letter or digit",
        f"{site}: port: must be at least 1, got 0 (allowed: 1-65535)",
        f"{base}: script: is required",
    ]


def test_a_file_that_cannot_be_read_is_named(tmp_path):
    done = render_py(str(write(tmp_path, BASE)), "-f", str(tmp_path / "missing.yaml"), "--check")
    assert done.returncode == 2 and done.stderr == f"{tmp_path / 'missing.yaml'}: (top level): no such file\n"


def test_blame_follows_the_merge():
    files = [("a", {"m": {"x": 1, "l": [1, 2]}, "s": 1}), ("b", {"m": {"y": 2}, "s": {"k": 1}}), ("c", {"m": 5})]
    assert blame(files[:2], ("m", "x")) == "a"  # b's mapping merged with a's; x is a's
    assert blame(files[:2], ("m", "y")) == "b"
    assert blame(files[:2], ("m", "l", 1)) == "a"
    assert blame(files[:2], ("s", "k")) == "b"  # b replaced a's scalar
    assert blame(files, ("m",)) == "c"  # c's scalar replaced both mappings
    assert blame(files, ("m", "x")) == "c"
    assert blame(files[:2], ("m", "z")) == "b"  # a missing key: the last file that reaches its parent
    assert blame(files, ("image",)) == "a"  # a missing top-level key: the first file


def test_standard_input_once_only(tmp_path):
    done = render_py("-", "-f", "-", input=BASE)
    assert done.returncode == 2 and "standard input (-) can be read once only" in done.stderr


def test_no_file_is_a_usage_error():
    done = render_py()
    assert done.returncode == 2 and "required: values (FILE, - for standard input, or -f FILE)" in done.stderr


# --- help -----------------------------------------------------------------------------------------

def test_the_help_names_every_option(capsys):
    assert cli.torchdag_main(["--help"]) == 0
    out = capsys.readouterr().out
    for word in ("--summary", "--short", "-f FILE", "- reads standard input", "--check", "-q"):
        assert word in out, word
    with pytest.raises(SystemExit):
        cli.torchdag_main(["check", "--help"])
    out = capsys.readouterr().out
    assert "--check" not in out and "--output" not in out and "--summary" not in out
    assert "Validate a torchdag values file" in out and "--values FILE" in out


# --- what helm says of a bad key -----------------------------------------------------------------

def test_helm_names_the_map_and_the_allowed_keys_of_a_bad_env_name(helm, tmp_path):
    values = write(tmp_path, BASE + "env: {1BAD: x}\n")
    result = helm_template(helm, values)
    assert result.returncode != 0
    assert "'1BAD' does not match pattern '^[A-Za-z_][A-Za-z0-9_]*$'" in result.stderr, result.stderr
