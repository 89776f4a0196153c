"""Shared fixtures: paths, the helm binary the Makefile installed, and render helpers."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def helm() -> str:
    """The helm binary installed by `make` (HELM=...), else .tools/bin/helm, else PATH."""
    candidates = [os.environ.get("HELM"), str(REPO / ".tools" / "bin" / "helm"), shutil.which("helm")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("helm is not installed: run the tests through `make test`, which installs it into .tools/")
