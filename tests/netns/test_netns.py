"""Two simulated hosts in network namespaces: the NIC fix, proven on the rendered commands.

Host A (node-a, NIC enp11s0f0, 198.18.0.1) and host B (node-b, NIC eno1, 198.18.0.2)
are joined by a veth pair; each also has lo. In each, the hostname resolves to
127.0.1.1 (/etc/netns/NS/hosts, bind-mounted over /etc/hosts by `ip netns exec`), the
setup that made gloo fall back to loopback in the original report. The Plan's nodes run
through testbed.localrun (make smoke's runner) with a per-node exec prefix
`ip netns exec NS unshare --uts sh -c 'hostname NAME && exec "$@"'`; the rendered
addresses and NIC names are kept (no 127.0.0.1 / lo mapping). Only 198.18.0.0/15
(benchmarking range) and each namespace's own loopback carry traffic.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from required import missing, netns_unavailable

from localrun_helpers import plan_of
from testbed.localrun import Supervisor, prepare_job
from testbed.runtime import Options

pytestmark = [pytest.mark.netns, pytest.mark.torch]  # torchrun across network namespaces, as root

ENV = dict(os.environ, OMP_NUM_THREADS="1")
HOSTS = {"node-a": ("enp11s0f0", "198.18.0.1"), "node-b": ("eno1", "198.18.0.2")}


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def hosts():
    """{hostname: namespace} for two hosts joined by a veth pair; always torn down."""
    reason = netns_unavailable()
    if reason:
        missing(reason)
    tag = uuid.uuid4().hex[:6]
    names = {"node-a": f"td{tag}a", "node-b": f"td{tag}b"}
    created: list[str] = []
    etc_netns = Path("/etc/netns")
    made_etc_netns = not etc_netns.exists()
    try:
        for ns in names.values():
            _check(_ip("netns", "add", ns))
            created.append(ns)
            Path(f"/etc/netns/{ns}").mkdir(parents=True)
        a, b = names["node-a"], names["node-b"]
        _check(_ip("link", "add", f"v{tag}a", "netns", a, "type", "veth", "peer", "name", f"v{tag}b", "netns", b))
        for host, ns in names.items():
            nic, address = HOSTS[host]
            _check(_ip("-n", ns, "link", "set", f"v{tag}{host[-1]}", "name", nic))
            _check(_ip("-n", ns, "addr", "add", f"{address}/24", "dev", nic))
            _check(_ip("-n", ns, "link", "set", nic, "up"))
            _check(_ip("-n", ns, "link", "set", "lo", "up"))
            # The hostname resolves to loopback, as Debian's installer writes it.
            Path(f"/etc/netns/{ns}/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {host}\n")
        yield names
    finally:
        for ns in created:
            _ip("netns", "del", ns)  # takes its end of the veth (and so the pair) with it
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        if made_etc_netns:
            try:
                etc_netns.rmdir()  # only if we made it and nobody else uses it now
            except OSError:
                pass


def _check(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"{proc.args}: {proc.stderr.strip()}"


def write_values(tmp_path: Path, nic_a: str | None, nic_b: str | None, **extra) -> Path:
    nodes = []
    for host, nic in (("node-a", nic_a), ("node-b", nic_b)):
        node = {"name": host, "address": HOSTS[host][1], "devices": 1}
        if nic:
            node["nic"] = nic
        nodes.append(node)
    nodes[0]["master"] = True
    values = {
        "name": "netns", "image": "registry.example.com/torchdag/trainer:0.1.0",
        "script": "/opt/torchdag/trainer/train.py",
        "args": ["--type", "example", "--max-steps", "20", "--log-every", "10"],
        "port": 29500, "timeouts": {"rendezvous": 20, "processGroup": 15}, "nodes": nodes, **extra,
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


class Lines:
    def __init__(self):
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines.extend(text.splitlines())

    def flush(self) -> None:
        pass

    def of(self, task: str) -> str:
        return "\n".join(line for line in self.lines if line.startswith(f"[{task}] "))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def run_in_hosts(values: Path, hosts: dict[str, str], gang_stop: bool = True, timeout: float = 90):
    """The Plan's nodes, each in its host's namespace under its own hostname."""

    def prefix(task):
        return ["ip", "netns", "exec", hosts[task.host], "unshare", "--uts",
                "sh", "-c", 'hostname "$0" && exec "$@"', task.host]

    job = prepare_job(plan_of(values), Options(address=None, nic=None), exec_prefix=prefix)
    tasks = job.tasks
    out = Lines()
    begin = time.monotonic()
    outcome = Supervisor(job.workflow, tasks, out=out, gang_stop=gang_stop, timeout=timeout, base_env=ENV).run()
    return tasks, outcome, out, time.monotonic() - begin


def test_rendered_nic_env_trains_across_hosts_with_different_nic_names(hosts, tmp_path):
    tasks, outcome, out, _ = run_in_hosts(write_values(tmp_path, "enp11s0f0", "eno1"), hosts)
    assert [dict(t.env)["GLOO_SOCKET_IFNAME"] for t in tasks] == ["enp11s0f0", "eno1"]
    assert outcome.code == 0, out.text[-4000:]
    assert "[trainer] step 20/20 loss" in out.of("node-0")
    assert "--master_addr=198.18.0.1" in tasks[1].argv


def test_loopback_hostname_without_nic_fails_and_preflight_names_cause_and_fix(hosts, tmp_path):
    tasks, outcome, out, took = run_in_hosts(write_values(tmp_path, None, None), hosts)
    assert not any(name.endswith("_SOCKET_IFNAME") for t in tasks for name, _ in t.env)
    assert outcome.code == 1, out.text[-4000:]
    assert "connectFullMesh failed" in out.text, out.text[-4000:]
    assert "remote=[127.0.1.1]" in out.text  # gloo advertised the loopback address to its peer
    assert took < 15 + 30  # bounded by timeouts.processGroup, not gloo's 30 minutes

    # The same job with preflight on: it stops before torchrun and says why and what to do.
    values = write_values(tmp_path, None, None, preflight={"enabled": True, "timeout": 5})
    tasks, outcome, out, _ = run_in_hosts(values, hosts, gang_stop=False)
    assert outcome.code == 1
    for task, host in (("node-0", "node-a"), ("node-1", "node-b")):
        text = out.of(task)
        assert f"preflight: error: hostname '{host}' resolves to loopback 127.0.1.1 and no NIC is set" in text, text
        assert "Fix: set `nic:` for this node in cluster.yaml (or `nic: auto`)" in text
        assert "preflight: not starting 'torchrun'" in text
    assert "[trainer]" not in out.text  # torchrun never started


def test_nic_auto_trains_without_naming_nics(hosts, tmp_path):
    tasks, outcome, out, _ = run_in_hosts(write_values(tmp_path, "auto", "auto"), hosts)
    assert not any(name.endswith("_SOCKET_IFNAME") for t in tasks for name, _ in t.env)
    assert all("--nic=auto" in t.argv for t in tasks)
    assert outcome.code == 0, out.text[-4000:]
    assert "preflight: ok: nic auto: enp11s0f0 (198.18.0.1)" in out.of("node-0")
    assert "preflight: ok: nic auto: eno1 (198.18.0.2)" in out.of("node-1")
    assert "[trainer] step 20/20 loss" in out.of("node-0")
