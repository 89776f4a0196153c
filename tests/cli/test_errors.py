"""One error root and one reporter: every error a user can cause is a TorchdagError, and a
bug in torchdag is one line that says so, exit status 70, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import EXAMPLE, REPO
from testbed.localrun.errors import LocalRunError
from torchdag import cli, errors, pipeline
from torchdag.errors import ValuesError
from torchdag.render import RenderBug, TooLarge


def test_every_error_a_user_can_cause_is_a_torchdag_error():
    for kind in (ValuesError, TooLarge, errors.CannotWrite, LocalRunError, errors.InternalBug, RenderBug):
        assert issubclass(kind, errors.TorchdagError), kind
    assert not issubclass(errors.CannotWrite, OSError)


def _one_bug_line(stderr: str, prog: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"{prog}: internal bug (not a problem with your values; please report it): "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("argv, prog", [([str(EXAMPLE)], "render.py"), (["check", str(EXAMPLE)], "torchdag check"),
                                        (["render", str(EXAMPLE), "--summary"], "torchdag render")])
def test_a_forced_internal_error_is_one_line_and_exit_70(monkeypatch, capsys, argv, prog):
    def broken_plan(values):
        raise KeyError("shapes\nsecond line")

    monkeypatch.setattr(pipeline, "make_plan", broken_plan)
    status = cli.main(argv) if prog == "render.py" else cli.torchdag_main(argv)
    captured = capsys.readouterr()
    assert status == errors.EXIT_BUG == 70 and captured.out == ""
    assert _one_bug_line(captured.err, prog).endswith("KeyError: 'shapes\\nsecond line'")


def test_a_template_bug_is_reported_as_a_bug(monkeypatch, capsys):
    from torchdag import render

    monkeypatch.setattr(pipeline, "render", lambda plan,
                        source: render.check_documents("a: ["))  # what a broken template prints
    assert cli.main([str(EXAMPLE)]) == 70
    assert "the rendered YAML does not parse" in _one_bug_line(capsys.readouterr().err, "render.py")


def test_smoke_reports_a_bug_the_same_way(monkeypatch, capsys):
    import testbed.localrun.cli as localrun_cli

    def broken_plan(plan, options, only=()):
        raise AttributeError("'NoneType' object has no attribute 'nodes'")

    monkeypatch.setattr(localrun_cli, "prepare_job", broken_plan)
    prog = "python -m testbed.localrun"  # what testbed/localrun/__main__.py runs
    argv = [str(REPO / "examples" / "local.yaml"), "--dry-run"]
    assert errors.run_command(lambda: localrun_cli.main(argv), prog) == 70
    _one_bug_line(capsys.readouterr().err, prog)


def test_render_py_process_exits_70_with_one_line():
    """The real process: the interpreter's own traceback printer never runs."""
    code = ("import sys, torchdag.pipeline as p\n"
            "def bug(values): raise ZeroDivisionError('division by zero')\n"
            "p.make_plan = bug\n"
            "from torchdag.cli import main\n"
            f"sys.exit(main([{str(EXAMPLE)!r}]))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 70 and result.stdout == ""
    _one_bug_line(result.stderr, "render.py")


def test_traceback_on_request(monkeypatch, capsys):
    monkeypatch.setenv("TORCHDAG_TRACEBACK", "1")
    assert errors.run_command(lambda: 1 // 0, "tool") == 70
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("tool: internal bug")


def test_run_command_reports_user_errors_with_their_status(capsys):
    def invalid():
        raise ValuesError("v.yaml", [])

    assert errors.run_command(lambda: 0, "tool") == 0
    assert errors.run_command(invalid, "tool") == 2
    assert errors.run_command(lambda: (_ for _ in ()).throw(errors.CannotWrite("tool", "out.yaml", "disk full")),
                              "tool") == 1
    assert capsys.readouterr().err == "tool: cannot write out.yaml: disk full\n"
