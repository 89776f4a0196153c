"""The process kubelet against a real API server (tests/e2e/test_kubelet_cluster.py): Nodes of
the test's own, the kubelet as a subprocess, waiting on objects."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import helpers
from helpers import REPO
from testbed.kube import Kube

KUBECONFIG_ENV = "TORCHDAG_TEST_KUBECONFIG"  # an API server already up (e.g. `make cluster-up`'s)


def kubeconfig_for(request) -> Path:
    """$TORCHDAG_TEST_KUBECONFIG, else the local cluster the e2e tests bring up."""
    given = os.environ.get(KUBECONFIG_ENV)
    if given:
        return Path(given)
    try:
        return request.getfixturevalue("local_cluster").kubeconfig
    except pytest.FixtureLookupError:
        pytest.fail(f"needs the local cluster (the local_cluster fixture of tests/cluster_helpers.py) or "
                    f"{KUBECONFIG_ENV}=<kubeconfig of a running cluster>", pytrace=False)


def register_nodes(api: Kube, names: list[str], extra: dict | None = None, labels: dict | None = None) -> None:
    for name in names:
        allocatable = {"cpu": "64", "memory": "256Gi", "pods": "110", **(extra or {})}  # as make cluster-nodes
        api.request("POST", "/api/v1/nodes", body={
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "torchdag.io/test": "kubelet",
                                                  **(labels or {})}}})
        api.request("PATCH", f"/api/v1/nodes/{name}/status", content_type="application/merge-patch+json", body={
            "status": {"capacity": allocatable, "allocatable": allocatable,
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "registered by the test"}]}})


def delete_nodes(api: Kube, names: list[str]) -> None:
    for name in names:
        for path in (f"/api/v1/nodes/{name}", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"):
            try:
                api.request("DELETE", path)
            except Exception:  # noqa: BLE001 -- already gone
                pass


class KubeletProcess:
    def __init__(self, kubeconfig: Path, nodes: list[str] | str, state_dir: Path, *extra: str):
        self.state_dir = state_dir
        self.log = state_dir / "kubelet.log"
        state_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "testbed.kubelet", "--kubeconfig", str(kubeconfig),
             *(["--selector", nodes] if isinstance(nodes, str) else ["--nodes", ",".join(nodes)]),
             "--state-dir", str(state_dir), *extra],
            cwd=REPO, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_for(what: str, check, timeout: float = 90, every: float = 0.5, kubelet: KubeletProcess | None = None):
    """helpers.wait_for, with the kubelet's log's end in the failure."""
    tail = (lambda: f"kubelet log:\n{kubelet.text()[-4000:]}") if kubelet else None
    return helpers.wait_for(what, check, timeout, every, tail)

def dump(obj: dict) -> str:
    return json.dumps(obj, indent=1)[:4000]
