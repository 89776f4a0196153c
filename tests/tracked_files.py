"""Digests of the files git tracks: conftest.py compares them at the start and the end of
a session, so a test that rewrites a tracked file fails the run."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tracked_digests(root: Path = REPO) -> dict[str, str] | None:
    """sha256 of every file git tracks (a link: its target), or None outside a git checkout."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    digests = {}
    for name in filter(None, listed.stdout.decode().split("\0")):
        path = root / name
        if path.is_symlink():
            digests[name] = "link:" + os.readlink(path)
        elif path.is_file():
            digests[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            digests[name] = "absent"
    return digests


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
