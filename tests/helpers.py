"""What the test modules share: where things are, and small helpers that need nothing
beyond the standard library (every tier imports this module, the fast one included)."""

from __future__ import annotations

import socket
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO / "examples"
EXAMPLE = EXAMPLES_DIR / "cluster.yaml"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
CASES = REPO / "tests" / "cases"
TRAINER = REPO / "trainer"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    """A values file (or any text) in a test's temporary folder."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path
