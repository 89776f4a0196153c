"""The chart's NOTES (what `helm install` prints after the release), for the tests of its warnings."""

from __future__ import annotations

import subprocess
from pathlib import Path

from chart_helpers import CHART


def helm_notes(helm: str, values: Path, *extra: str) -> str:
    """NOTES.txt as `helm install --dry-run=client` prints it (helm template prints none)."""
    result = subprocess.run([helm, "install", "t", str(CHART), "-f", str(values), "--dry-run=client", *extra],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]
