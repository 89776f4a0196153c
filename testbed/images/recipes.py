"""The images the real nodes run, each cached by its inputs.

    base       Debian minbase (mmdebstrap, the host's apt sources), with passwd (useradd)
    python3    base + python3 and pip (apt-get, in a buildah container)
    pytorch    python3 + torch from PyPI (pip): a user's image, nothing of torchdag in it
    torchdag   the project's Dockerfile on pytorch (buildah bud, REQUIREMENTS=none)
    argoexec   base + Argo's executor, static as Argo's release builds it, at /bin as in Argo's image
    pause      base, sleeping: the pod sandbox's image

A recipe's key is a hash of its own inputs and its parent's key: torch's layer is built once
and every image on it (pytorch, torchdag) shares it. The names pods use (`public`) are
given to the images on each node (testbed/images/store.py); the store itself holds them
under their keys, so checkouts of different trees share one store.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

from torchdag import REPO_ROOT

# The names tests and values files use. A user's image and torchdag's are what a cluster
# whose images are preloaded would hold under these names.
USER_IMAGE = "registry.example.com/team/pytorch:2.13.0"
TORCHDAG_IMAGE = "registry.example.com/torchdag/trainer:0.1.0"
NO_PYTHON_IMAGE = "registry.example.com/team/no-python:1"
ARGOEXEC_IMAGE = "quay.io/argoproj/argoexec:v4.0.5"  # what the workflow-controller names (testbed/cluster/up.py)
PAUSE_IMAGE = "localhost/torchdag/pause:1"

ARGOEXEC = REPO_ROOT / ".tools" / "bin" / "argoexec-static"  # as Argo's release builds it (Makefile)
DOCKERFILE = REPO_ROOT / "Dockerfile"
SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def torch_requirement() -> str:
    """torch as the dev venv pins it (requirements-dev.txt): the same build in the images."""
    text = (REPO_ROOT / "requirements-dev.txt").read_text()
    found = re.search(r"^torch==\S+", text, re.M)
    if not found:
        raise RuntimeError("requirements-dev.txt pins no torch==VERSION")
    return found.group(0)


def suite() -> str:
    """The host's Debian release (the images are built from its packages)."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return "bookworm"
    found = re.search(r"^VERSION_CODENAME=(\w+)", text, re.M)
    return found.group(1) if found else "bookworm"


def apt_sources() -> tuple[str, str]:
    """(what mmdebstrap is given, its text for the key): the host's sources file, else Debian's mirror."""
    for path in SOURCES:
        if path.is_file() and path.read_text().strip():
            return str(path), path.read_text()
    return DEFAULT_MIRROR, DEFAULT_MIRROR


def _files_digest(paths: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def dockerfile_context() -> list[Path]:
    """What the Dockerfile's build context sends: the paths .dockerignore lets through (its `!`
    lines, a folder with everything under it), without __pycache__."""
    files = [DOCKERFILE, REPO_ROOT / ".dockerignore"]
    for line in (REPO_ROOT / ".dockerignore").read_text().splitlines():
        if not line.startswith("!"):
            continue
        path = REPO_ROOT / line[1:].rstrip("/")
        files += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts] if path.is_dir() \
            else [path]
    return files


@dataclass(frozen=True)
class Recipe:
    name: str
    parent: str | None
    inputs: dict = field(default_factory=dict)
    public: tuple[str, ...] = ()


def recipes() -> dict[str, Recipe]:
    """Every image, parents before children."""
    mirror, sources_text = apt_sources()
    argoexec = hashlib.sha256(ARGOEXEC.read_bytes()).hexdigest() if ARGOEXEC.is_file() else "missing"
    return {r.name: r for r in (
        Recipe("base", None, {"tool": "mmdebstrap --variant=minbase", "suite": suite(), "include": ["passwd"],
                              "sources": sources_text, "mirror": mirror, "arch": platform.machine(),
                              # as Debian's slim images: no manuals, documentation or translations
                              "exclude": ["/usr/share/man/*", "/usr/share/doc/*", "/usr/share/locale/*",
                                          "/usr/share/info/*"]}),
        Recipe("python3", "base", {"apt": ["python3", "python3-pip"]}),
        Recipe("pytorch", "python3", {"pip": [torch_requirement()]}, (USER_IMAGE,)),
        Recipe("torchdag", "pytorch", {"dockerfile": _files_digest(dockerfile_context(), REPO_ROOT),
                                       "build-args": {"REQUIREMENTS": "none"}}, (TORCHDAG_IMAGE,)),
        Recipe("no-python", "base", {}, (NO_PYTHON_IMAGE,)),
        Recipe("argoexec", "base", {"argoexec": argoexec}, (ARGOEXEC_IMAGE,)),
        Recipe("pause", "base", {"cmd": ["sleep", "infinity"]}, (PAUSE_IMAGE,)),
    )}


def keys(all_recipes: dict[str, Recipe]) -> dict[str, str]:
    """Each recipe's key: 16 hex digits of its inputs and its parent's key."""
    found: dict[str, str] = {}
    for recipe in all_recipes.values():
        parent = found[recipe.parent] if recipe.parent else ""
        text = json.dumps({"name": recipe.name, "parent": parent, "inputs": recipe.inputs}, sort_keys=True)
        found[recipe.name] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return found


def host_pip_settings() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The host's pip settings for a build container: (env, bind mounts). A host behind a
    TLS-inspecting proxy or a private index has them; builds honour them as the host's pip does."""
    env, mounts = {}, []
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_DEFAULT_TIMEOUT", "PIP_TRUSTED_HOST",
                 "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        path = os.environ.get(name)
        if path and Path(path).is_file():
            mounts.append((path, "/run/torchdag-build/ca.crt"))
            env["PIP_CERT"] = "/run/torchdag-build/ca.crt"
            break
    return env, mounts
