"""The `torchdag` command (torchdag/cli.py, SUBCOMMANDS): render, check, --version.

Run in-process against the checkout; tests/cli/test_packaging.py runs the installed console script.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import torchdag
from helpers import REPO
from torchdag import cli

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
    assert cli.torchdag_main(["--version"]) == 0
    assert capsys.readouterr().out == f"torchdag {torchdag.__version__}\n"
    assert cli.torchdag_main(["-V"]) == 0


def test_help_names_every_command(capsys):
    assert cli.torchdag_main(["--help"]) == 0
    out = capsys.readouterr().out
    for line in ("torchdag render FILE [-f FILE]... [-o OUT] [--check] [--summary [--short]] [-q]",
                 "torchdag check FILE",
                 "torchdag --version"):
        assert line in out


@pytest.mark.parametrize("argv, message", [
    ([], "a command is required"),
    (["rendr", EXAMPLE], "unknown command 'rendr'"),
])
def test_usage_errors_exit_2(capsys, argv, message):
    assert cli.torchdag_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: torchdag render FILE")
    assert message in err


def test_render_to_stdout_is_render_py(capsys):
    assert cli.torchdag_main(["render", EXAMPLE]) == 0
    ours = capsys.readouterr()
    theirs = run_render_py(EXAMPLE)
    assert theirs.returncode == 0, theirs.stderr
    assert ours.out == theirs.stdout
    assert ours.err == theirs.stderr


def test_render_to_file_is_render_py(tmp_path):
    assert cli.torchdag_main(["render", EXAMPLE, "-o", str(tmp_path / "a" / "workflow.yaml"), "-q"]) == 0
    theirs = run_render_py(EXAMPLE, "-o", str(tmp_path / "b.yaml"))
    assert theirs.returncode == 0, theirs.stderr
    assert (tmp_path / "a" / "workflow.yaml").read_bytes() == (tmp_path / "b.yaml").read_bytes()


def test_render_check_and_check(capsys, tmp_path):
    assert cli.torchdag_main(["render", EXAMPLE, "--check"]) == 0
    assert cli.torchdag_main(["check", EXAMPLE]) == 0
    assert capsys.readouterr().out == ""
    bad = bad_values(tmp_path)
    theirs = run_render_py("--check", str(bad))
    assert theirs.returncode == 2
    for argv in (["check", str(bad)], ["render", "--check", str(bad)], ["render", str(bad)]):
        assert cli.torchdag_main(argv) == theirs.returncode
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == theirs.stderr
        assert "is longer than 15 characters" in captured.err


def test_render_usage_error_is_argparse_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.torchdag_main(["render"])
    assert exit_info.value.code == 2
    assert "the following arguments are required: values" in capsys.readouterr().err


def test_render_help_is_cli_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.torchdag_main(["render", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--output" in out and "--check" in out and "--quiet" in out


def test_each_subcommand_gets_its_arguments_untouched_and_its_name(monkeypatch):
    calls = []
    table = tuple(cli.Subcommand(c.name, c.usage, c.summary, lambda argv, prog: calls.append((argv, prog)) or 3)
                  for c in cli.SUBCOMMANDS)
    monkeypatch.setattr(cli, "SUBCOMMANDS", table)
    assert cli.torchdag_main(["check", EXAMPLE, "-q"]) == 3
    assert cli.torchdag_main(["render", "--", "-x"]) == 3
    assert calls == [([EXAMPLE, "-q"], "torchdag check"), (["--", "-x"], "torchdag render")]


def test_every_subcommand_is_in_the_usage_and_the_help(capsys):
    assert cli.torchdag_main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in cli.SUBCOMMANDS:
        assert f"torchdag {command.name} {command.usage}\n" in out
        assert f"  {command.name} " in out.split("commands:")[1]


def test_render_does_not_load_the_local_runner(tmp_path):
    """`torchdag render` imports neither torch nor the test bed (a fresh interpreter)."""
    code = (
        "import sys; from torchdag.cli import torchdag_main as main\n"
        f"status = main(['render', {EXAMPLE!r}, '-o', {str(tmp_path / 'w.yaml')!r}])\n"
        "loaded = sorted(m for m in sys.modules if m in ('torch', 'testbed') or m.startswith(('torch.', 'testbed.')))\n"
        "print(status, loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0 []\n"
