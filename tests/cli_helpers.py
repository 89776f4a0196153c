"""Shared by the front-door tests: a values file in a temporary folder, render.py as a
process, and the one-line error it must print."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "cluster.yaml"
BASE = EXAMPLE.read_text(encoding="utf-8")


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def render_py(*args: str, timeout: float = 10, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "render.py"), *args], capture_output=kwargs.pop("capture_output", True),
                          text=True, timeout=timeout, **kwargs)


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err[:-1]
