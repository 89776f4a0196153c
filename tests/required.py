"""What `make test` promises to exercise: there a missing capability fails the run with
its reason; a bare `pytest` elsewhere skips those tests with the same reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

# Set by `make test`: network namespaces (root, iproute2's `ip`, util-linux's `unshare`)
# are part of what it checks (tests/netns/test_netns.py, tests/agents/test_preflight.py).
NETNS_REQUIRED = "TORCHDAG_NETNS_REQUIRED"


def missing(reason: str, variable: str = NETNS_REQUIRED) -> None:
    """Fail under `make test` (variable=1), skip otherwise; never returns."""
    if os.environ.get(variable) == "1":
        pytest.fail(f"{reason}; `make test` needs it ({variable}=1): run it as root on a machine with "
                    "iproute2 and util-linux, or run pytest without make to skip these tests", pytrace=False)
    pytest.skip(reason)


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"tdprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=20)
    if made.returncode != 0:
        return f"ip netns add is not permitted here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, text=True, timeout=20)
    unshared = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True, timeout=20)
    if unshared.returncode != 0:
        return f"unshare --net is not permitted here: {unshared.stderr.strip()}"
    return None
