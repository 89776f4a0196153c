"""Shared by the values tests (tests/values/): a values file in a temporary folder, render.py as a
process, and the one-line error it must print."""

from __future__ import annotations

import subprocess
import sys

from helpers import EXAMPLE, REPO, write  # noqa: F401 - shared with the modules that import this one

BASE = EXAMPLE.read_text(encoding="utf-8")


def render_py(*args: str, timeout: float = 10, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "render.py"), *args],
                          capture_output=kwargs.pop("capture_output", True),
                          text=True, timeout=timeout, **kwargs)


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err[:-1]
