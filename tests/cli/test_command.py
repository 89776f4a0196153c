"""The `torchdag` command (torchdag/command.py): render, check, smoke, --version.

Run in-process against the checkout; tests/cli/test_packaging.py runs the installed console script.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

import torchdag
from helpers import REPO
from torchdag import cli, command

EXAMPLE = "examples/cluster.yaml"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def bad_values(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text((REPO / EXAMPLE).read_text().replace("nic: enp11s0f0", "nic: enp11s0f0x123456"))
    return path


def run_render_py(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "render.py", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_version(capsys):
    assert command.main(["--version"]) == 0
    assert capsys.readouterr().out == f"torchdag {torchdag.__version__}\n"
    assert command.main(["-V"]) == 0


def test_help_names_every_command(capsys):
    assert command.main(["--help"]) == 0
    out = capsys.readouterr().out
    for line in ("torchdag render FILE [-f FILE]... [-o OUT] [--check] [--summary [--short]] [-q]",
                 "torchdag check FILE", "torchdag smoke FILE",
                 "torchdag --version"):
        assert line in out


@pytest.mark.parametrize("argv, message", [
    ([], "a command is required"),
    (["rendr", EXAMPLE], "unknown command 'rendr'"),
])
def test_usage_errors_exit_2(capsys, argv, message):
    assert command.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: torchdag render FILE")
    assert message in err


def test_render_to_stdout_is_render_py(capsys):
    assert command.main(["render", EXAMPLE]) == 0
    ours = capsys.readouterr()
    theirs = run_render_py(EXAMPLE)
    assert theirs.returncode == 0, theirs.stderr
    assert ours.out == theirs.stdout
    assert ours.err == theirs.stderr


def test_render_to_file_is_render_py(tmp_path):
    assert command.main(["render", EXAMPLE, "-o", str(tmp_path / "a" / "workflow.yaml"), "-q"]) == 0
    theirs = run_render_py(EXAMPLE, "-o", str(tmp_path / "b.yaml"))
    assert theirs.returncode == 0, theirs.stderr
    assert (tmp_path / "a" / "workflow.yaml").read_bytes() == (tmp_path / "b.yaml").read_bytes()


def test_render_check_and_check(capsys, tmp_path):
    assert command.main(["render", EXAMPLE, "--check"]) == 0
    assert command.main(["check", EXAMPLE]) == 0
    assert capsys.readouterr().out == ""
    bad = bad_values(tmp_path)
    theirs = run_render_py("--check", str(bad))
    assert theirs.returncode == 2
    for argv in (["check", str(bad)], ["render", "--check", str(bad)], ["render", str(bad)]):
        assert command.main(argv) == theirs.returncode
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == theirs.stderr
        assert "is longer than 15 characters" in captured.err


def test_render_usage_error_is_argparse_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        command.main(["render"])
    assert exit_info.value.code == 2
    assert "the following arguments are required: values" in capsys.readouterr().err


def test_render_help_is_cli_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        command.main(["render", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--output" in out and "--check" in out and "--quiet" in out


def test_subcommands_name_themselves_when_the_entry_point_takes_prog():
    seen = []

    def with_prog(argv, prog="x"):
        seen.append((argv, prog))
        return 3

    def without_prog(argv):
        seen.append((argv, None))

    assert command._call(with_prog, ["a"], "torchdag render") == 3
    assert command._call(without_prog, ["b"], "torchdag render") == 0
    assert seen == [(["a"], "torchdag render"), (["b"], None)]


def test_check_passes_its_arguments_to_the_check_entry(monkeypatch):
    calls = []
    monkeypatch.setattr(cli, "check_main", lambda argv=None: calls.append(argv) or 0)
    assert command.main(["check", EXAMPLE, "-q"]) == 0
    assert calls == [[EXAMPLE, "-q"]]


def test_smoke_delegates_to_localrun_main_untouched(monkeypatch):
    calls = []
    fake = types.ModuleType("testbed.localrun")
    fake.main = lambda argv=None: calls.append(argv) or 7
    monkeypatch.setitem(sys.modules, "testbed.localrun", fake)
    monkeypatch.setattr(torchdag, "localrun", fake, raising=False)
    argv = ["examples/local.yaml", "--cpu", "--map", "/code=/tmp/x y", "--", "-x"]
    assert command.main(["smoke", *argv]) == 7
    assert calls == [argv]


def test_smoke_runs_the_local_runner(capsys):
    """The real runner, as far as --dry-run goes (no processes started)."""
    assert command.main(["smoke", "examples/local.yaml", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "node-0" in out and "node-1" in out


def test_render_does_not_load_the_local_runner(tmp_path):
    """`torchdag render` imports neither torch nor testbed.localrun (a fresh interpreter)."""
    code = (
        "import sys; from torchdag.command import main\n"
        f"status = main(['render', {EXAMPLE!r}, '-o', {str(tmp_path / 'w.yaml')!r}])\n"
        "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'testbed.localrun')))\n"
        "print(status, loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0 []\n"
