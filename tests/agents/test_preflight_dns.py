"""Preflight on the pod network (--wait-for-name): the DNS race of pytorch#73682. Every
rank waits, within the rendezvous bound, until the master's name resolves and (other
ranks) its port answers, then starts the launcher; a name that never resolves ends the
node with one line. Real sockets on 127.0.0.1; the late name comes either from a
getaddrinfo stand-in (in process) or, as root, from a private /etc/hosts that the real
resolver reads (a mount namespace of the preflight's own)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
from required import missing, netns_unavailable

from trainer_helpers import PREFLIGHT, REPO, clean_env, free_port

sys.path.insert(0, str(REPO))

from torchdag.agents import preflight

NAME = "node-0.podnet-x7k2q.ml.svc.cluster.local"


def late_name(monkeypatch, after: float | None) -> None:
    """NAME resolves to 127.0.0.1 from `after` seconds on (never when None), as a headless
    Service publishes rank 0's record once its pod has an IP; other names resolve as usual."""
    real = socket.getaddrinfo
    appears = None if after is None else time.monotonic() + after

    def getaddrinfo(host, *args, **kwargs):
        if host == NAME:
            if appears is None or time.monotonic() < appears:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def listen_later(port: int, after: float) -> threading.Thread:
    """A listener on 127.0.0.1:port from `after` seconds on, accepting for a few seconds: the
    master's rendezvous port once its torchrun starts."""
    def serve():
        time.sleep(after)
        with socket.create_server(("127.0.0.1", port)) as server:
            server.settimeout(0.2)
            end = time.monotonic() + 8
            while time.monotonic() < end:
                try:
                    server.accept()[0].close()
                except TimeoutError:
                    continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_worker_waits_for_the_masters_name_then_its_port(monkeypatch):
    late_name(monkeypatch, after=0.8)
    port = free_port()
    listen_later(port, after=1.5)
    start = time.monotonic()
    findings = preflight.run_checks(NAME, port, node_rank=1, nproc_per_node=1, nic="lo", device="cpu", timeout=20,
                                    wait_name=True)
    elapsed = time.monotonic() - start
    assert not any(f.fatal for f in findings), [str(f) for f in findings]
    assert str(findings[0]).startswith(f"preflight: ok: master name {NAME} resolves to 127.0.0.1")
    assert any(f"master {NAME}:{port} is reachable" in str(f) for f in findings)
    assert 1.4 < elapsed < 10


def test_the_master_waits_for_its_own_name_then_checks_its_port(monkeypatch):
    late_name(monkeypatch, after=0.6)
    findings = preflight.run_checks(NAME, free_port(), node_rank=0, nproc_per_node=1, nic="lo", device="cpu",
                                    timeout=20, wait_name=True)
    assert [f.level for f in findings] == ["ok", "ok", "ok", "ok"], [str(f) for f in findings]
    assert "resolves to 127.0.0.1" in str(findings[0]) and "is free" in str(findings[2])


def test_a_name_that_never_resolves_is_one_line_within_the_bound(monkeypatch):
    late_name(monkeypatch, after=None)
    start = time.monotonic()
    findings = preflight.run_checks(NAME, free_port(), node_rank=1, nproc_per_node=1, nic="lo", device="cpu",
                                    timeout=1.5, wait_name=True)
    assert time.monotonic() - start < 3
    (only,) = findings
    assert only.fatal and str(only).startswith(f"preflight: error: master name {NAME} did not resolve within 1.5 s "
                                               "(Name or service not known)")


def test_without_wait_for_name_the_name_is_looked_up_once(monkeypatch):
    """Host network: no waiting for names (a worker still waits for the master's port)."""
    late_name(monkeypatch, after=None)
    findings = preflight.run_checks(NAME, free_port(), node_rank=0, nproc_per_node=1, nic="lo", device="cpu",
                                    timeout=20)
    assert findings[0].level == "warning" and "does not resolve here yet" in str(findings[0])


# --- the real resolver, as root: a private /etc/hosts the test fills in late ----------------------

def _private_resolver(tmp_path):
    reason = netns_unavailable() or (None if shutil.which("mount") else "mount is not installed")
    if reason:
        missing(reason)
    hosts, nsswitch = tmp_path / "hosts", tmp_path / "nsswitch.conf"
    hosts.write_text("127.0.0.1 localhost\n")
    nsswitch.write_text("hosts: files\n")  # no DNS: a missing name fails at once, offline
    return hosts, nsswitch


def _preflight_in_private_mounts(hosts, nsswitch, port: int, timeout: str) -> subprocess.Popen:
    script = ('mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/nsswitch.conf && shift 2 && exec "$@"')
    argv = ["unshare", "--mount", "sh", "-c", script, "sh", str(hosts), str(nsswitch), sys.executable,
            str(PREFLIGHT), f"--master-addr={NAME}", f"--master-port={port}", "--node-rank=1",
            "--nproc-per-node=1", "--nic=lo", "--device=cpu", f"--timeout={timeout}", "--wait-for-name",
            "--exec", sys.executable, "-c", "print('launcher started')"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env())


@pytest.mark.netns
def test_the_real_resolver_sees_the_name_appear_and_the_launcher_starts(tmp_path):
    hosts, nsswitch = _private_resolver(tmp_path)
    port = free_port()
    listen_later(port, after=2.0)
    process = _preflight_in_private_mounts(hosts, nsswitch, port, "30")
    time.sleep(1.0)
    with hosts.open("a") as file:  # the same inode: the bind mount shows the new line
        file.write(f"127.0.0.1 {NAME}\n")
    out, _ = process.communicate(timeout=40)
    assert process.returncode == 0, out
    assert f"preflight: ok: master name {NAME} resolves to 127.0.0.1 (after" in out
    assert f"preflight: ok: master {NAME}:{port} is reachable" in out
    assert out.rstrip().endswith("launcher started")


@pytest.mark.netns
def test_the_real_resolver_never_sees_the_name_and_the_launcher_never_starts(tmp_path):
    hosts, nsswitch = _private_resolver(tmp_path)
    start = time.monotonic()
    process = _preflight_in_private_mounts(hosts, nsswitch, free_port(), "2")
    out, _ = process.communicate(timeout=30)
    assert time.monotonic() - start < 6
    assert process.returncode == 1, out
    errors = [line for line in out.splitlines() if line.startswith("preflight: error:")]
    assert errors == [f"preflight: error: master name {NAME} did not resolve within 2 s (Name or service not known): "
                      "it is rank 0's pod in this run's headless Service; check that the service task succeeded, "
                      "that rank 0's pod runs, and that cluster DNS answers"]
    assert "launcher started" not in out
