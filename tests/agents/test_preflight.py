"""torchdag/agents/preflight.py: real sockets and interfaces on this host, only 127.0.0.1 traffic."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys

import pytest
from required import missing, netns_unavailable

from trainer_helpers import PREFLIGHT, REPO, clean_env, free_port

sys.path.insert(0, str(REPO))

from torchdag.agents import preflight
from torchdag.agents.preflight import discover_nic, interfaces, nic_env, run_checks

PRINT_ARGV = "import json, os, sys; print('ARGV=' + json.dumps(sys.argv[1:])); " \
             "print('ENV=' + json.dumps({k: v for k, v in os.environ.items() if k.endswith(('IFNAME', '_IF_IP'))}))"


def preflight_cli(*args: str, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PREFLIGHT), *args], capture_output=True, text=True,
                          env=env or clean_env(), timeout=timeout)


def lines(r: subprocess.CompletedProcess, level: str) -> list[str]:
    return [ln for ln in r.stdout.splitlines() if ln.startswith(f"preflight: {level}:")]


def test_missing_nic(tmp_path):
    r = preflight_cli("--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--node-rank", "0",
                      "--nproc-per-node", "2", "--nic", "nosuchnic0")
    assert r.returncode == 1
    (err,) = lines(r, "error")
    assert "NIC 'nosuchnic0' does not exist on this node" in err and "lo" in err


def test_nic_without_ipv4_is_fatal():
    """In a fresh network namespace `lo` exists but is down without an address: exactly
    a NIC that is present and unusable."""
    reason = netns_unavailable()
    if reason:
        missing(reason)
    r = subprocess.run(["unshare", "--net", sys.executable, str(PREFLIGHT), "--master-addr", "127.0.0.1",
                        "--master-port", "29500", "--node-rank", "0", "--nproc-per-node", "1", "--nic", "lo"],
                       capture_output=True, text=True, env=clean_env(), timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert any("has no IPv4 address" in line for line in lines(r, "error")), r.stdout


def test_unreachable_master_gives_up_after_timeout():
    closed = free_port()  # nothing listens there once free_port() returns
    r = preflight_cli("--master-addr", "127.0.0.1", "--master-port", str(closed), "--node-rank", "1",
                      "--nproc-per-node", "1", "--timeout", "1.5")
    assert r.returncode == 1
    (err,) = lines(r, "error")
    assert f"master 127.0.0.1:{closed} not reachable within 1.5s" in err and "refused" in err.lower()


def test_reachable_master_is_ok():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        r = preflight_cli("--master-addr", "127.0.0.1", "--master-port", str(port), "--node-rank", "1",
                          "--nproc-per-node", "1", "--timeout", "5")
    assert r.returncode == 0, r.stdout
    assert f"preflight: ok: master 127.0.0.1:{port} is reachable" in r.stdout


def test_master_waits_for_late_master():
    """The master's torchrun may start after this node's preflight: retry."""
    port = free_port()
    code = ("import socket, time; time.sleep(1.0); s = socket.create_server(('127.0.0.1', %d)); "
            "time.sleep(10)" % port)
    late = subprocess.Popen([sys.executable, "-c", code])
    try:
        findings = run_checks("127.0.0.1", port, 1, 1, device="cpu", timeout=30)
    finally:
        late.kill()
        late.wait()
    assert not any(f.fatal for f in findings), findings


def test_busy_master_port():
    with socket.create_server(("0.0.0.0", 0)) as busy:
        port = busy.getsockname()[1]
        r = preflight_cli("--master-addr", "127.0.0.1", "--master-port", str(port), "--node-rank", "0",
                          "--nproc-per-node", "1")
    assert r.returncode == 1
    (err,) = lines(r, "error")
    assert f"master port {port} is already in use on this node" in err


def test_loopback_hostname_without_nic_is_the_writeups_failure(monkeypatch):
    # 'localhost' resolves to loopback everywhere: the state of a pod whose
    # hostname maps to 127.0.1.1. The master address is only parsed, never contacted.
    monkeypatch.setattr(socket, "gethostname", lambda: "localhost")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    findings = run_checks("198.18.0.1", free_port(), 0, 1, device="cpu")
    (err,) = [f for f in findings if f.fatal]
    assert "resolves to loopback" in err.message and "connectFullMesh failed" in err.message
    assert "nic:" in err.message and "GLOO_SOCKET_IFNAME" in err.message
    # A single-node job never leaves the host: only a warning.
    findings = run_checks("198.18.0.1", free_port(), 0, 1, device="cpu", nnodes=1)
    assert not any(f.fatal for f in findings)
    # Setting a NIC is the fix.
    findings = run_checks("198.18.0.1", free_port(), 0, 1, device="cpu", nic="lo")
    assert not any(f.fatal for f in findings)


def test_device_count_must_cover_nproc(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    findings = run_checks("127.0.0.1", free_port(), 0, 2, device="cuda", nic="lo")
    assert any(f.fatal and "0 visible cuda device(s) < nproc-per-node 2" in f.message for f in findings)
    assert not any(f.fatal for f in run_checks("127.0.0.1", free_port(), 0, 64, device="cpu", nic="lo"))


def test_discover_nic_for_loopback_master_is_lo():
    assert discover_nic("127.0.0.1") == ("lo", "127.0.0.1")
    assert discover_nic("localhost")[0] == "lo"


def test_discover_nic_for_own_address_is_its_interface():
    """On the master node the route to its own address is `lo`; peers need the
    interface that owns the address instead."""
    own = [(name, addrs[0]) for name, addrs in interfaces().items() if addrs and name != "lo"]
    if not own:
        pytest.skip("no non-loopback IPv4 interface here")
    name, ip = own[0]
    assert discover_nic(ip) == (name, ip)


def test_discover_nic_without_ip_command():
    """Fallbacks: SIOCGIFADDR for addresses, a UDP connect() for the route."""
    env = clean_env(PATH="/nonexistent", PYTHONPATH=str(REPO))
    code = ("import json, shutil; from torchdag.agents import preflight; assert shutil.which('ip') is None; "
            "print(json.dumps([preflight.discover_nic('127.0.0.1'), preflight.interfaces().get('lo')]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [["lo", "127.0.0.1"], ["127.0.0.1"]]


def test_nic_env_per_device():
    assert nic_env("eth0", "10.0.0.2", "cpu") == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert nic_env("eth0", "10.0.0.2", "npu") == {"GLOO_SOCKET_IFNAME": "eth0", "HCCL_SOCKET_IFNAME": "=eth0",
                                                  "HCCL_IF_IP": "10.0.0.2"}
    assert nic_env("eth0", "10.0.0.2", "cuda") == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "=eth0"}


def test_exec_exports_nic_and_passes_argv_verbatim():
    argv = ["a b", "", "--exec", "$HOME", "\u00fc", "--nic", "-x", "'q'"]
    r = preflight_cli("--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--node-rank", "0",
                      "--nproc-per-node", "1", "--nic", "auto", "--device", "cpu", "--exec",
                      sys.executable, "-c", PRINT_ARGV, *argv)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "preflight: ok: nic auto: lo (127.0.0.1)" in r.stdout
    assert "preflight: export GLOO_SOCKET_IFNAME=lo" in r.stdout
    out = dict(ln.split("=", 1) for ln in r.stdout.splitlines() if ln.startswith(("ARGV=", "ENV=")))
    assert json.loads(out["ARGV"]) == argv
    assert json.loads(out["ENV"]) == {"GLOO_SOCKET_IFNAME": "lo"}


def test_exec_not_run_without_the_devices(tmp_path):
    if preflight.visible_devices("npu") >= 1:
        pytest.skip("this host has NPUs")
    marker = tmp_path / "ran"
    r = preflight_cli("--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--node-rank", "0",
                      "--nproc-per-node", "1", "--nic", "auto", "--device", "npu", "--exec",
                      shutil.which("touch") or "touch", str(marker))
    assert r.returncode == 1 and not marker.exists()
    assert "0 visible npu device(s) < nproc-per-node 1" in r.stdout and "not starting" in r.stdout


def test_exec_not_run_on_fatal_finding(tmp_path):
    marker = tmp_path / "ran"
    with socket.create_server(("0.0.0.0", 0)) as busy:
        r = preflight_cli("--master-addr", "127.0.0.1", "--master-port", str(busy.getsockname()[1]),
                          "--node-rank", "0", "--nproc-per-node", "1", "--exec",
                          shutil.which("touch") or "touch", str(marker))
    assert r.returncode == 1 and not marker.exists()
    assert "not starting" in r.stdout


def test_exec_replaces_the_process():
    """exec, not a child process: same pid, and its exit status is ours."""
    proc = subprocess.Popen([sys.executable, str(PREFLIGHT), "--master-addr", "127.0.0.1", "--master-port",
                             str(free_port()), "--node-rank", "0", "--nproc-per-node", "1", "--exec",
                             sys.executable, "-c", "import os, sys; print('PID', os.getpid()); sys.exit(7)"],
                            stdout=subprocess.PIPE, text=True, env=clean_env())
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 7
    assert f"PID {proc.pid}" in out


def test_finding_format():
    assert str(preflight.Finding("error", "x")) == "preflight: error: x"
