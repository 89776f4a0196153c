"""Rank 0's DNS name through a real cluster DNS (go and netns tiers). CoreDNS
(tools/coredns: its kubernetes plugin) watches the local control plane and answers
node-0.<run>.<namespace>.svc.cluster.local from the run's headless Service once the
EndpointSlice controller lists the pod's IP. Preflight runs in a network namespace of its
own (a pod's stand-in, an address in 198.18.0.0/15) whose resolv.conf names that CoreDNS:
it waits for the name, then for the master's port, then starts the launcher; a name that
never appears ends it with one line. The DNS race of pytorch#73682, end to end."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubelet_cluster_helpers import kubeconfig_for
from required import missing, netns_unavailable

from helpers import REPO
from torchdag import pipeline

pytestmark = [pytest.mark.go, pytest.mark.netns]
BIN = REPO / ".tools" / "bin"
PREFLIGHT = REPO / "torchdag" / "agents" / "preflight.py"
PORT = 29500
LISTEN = ("import socket, sys, time\n"
          "s = socket.create_server((sys.argv[1], int(sys.argv[2]))); s.settimeout(0.5); end = time.time() + 90\n"
          "while time.time() < end:\n"
          "    try: s.accept()[0].close()\n"
          "    except OSError: pass\n")


def run(*argv: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, **kwargs)
    assert not check or done.returncode == 0, f"{' '.join(argv)}: {done.stderr}{done.stdout}"
    return done


@pytest.fixture
def pod_netns():
    """A network namespace like a pod's: a veth pair, the pod end at .1, the host end (where
    CoreDNS listens) at .254, and /etc/netns/<name>/resolv.conf naming the host end."""
    reason = netns_unavailable()
    if reason:
        missing(reason)
    tag = uuid.uuid4().hex[:4]
    name, host_if, pod_if = f"tdpn{tag}", f"tdpnh{tag}", f"tdpnp{tag}"
    subnet = f"198.19.{random.randrange(1, 254)}"
    host_ip, pod_ip = f"{subnet}.254", f"{subnet}.1"
    etc = Path("/etc/netns") / name
    run("ip", "netns", "add", name)
    try:
        run("ip", "link", "add", host_if, "type", "veth", "peer", "name", pod_if)
        run("ip", "link", "set", pod_if, "netns", name)
        run("ip", "addr", "add", f"{host_ip}/24", "dev", host_if)
        run("ip", "link", "set", host_if, "up")
        for args in (["addr", "add", f"{pod_ip}/24", "dev", pod_if], ["link", "set", pod_if, "up"],
                     ["link", "set", "lo", "up"]):
            run("ip", "netns", "exec", name, "ip", *args)
        etc.mkdir(parents=True)
        (etc / "resolv.conf").write_text(f"nameserver {host_ip}\noptions timeout:1 attempts:1\n")
        yield name, pod_if, host_ip, pod_ip
    finally:
        run("ip", "link", "del", host_if, check=False)
        run("ip", "netns", "del", name, check=False)
        shutil.rmtree(etc, ignore_errors=True)


@pytest.fixture
def coredns(request, pod_netns, tmp_path):
    binary = BIN / "coredns"
    if not binary.is_file():
        pytest.fail("coredns is not built: run `make go-tools` (tools/coredns)")
    kubeconfig = kubeconfig_for(request)
    _, _, host_ip, _ = pod_netns
    corefile = tmp_path / "Corefile"
    corefile.write_text(f"cluster.local:53 {{\n  bind {host_ip}\n  errors\n  log\n"
                        f"  kubernetes cluster.local {{\n    kubeconfig {kubeconfig}\n  }}\n}}\n")
    log = tmp_path / "coredns.log"
    proc = subprocess.Popen([str(binary), "-conf", str(corefile)], stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "CoreDNS-" not in log.read_text(errors="replace"):  # printed once it serves
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
        time.sleep(0.2)
    yield kubeconfig, log
    proc.terminate()
    proc.wait(20)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    return run(str(BIN / "kubectl"), f"--kubeconfig={kubeconfig}", *args, input=stdin).stdout


def preflight(netns: str, nic: str, master: str, timeout: int) -> subprocess.Popen:
    return subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, str(PREFLIGHT), f"--master-addr={master}",
         f"--master-port={PORT}", "--node-rank=1", "--nproc-per-node=1", f"--nic={nic}", "--device=cpu",
         f"--timeout={timeout}", "--wait-for-name", "--exec", sys.executable, "-c", "print('launcher started')"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_preflight_waits_for_the_masters_name_from_cluster_dns_then_starts_the_launcher(pod_netns, coredns,
                                                                                         tmp_path):
    netns, nic, _, pod_ip = pod_netns
    kubeconfig, dns_log = coredns
    namespace, run_name = f"pn-{uuid.uuid4().hex[:6]}", f"podnet-{uuid.uuid4().hex[:5]}"
    kubectl(kubeconfig, "create", "namespace", namespace)
    try:
        # The run's Service as rendered (its `service` task's manifest), and rank 0's pod as Argo makes it.
        doc = yaml.safe_load(pipeline.run(REPO / "tests" / "cases" / "pod-network.yaml").text)
        manifest = next(t for t in doc["spec"]["templates"] if t["name"] == "service")["resource"]["manifest"]
        kubectl(kubeconfig, "apply", "-n", namespace, "-f", "-",
                stdin=manifest.replace("{{workflow.name}}", run_name))  # the case's port is PORT
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{run_name}-node-0", "labels": {
            "torchdag.io/run": run_name}}, "spec": {"hostname": "node-0", "subdomain": run_name,
                                                   "containers": [{"name": "main", "image": "x"}],
                                                   # no scheduler binds it, so no kubelet gives it an IP: the test does
                                                   "schedulerName": "torchdag-test-unscheduled"}}
        kubectl(kubeconfig, "apply", "-n", namespace, "-f", "-", stdin=json.dumps(pod))
        master = f"node-0.{run_name}.{namespace}.svc.cluster.local"
        listener = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", LISTEN, pod_ip, str(PORT)])
        try:
            worker = preflight(netns, nic, master, 60)
            time.sleep(3)
            assert worker.poll() is None, worker.communicate()[0]  # no IP yet, so no name: still waiting
            # What the kubelet reports once rank 0's pod has its IP: the name appears.
            kubectl(kubeconfig, "patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {"phase": "Running", "podIP": pod_ip,
                                                                 "podIPs": [{"ip": pod_ip}]}}))
            out, _ = worker.communicate(timeout=60)
        finally:
            listener.kill()
            listener.wait()
        assert worker.returncode == 0, out + dns_log.read_text(errors="replace")[-2000:]
        assert f"preflight: ok: master name {master} resolves to {pod_ip} (after" in out
        assert f"preflight: ok: master {master}:{PORT} is reachable" in out
        assert out.rstrip().endswith("launcher started")

        # Another run's master never appears: one line, within the bound, and no launcher.
        never = preflight(netns, nic, f"node-0.other-run.{namespace}.svc.cluster.local", 3)
        out, _ = never.communicate(timeout=30)
        assert never.returncode == 1 and "launcher started" not in out
        assert [line for line in out.splitlines() if line.startswith("preflight: error:")] == [
            f"preflight: error: master name node-0.other-run.{namespace}.svc.cluster.local did not resolve within "
            "3 s (Name or service not known): it is rank 0's pod in this run's headless Service; check that the "
            "service task succeeded, that rank 0's pod runs, and that cluster DNS answers"]
    finally:
        kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false")
