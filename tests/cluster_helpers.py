"""The local cluster for the e2e tests (a pytest plugin: conftest.py loads it).

`local_cluster` (session scope) brings one control plane with Argo's controller up for all
the tests of a pytest process (each xdist worker has its own, in its own directory and on
its own ports) and takes it down at the end, checking that none of its processes is left.
It runs under `make test` and `make e2e` (both set TORCHDAG_E2E=1 and build the binaries
first; elsewhere the tests skip); without the binaries the test fails and says so.
Standard library and PyYAML only: every tier loads this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from helpers import REPO, wait_for

BIN = REPO / ".tools" / "bin"
CLUSTER_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "clustercerts",
                    "workflow-controller", "argoexec", "kubectl")
# Set by `make test` and `make e2e`: a cluster per pytest process costs a minute or two of
# both cores, so a bare `pytest` leaves these tests out unless asked.
E2E = "TORCHDAG_E2E"
# A cluster already up (its directory, e.g. .cluster): the tests use it instead of their own.
REUSE = "TORCHDAG_TEST_CLUSTER_DIR"
UP_TIMEOUT_S = 600  # a cold start on a busy two-core machine: about a minute; margin for load


@dataclass
class LocalCluster:
    dir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def server(self) -> str:
        """The API server's URL (https://127.0.0.1:PORT)."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        return config["clusters"][0]["cluster"]["server"]

    def command(self, *args: str, timeout: float = UP_TIMEOUT_S) -> subprocess.CompletedProcess:
        """python -m testbed.cluster --dir DIR ARGS... (what the Makefile's cluster-* targets run)."""
        return subprocess.run([sys.executable, "-m", "testbed.cluster", "--dir", str(self.dir), *args],
                              cwd=REPO, capture_output=True, text=True, timeout=timeout)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run([str(BIN / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args], input=stdin,
                              capture_output=True, text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}{done.stdout}"
        return done

    def get(self, *args: str) -> dict:
        """kubectl get ARGS -o json, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def pids(self) -> dict[str, int]:
        """Each component's pid, from its pid file."""
        return {path.stem: int(path.read_text()) for path in sorted(self.dir.glob("*.pid"))}

    def wait_for(self, what: str, check, timeout: float = 120, every: float = 0.5):
        """Poll check() until it returns something true; that value, or a failure naming `what`."""
        return wait_for(what, check, timeout, every)

WATCHDOG = """
import os, subprocess, sys, time
owner, directory = int(sys.argv[1]), sys.argv[2]
def owner_alive():
    try:
        with open(f"/proc/{owner}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
while owner_alive():
    time.sleep(1)
subprocess.run([sys.executable, "-m", "testbed.cluster", "--dir", directory, "down"], timeout=120)
"""


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def running_cluster(directory: Path, *up_args: str):
    """A local cluster in `directory` (`python -m testbed.cluster up UP_ARGS`), taken down after,
    failing if any of its processes is left."""
    cluster = LocalCluster(directory)
    # Should this pytest process die without its teardown (killed, or its terminal gone), a
    # watchdog of its own session takes the cluster down: five servers left running would
    # cost a shared machine dearly.
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), str(cluster.dir)], cwd=REPO,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    up = cluster.command("up", *up_args)
    try:
        assert up.returncode == 0, f"cluster up failed:\n{up.stdout}{up.stderr}"
        yield cluster
    finally:
        watchdog.kill()
        watchdog.wait()
        pids = cluster.pids()
        down = cluster.command("down", timeout=120)
        left = [f"{name} ({pid})" for name, pid in pids.items() if alive(pid)]
        assert down.returncode == 0 and not left, f"cluster down left {left}:\n{down.stdout}{down.stderr}"


def require_e2e(binaries: tuple[str, ...] = CLUSTER_BINARIES) -> None:
    if os.environ.get(E2E) != "1":
        pytest.skip(f"the local-cluster tests run through `make e2e` ({E2E}=1)")
    missing = [name for name in binaries if not (BIN / name).is_file()]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)}: run `make cluster-up` (or `make go-tools`) first")


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory) -> LocalCluster:
    require_e2e()
    reused = os.environ.get(REUSE)
    if reused:  # a developer's running cluster (`make cluster-up`): used as it is, left running
        yield LocalCluster(Path(reused).resolve())
        return
    with running_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster
