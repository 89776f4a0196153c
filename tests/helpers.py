"""What the test modules share: where things are, and small helpers that need nothing
beyond the standard library (every tier imports this module, the fast one included)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

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


def parse_values(text: str, source: str) -> dict:
    """YAML text -> values, or ValuesError: the load phase on text alone (torchdag.values.parse)."""
    from torchdag.values import parse

    return parse(text, source).values


# The summary render.py prints for examples/cluster.yaml (two 310P nodes, one card each, port
# 25195), written out by hand: HCCL_EXEC_TIMEOUT is 600 s rounded down to a multiple of CANN's
# 68 s step. tests/render/test_output_paths.py and the chart's NOTES (tests/chart/test_chart.py) hold to it.
CLUSTER_SUMMARY = "".join(f"{line}\n" for line in (
    "torchdag job bladetrain: 2 node(s), world size 2, backend gloo"
    " (auto: HCCL on ascend310p works within one server only, so gloo across nodes)",
    "master: 192.168.110.22 (rank 0) at 192.168.110.22:25195",
    "gang scheduling: none; whole-job restarts: 0",
    "HCCL_EXEC_TIMEOUT: 544 s (timeouts.processGroup 600 s, as CANN reads it: a multiple of 68, at most 17340)",
    "script: start the process group with TORCHDAG_BACKEND=gloo: torchdag_ddp.setup() (docs/byo.md)",
    "script: gloo carries no NPU/GPU tensors: torchdag_ddp.DDP(model) in place of DDP(model) (docs/byo.md)",
    "helpers: from the Workflow (a ConfigMap of 8 files) at /opt/torchdag/torchdag/agents",
    "rbac: kubectl apply -n <namespace> -f docs/rbac/job.yaml,docs/rbac/helpers.yaml",
    "rank  node            address         nic         accelerator  devices  template",
    "   0  192.168.110.22  192.168.110.22  enp11s0f0   ascend310p   1        ascend310p-x1",
    "   1  192.168.110.23  192.168.110.23  enp125s0f0  ascend310p   1        ascend310p-x1",
))


def wait_for(what: str, check, timeout: float = 90, every: float = 0.5, tail=None):
    """Poll check() until it returns something true and return that; past the timeout, a
    test failure naming `what`, with tail() (a log's end, say) appended when given."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}" + (f"\n{tail()}" if tail else ""))
        time.sleep(every)
