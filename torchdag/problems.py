"""One problem in a values file, reported as one line: `file: field.path: message`; all of
a file's problems together are one ValuesError (exit status 2)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence, Union

from .errors import TorchdagError

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
    # Sort paths naturally (nodes[2] before nodes[10]) whatever the part types.
    return (tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in problem.path), problem.message)
