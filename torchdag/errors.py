"""The one error root of torchdag, the one handler every command reports through, and the
problems of a values file (`Problem`: one line `file: field.path: message`; all of a file's
problems together are one `ValuesError`, exit status 2).

Every error a user can cause is a `TorchdagError`: its `lines()` are printed on stderr
(one line per problem) and `exit_code` is the status to leave with. Anything else that
escapes a command is a bug in torchdag, never the user's input: it is printed as one line
that says so, with exit status 70 (EX_SOFTWARE), and no traceback (TORCHDAG_TRACEBACK=1
prints it too, for whoever fixes the bug).

Every command runs its body through `run_command`: render.py and `torchdag render`/`check`
(torchdag/cli.py), and the test bed's `python -m testbed.localrun` and cluster tools:

    from torchdag.errors import TorchdagError, run_command

    def main(argv=None) -> int:
        args = parser.parse_args(argv)             # usage errors: argparse's own exit 2
        return run_command(lambda: body(args), "my-tool")
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence, Union

EXIT_BUG = 70  # EX_SOFTWARE: a bug in torchdag, not in the values
EXIT_INTERRUPTED = 130


class TorchdagError(Exception):
    """The root of every error torchdag reports to a user: `lines()` are what is printed
    (one line per problem, e.g. `file: path: message`) and `exit_code` the status."""

    exit_code = 1

    def lines(self) -> list[str]:
        return [str(self)]


class InternalBug(TorchdagError):
    """Something torchdag itself got wrong (a template that renders no valid YAML, an
    exception nobody expected): one line naming it as a bug."""

    exit_code = EXIT_BUG

    def __init__(self, what: str, prog: str = "torchdag"):
        super().__init__(what)
        self.prog = prog

    def lines(self) -> list[str]:
        what = " ".join(str(self).split())  # one line, whatever the exception said
        return [f"{self.prog}: internal bug (not a problem with your values; please report it): {what}"]


class CannotWrite(TorchdagError):
    """An output torchdag could not (or will not) write: the file named by -o, or stdout."""

    def __init__(self, prog: str, target: str, reason: str):
        super().__init__(f"{prog}: cannot write {target or repr(target)}: {reason}")


def report(err: TorchdagError, stream=None) -> int:
    """Print an error's lines on stderr; return its exit status."""
    stream = stream or sys.stderr
    for line in err.lines():
        print(line, file=stream)
    return err.exit_code


def run_command(body: Callable[[], int], prog: str) -> int:
    """Run a command's body: its status; a TorchdagError reported as its lines and status;
    any other exception as one line naming an internal bug, status 70."""
    try:
        return body()
    except TorchdagError as err:
        if isinstance(err, InternalBug):
            err.prog = prog
        return report(err)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001 - the one place an unexpected exception becomes a line
        if os.environ.get("TORCHDAG_TRACEBACK"):
            traceback.print_exc()
        return report(InternalBug(f"{type(err).__name__}: {err}", prog))


# --- problems in a values file -----------------------------------------------------------

PathPart = Union[str, int]


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def format_path(parts: Sequence[PathPart]) -> str:
    """`["nodes", 2, "nic"]` -> `nodes[2].nic`; other keys are quoted so the path stays one
    unambiguous line: `labels['app.kubernetes.io/name']`. The empty path is the document."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif isinstance(part, str) and _PLAIN_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text or "(top level)"


@dataclass(frozen=True, order=True)
class Problem:
    path: tuple
    message: str
    # Several values files: the field whose file the problem is reported in, when not `path`
    # itself (a key a rule asks for because of another key no file sets it: that key's file).
    cause: tuple | None = field(default=None, compare=False)

    def line(self, source: str) -> str:
        return f"{source}: {format_path(self.path)}: {self.message}"


class ValuesError(TorchdagError):
    """Raised with every problem found, so the user fixes them all in one go."""

    exit_code = 2

    def __init__(self, source: str, problems: Iterable[Problem], blame: Callable[[tuple], str] | None = None):
        self.source = source
        self.blame = blame  # several values files: the one each problem's field came from
        self.problems = sorted(set(problems), key=_sort_key)
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [p.line(self.blame(p.path, p.cause) if self.blame else self.source) for p in self.problems]


def _sort_key(problem: Problem):
    # Sort paths naturally (nodes[2] before nodes[10]) whatever the part types, and the
    # messages of one path by their numbers too (line 2 before line 10).
    return (tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in problem.path),
            tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                  for part in re.split(r"(\d+)", problem.message)))
