"""Shared fixtures (the helm binary the Makefile installed), and the test tiers.

`make test` runs every test; `make test-fast` runs the fast tier in a venv without torch,
deselecting the markers pytest.ini declares (torch, netns, ascend, go). A module marked
torch as a whole may import torch at the top: where torch is not installed and the run
deselects that tier, such a module is not even collected.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from helpers import REPO

sys.path.insert(0, str(REPO))

_TORCH_MODULE = re.compile(r"^pytestmark = .*\bpytest\.mark\.torch\b", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.suffix != ".py" or importlib.util.find_spec("torch") is not None:
        return None
    deselected = "not torch" in (config.option.markexpr or "")
    return True if deselected and _TORCH_MODULE.search(collection_path.read_text(encoding="utf-8")) else None


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
