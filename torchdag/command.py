"""The `torchdag` command (installed by `pip install .`; see pyproject.toml).

    torchdag render FILE... [-f FILE] [-o OUT] [--check] [--summary [--short]] [-q]
                                                   what `python render.py FILE ...` does
    torchdag check FILE... [-f FILE] [-q]          validate only (render --check)
    torchdag smoke FILE [options]                  what `python -m testbed.localrun FILE ...` does
    torchdag --version

Each subcommand hands its arguments, untouched, to the module that owns them
(torchdag.cli.main, testbed.localrun.main), so options, output bytes, messages and exit
statuses are theirs. The local runner is imported only for `smoke`: rendering never loads it.
"""

from __future__ import annotations

import inspect
import sys
from typing import Callable

from . import __version__
from .errors import run_command

PROG = "torchdag"

USAGE = f"""\
usage: {PROG} render FILE [-f FILE]... [-o OUT] [--check] [--summary [--short]] [-q]
       {PROG} check FILE [-f FILE]... [-q]
       {PROG} smoke FILE [options]
       {PROG} --version
"""

HELP = USAGE + f"""
Render a torchdag values file (cluster.yaml) into an Argo Workflow, validate it, or run the
rendered DAG as local processes.

commands:
  render FILE   validate FILE and print the Workflow, or write it atomically with -o OUT;
                --check validates only, --summary prints the per-node table instead (with
                -o: writes the Workflow and prints the table), --short keeps its first and
                last rows, -q silences warnings (the same as render.py)
  check FILE    validate only: nothing on stdout, one line per problem on stderr, exit 2
  smoke FILE    run the rendered DAG as local processes (needs torch in this environment;
                see docs/smoke.md; the same as python -m testbed.localrun)

  FILE is a values file; - reads standard input; -f FILE (repeatable) adds files merged
  over the ones before them, as helm merges its -f files (mappings key by key, lists and
  other values replaced).

options:
  -h, --help     show this help; `{PROG} COMMAND --help` shows a command's options
  -V, --version  print the version and exit

Exit status: 0 ok, 2 invalid values or usage, 1 the output could not be written,
70 a bug in torchdag (smoke: see docs/smoke.md).
"""


def _call(entry: Callable[..., int], argv: list[str], prog: str) -> int:
    """entry(argv), naming the subcommand in its messages when entry accepts a `prog`."""
    try:
        takes_prog = "prog" in inspect.signature(entry).parameters
    except (TypeError, ValueError):
        takes_prog = False
    status = entry(argv, prog=prog) if takes_prog else entry(argv)
    return 0 if status is None else int(status)


def _render(argv: list[str]) -> int:
    from .cli import main as render_main

    return _call(render_main, argv, f"{PROG} render")


def _check(argv: list[str]) -> int:
    from .cli import check_main

    return _call(check_main, argv, f"{PROG} check")


def _smoke(argv: list[str]) -> int:
    # Imported here, not at the top: `torchdag render` must not depend on the local runner.
    from testbed.localrun import main as localrun_main

    return run_command(lambda: _call(localrun_main, argv, f"{PROG} smoke"), f"{PROG} smoke")


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "render": _render,
    "check": _check,
    "smoke": _smoke,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.stderr.write(USAGE + f"{PROG}: error: a command is required (render, check or smoke)\n")
        return 2
    first, rest = argv[0], argv[1:]
    if first in ("-h", "--help", "help"):
        sys.stdout.write(HELP)
        return 0
    if first in ("-V", "--version"):
        print(f"{PROG} {__version__}")
        return 0
    command = COMMANDS.get(first)
    if command is None:
        sys.stderr.write(USAGE + f"{PROG}: error: unknown command {first!r} (choose from render, check, smoke)\n")
        return 2
    return command(rest)


if __name__ == "__main__":
    sys.exit(main())
