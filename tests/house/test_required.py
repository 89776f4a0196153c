"""`make test` fails, with its reason, where a capability it promises to test is missing,
instead of passing with skips (tests/required.py); a bare pytest skips those tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from required import NETNS_REQUIRED

REPO = Path(__file__).resolve().parents[2]
NETNS_TESTS = ["tests/netns/test_netns.py", "tests/agents/test_preflight.py::test_nic_without_ipv4_is_fatal"]


def run_pytest(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *NETNS_TESTS],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_without_ip_netns_make_test_fails_and_says_why(tmp_path):
    empty = tmp_path / "bin"  # a PATH without ip and unshare
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != NETNS_REQUIRED}
    env.update(PATH=str(empty), PYTHONDONTWRITEBYTECODE="1")

    required = run_pytest({**env, NETNS_REQUIRED: "1"})
    assert required.returncode == 1, required.stdout[-3000:]
    assert "ip is not installed; `make test` needs it (TORCHDAG_NETNS_REQUIRED=1)" in required.stdout, \
        required.stdout[-3000:]
    summary = required.stdout.splitlines()[-1]
    assert "1 failed, 3 errors" in summary and "skipped" not in summary and "passed" not in summary, summary

    bare = run_pytest(env)
    assert bare.returncode == 0, bare.stdout[-3000:]
    assert "SKIPPED" in bare.stdout and "ip is not installed" in bare.stdout, bare.stdout[-3000:]
