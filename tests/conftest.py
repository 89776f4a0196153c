"""Shared fixtures (the helm binary the Makefile installed), the test tiers and two
session-wide rules.

Tests live in subject folders (tests/render, tests/chart, tests/trainer, tests/e2e, ...);
`pytest tests/render` runs one subject. The shared helpers stay here at tests/; this folder
and every subject folder are on sys.path, so a module imports helpers, and the strategies of
another test module, by their (unique) basename. The tier follows the folder: every test under
a folder named in FOLDER_TIERS gets that folder's markers.

`make test` runs every test; `make test-fast` runs the fast tier in a venv without torch,
deselecting the markers pytest.ini declares (torch, netns, ascend, go, scale). A module marked
torch as a whole may import torch at the top: where torch is not installed and the run
deselects that tier, such a module is not even collected.

Property tests draw the same examples on every run (the Hypothesis profile `ci`, named in
the header, so a failure seen once replays with the same command), and no test may change
a tracked file (checked at the end of the session)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import settings
from tracked_files import changed_files, tracked_digests

from helpers import REPO

sys.path.insert(0, str(REPO))
TESTS = Path(__file__).resolve().parent
SUBJECTS = sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py")))
sys.path[1:1] = [str(p) for p in SUBJECTS]

# The tiers that follow from a folder: whatever lands there needs what they name.
FOLDER_TIERS = {
    "e2e": ("e2e",),
    "netns": ("netns",),
    "trainer": ("torch",),
}

# The fake Kubernetes API the gang-watch tests share (its `api` fixture); the local cluster
# of the e2e tests (its `local_cluster` fixture).
pytest_plugins = ["gangwatch_helpers", "cluster_helpers", "realnodes_helpers", "e2e_helpers"]

_TORCH_MODULE = re.compile(r"^pytestmark = .*\bpytest\.mark\.torch\b", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.suffix != ".py" or importlib.util.find_spec("torch") is not None:
        return None
    deselected = "not torch" in (config.option.markexpr or "")
    torch_module = ("torch" in FOLDER_TIERS.get(collection_path.parent.name, ())
                    or _TORCH_MODULE.search(collection_path.read_text(encoding="utf-8")))
    return True if deselected and torch_module else None

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # One local cluster per pytest process (a minute or two of both cores) serves every e2e
    # module that process runs. With `--dist loadgroup` (make test) each e2e module is a group
    # of its own, kept on one worker in its order, and the modules share out between the two
    # workers: their jobs take about 20 minutes, too long for one worker.
    for item in items:
        folder = Path(str(item.path)).parent.name
        for tier in FOLDER_TIERS.get(folder, ()):
            item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.xdist_group(f"local-cluster-{Path(str(item.path)).stem}"))


# ci: the examples follow from each test's own code, not from a random seed, so every run
# (and every xdist worker) draws the same ones; a failure's blob is printed for replay.
# explore (HYPOTHESIS_PROFILE=explore or --hypothesis-profile=explore): fresh random
# examples and the local example database, for looking for new failures.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_report_header(config):
    name = settings.get_current_profile_name()
    how = ("derandomize=True: the same examples on every run; rerun the same command to replay a failure"
           if settings.default.derandomize else "random examples; a failure prints its @reproduce_failure blob")
    return f"hypothesis profile {name!r}: {how}"


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


# --- no test rewrites a tracked file ------------------------------------------------------

def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if not _is_xdist_worker(session.config):
        session.config.stash[_TRACKED] = tracked_digests()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    if _is_xdist_worker(session.config):
        return
    before = session.config.stash.get(_TRACKED, None)
    after = tracked_digests() if before is not None else None
    if before is None or after is None:
        return
    changed = changed_files(before, after)
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = f"tests changed tracked files (tests must write only under tmp_path): {', '.join(changed)}"
        if reporter is not None:
            reporter.write("\n")
            reporter.write_line(line, red=True, bold=True)
        else:
            print(line, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_TRACKED = pytest.StashKey[dict]()
