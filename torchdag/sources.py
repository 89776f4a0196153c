"""Several values files (`render.py base.yaml -f site.yaml`), merged in order as Helm merges
its `-f` files (values.merge_maps), and the file each problem is reported in: the one the
field's merged value came from."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Sequence

from .values import Loaded, merge_maps, number_problems, read


def read_all(paths: Sequence[str | Path]) -> Loaded:
    """Read every file (the first one that cannot be read or parsed is reported), then merge."""
    files = [read(path) for path in paths]
    if len(files) == 1:
        return files[0]
    merged = functools.reduce(merge_maps, (each.values for each in files))
    _, too_big = number_problems(merged)
    named = [(each.source, each.values) for each in files]
    return Loaded(merged, " + ".join(each.source for each in files), too_big,
                  lambda path, cause=None: blame(named, path, cause))


def _step(value: Any, part: Any) -> tuple[bool, Any]:
    if isinstance(value, dict) and part in value:
        return True, value[part]
    if isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
        return True, value[part]
    return False, None


def blame(files: list[tuple[str, Any]], path: tuple, cause: tuple | None = None) -> str:
    """The file a field's merged value came from, as merge_maps builds it: at each step of
    the path the last file that has the key decides, and where its value and earlier files'
    are mappings they merged, so those files stay candidates for the rest of the path. A key
    no file sets is reported in the last file that reaches its parent (the first file for a
    top-level one), unless a rule asks for it because of another field, `cause`
    (executorServiceAccountName for automountServiceAccountToken: false): then in that one's."""
    candidates, owner = list(files), files[0][0]
    for depth, part in enumerate(path):
        present = [(name, found[1]) for name, value in candidates if (found := _step(value, part))[0]]
        if not present:
            if cause and depth == 0:
                return blame(files, cause)
            break
        owner = present[-1][0]
        merged = []
        for name, value in reversed(present):  # the mappings the last one was merged with
            if not isinstance(value, dict):
                break
            merged.insert(0, (name, value))
        candidates = merged or present[-1:]
    return owner
