#!/usr/bin/env python3
"""Per-node checks before torchrun, and NIC auto-discovery.

    python3 torchdag/agents/preflight.py --master-addr ADDR --master-port PORT --node-rank R \
        --nproc-per-node N [--nnodes M] [--nic NAME|auto] [--device npu|cuda|cpu] \
        [--timeout SECONDS] [--wait-for-name] [--exec CMD [ARG...]]

Prints one line per finding (``preflight: ok|warning|error: ...``) and exits
1 if any finding is an error.  With ``--exec`` everything after it is the
command; on success the NIC variables are exported and the command replaces
this process (argv passed through unchanged); on failure it is not run.

Standard library only (plus ``ip`` from iproute2 when present): it cannot be broken by torch_npu.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import fcntl
import ipaddress
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time

if __package__:  # imported as torchdag.agents.preflight
    from .torchdag_device import device_files, kind_from_files, visible_devices
else:  # run by path, torchdag_device.py beside it: the image's torchdag/agents/ or the Workflow's ConfigMap
    from torchdag_device import device_files, kind_from_files, visible_devices

OK, WARNING, ERROR = "ok", "warning", "error"
NPU_CONTROL_FILES = ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]  # beside /dev/davinciN


@dataclasses.dataclass(frozen=True)
class Finding:
    level: str  # ok | warning | error
    message: str

    @property
    def fatal(self) -> bool:
        return self.level == ERROR

    def __str__(self) -> str:
        return f"preflight: {self.level}: {self.message}"


# ---------------------------------------------------------------- interfaces

def _ip_json(*args: str):
    ip = shutil.which("ip")
    if not ip:
        return None
    try:
        out = subprocess.run([ip, "-j", *args], capture_output=True, text=True, timeout=5, check=True).stdout
        return json.loads(out or "[]")
    except (subprocess.SubprocessError, OSError, ValueError):
        return None


def _siocgifaddr(name: str) -> str | None:
    """Primary IPv4 address of an interface via ioctl (fallback without `ip`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def interfaces() -> dict[str, list[str]]:
    """Interface name -> its IPv4 addresses (possibly empty)."""
    data = _ip_json("addr", "show")
    if data is not None:
        return {
            link["ifname"]: [a["local"] for a in link.get("addr_info", []) if a.get("family") == "inet"]
            for link in data if "ifname" in link
        }
    result = {}
    for _, name in socket.if_nameindex():
        addr = _siocgifaddr(name)
        result[name] = [addr] if addr else []
    return result


def resolve_ipv4(host: str) -> str:
    """IPv4 address for host (raises OSError when it does not resolve)."""
    infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    return infos[0][4][0]


def discover_nic(master_addr: str, master_port: int = 29500) -> tuple[str, str]:
    """(interface, its IPv4) this host uses to reach master_addr.

    When master_addr is one of this host's own addresses (we *are* the
    master), the route lookup would say ``lo``; peers must reach us on the
    interface that owns the address, so that one is returned (``lo`` only for
    a loopback master address)."""
    target = resolve_ipv4(master_addr)
    ifaces = interfaces()
    for name, addrs in ifaces.items():
        if target in addrs:
            return name, target
    route = _ip_json("route", "get", target)
    if route:
        dev, src = route[0].get("dev"), route[0].get("prefsrc")
        if dev and src:
            return dev, src
        if dev and ifaces.get(dev):
            return dev, ifaces[dev][0]
    # No `ip`: let the kernel pick the source address of a UDP "connection"
    # (connect() on UDP sends nothing) and find the interface that owns it.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((target, master_port or 9))
        src = s.getsockname()[0]
    for name, addrs in ifaces.items():
        if src in addrs:
            return name, src
    raise OSError(f"no local interface owns {src}, the source address towards {target}")


def nic_env(ifname: str, ipv4: str, device: str | None) -> dict[str, str]:
    """The variables that pin each communication library to one interface.
    NCCL and HCCL treat a bare name as a prefix (eth0 would match eth01);
    a leading '=' asks for the exact name.  HCCL_IF_IP wins over
    HCCL_SOCKET_IFNAME in HCCL, so both are set consistently."""
    env = {"GLOO_SOCKET_IFNAME": ifname}
    if device == "npu":
        env.update(HCCL_SOCKET_IFNAME=f"={ifname}", HCCL_IF_IP=ipv4)
    elif device == "cuda":
        env["NCCL_SOCKET_IFNAME"] = f"={ifname}"
    return env


# -------------------------------------------------------------------- checks

def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def check_nic(nic: str, ifaces: dict[str, list[str]]) -> Finding:
    if nic not in ifaces:
        have = ", ".join(sorted(ifaces)) or "none"
        return Finding(ERROR, f"NIC {nic!r} does not exist on this node (interfaces: {have}); "
                              "fix `nic:` for this node in cluster.yaml or use `nic: auto`")
    if not ifaces[nic]:
        return Finding(ERROR, f"NIC {nic!r} has no IPv4 address; gloo/HCCL cannot bind it")
    return Finding(OK, f"NIC {nic} has IPv4 {', '.join(ifaces[nic])}")


def check_hostname(master_is_loopback: bool) -> Finding:
    """Without a NIC, gloo binds whatever the hostname resolves to."""
    host = socket.gethostname()
    try:
        addr = resolve_ipv4(host)
    except OSError as exc:
        return Finding(ERROR, f"hostname {host!r} does not resolve ({exc}) and no NIC is set: gloo falls back to "
                              "loopback and peers fail with 'connectFullMesh failed'. Fix: set `nic:` for this node "
                              "in cluster.yaml (or `nic: auto`), or export GLOO_SOCKET_IFNAME=<interface>")
    if not _is_loopback(addr):
        return Finding(OK, f"hostname {host} resolves to {addr}")
    if master_is_loopback:
        return Finding(WARNING, f"hostname {host} resolves to loopback {addr}; fine while every rank is on this host")
    return Finding(ERROR, f"hostname {host!r} resolves to loopback {addr} and no NIC is set: gloo binds loopback "
                          "and the other nodes fail with 'connectFullMesh failed'. Fix: set `nic:` for this node "
                          "in cluster.yaml (or `nic: auto`), or export GLOO_SOCKET_IFNAME=<interface>")


def check_master_reachable(addr: str, port: int, timeout: float) -> Finding:
    """Retry until the master's rendezvous port accepts a TCP connection
    (it starts when the master's torchrun starts, and its DNS name may
    appear late)."""
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, min(2.0, left))):
                return Finding(OK, f"master {addr}:{port} is reachable")
        except OSError as exc:
            last = exc.strerror or str(exc)
        if time.monotonic() + 0.5 > deadline:
            return Finding(ERROR, f"master {addr}:{port} not reachable within {timeout:g}s ({last}); "
                                  "check the master node is up, its address/port, and network policy")
        time.sleep(0.5)


def wait_for_name(addr: str, timeout: float) -> tuple[Finding, str | None]:
    """(finding, IPv4) once `addr` resolves. On the pod network the master's name exists only
    once its pod has an IP and the run's headless Service publishes it; a torchrun started
    before that fails at once (pytorch#73682). Polls within timeout (a lookup that hangs in
    DNS can overrun it by the resolver's own timeout)."""
    start = time.monotonic()
    last = "no attempt"
    while True:
        try:
            ip = resolve_ipv4(addr)
            waited = time.monotonic() - start
            return Finding(OK, f"master name {addr} resolves to {ip}"
                               + (f" (after {waited:.0f} s)" if waited >= 1 else "")), ip
        except OSError as exc:
            last = exc.strerror or str(exc)
        if time.monotonic() + 0.5 > start + timeout:
            return Finding(ERROR, f"master name {addr} did not resolve within {timeout:g} s ({last}): it is rank 0's "
                                  "pod in this run's headless Service; check that the service task succeeded, that "
                                  "rank 0's pod runs, and that cluster DNS answers"), None
        time.sleep(0.5)


def check_port_free(port: int) -> Finding:
    # SO_REUSEADDR as the rendezvous store uses it: a TIME_WAIT leftover is
    # fine, a listening process is not.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return Finding(ERROR, f"master port {port} is already in use on this node (another job, or "
                                      "hostNetwork neighbour); pick another master port")
            return Finding(ERROR, f"cannot bind master port {port}: {exc}")
    return Finding(OK, f"master port {port} is free")


def check_device_access(paths: list[str]) -> Finding | None:
    """A device file there but not ours to open (root, capabilities dropped, not in the device group:
    Project-HAMi/ascend-device-plugin#139). access(2), as an open may claim the device."""
    if not (blocked := [p for p in paths if os.path.exists(p) and not os.access(p, os.R_OK | os.W_OK)]):
        return None
    info = os.stat(blocked[0])
    return Finding(ERROR, f"{blocked[0]} exists but cannot be opened by uid {os.getuid()} (owner {info.st_uid}:"
                          f"{info.st_gid}, mode {info.st_mode & 0o777:o}; {len(blocked)} such file(s)): set "
                          f"ascend.deviceGroup: {info.st_gid} (supplementalGroups) or keep CAP_DAC_OVERRIDE "
                          "(containerSecurity.addCapabilities); see docs/ascend.md")


def check_devices(kind: str, nproc: int) -> Finding:
    if kind == "cpu":
        return Finding(OK, f"device cpu: {nproc} process(es) need no accelerator")
    if kind == "npu" and (blocked := check_device_access(device_files("npu") + NPU_CONTROL_FILES)):
        return blocked
    n = visible_devices(kind)
    if n < nproc:
        return Finding(ERROR, f"{n} visible {kind} device(s) < nproc-per-node {nproc}; request more devices "
                              "or lower nproc")
    return Finding(OK, f"{n} visible {kind} device(s) cover nproc-per-node {nproc}")


def run_checks(master_addr: str, master_port: int, node_rank: int, nproc_per_node: int,
               nic: str | None = None, device: str | None = None, timeout: float = 60.0,
               nnodes: int | None = None, wait_name: bool = False) -> list[Finding]:
    """All checks for this node; a nic of 'auto' is discovered (see discover_nic). With
    wait_name every rank first waits for the master's name (the pod network), and the
    name and the master's port share one bound, timeout."""
    findings: list[Finding] = []
    nic = nic or os.environ.get("GLOO_SOCKET_IFNAME") or None
    start = time.monotonic()
    if wait_name:
        found, master_ip = wait_for_name(master_addr, timeout)
        if found.fatal:
            return [found]  # every later check would only wait for the same name again
        findings.append(found)
        timeout = max(0.5, timeout - (time.monotonic() - start))
    else:
        try:
            master_ip = resolve_ipv4(master_addr)
        except OSError as exc:
            master_ip = None
            if node_rank == 0:
                findings.append(Finding(WARNING, f"master address {master_addr!r} does not resolve here yet ({exc})"))
    if nic == "auto":
        try:
            name, ip = discover_nic(master_addr, master_port)
            findings.append(Finding(OK, f"nic auto: {name} ({ip}) routes to master {master_addr}"))
        except OSError as exc:
            findings.append(Finding(ERROR, f"nic auto: cannot find the interface towards {master_addr}: {exc}"))
    elif nic:
        for name in nic.split(","):  # GLOO_SOCKET_IFNAME may list several
            findings.append(check_nic(name.strip().lstrip("="), interfaces()))
    else:
        single = nnodes == 1 or (master_ip is not None and _is_loopback(master_ip))
        findings.append(check_hostname(master_is_loopback=single))
    if node_rank == 0:
        findings.append(check_port_free(master_port))
    else:
        findings.append(check_master_reachable(master_addr, master_port, timeout))
    findings.append(check_devices(device or detect_device(), nproc_per_node))
    return findings


def detect_device() -> str:
    """TORCHDAG_DEVICE, else what the device files say, without torch (torchdag_device.py)."""
    return kind_from_files()


# ----------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchdag/agents/preflight.py", allow_abbrev=False,
        description="Per-node checks before torchrun; optional NIC discovery and exec.",
        epilog="Exit status: 0 no error found (or, with --exec, the command's own), 1 an error was found (the "
        "command is not run), 2 usage, 127 the command could not be started.")
    p.add_argument("--master-addr", required=True, help="the master node's address (node rank 0)")
    p.add_argument("--master-port", type=int, required=True, help="the rendezvous port (--master_port)")
    p.add_argument("--node-rank", type=int, required=True, help="this node's rank; 0 is the master")
    p.add_argument("--nproc-per-node", type=int, required=True, help="processes (devices) this node starts")
    p.add_argument("--nnodes", type=int, default=None, help="total nodes; 1 makes a loopback hostname harmless")
    p.add_argument("--nic", default=None, help="interface name (comma list allowed) or 'auto'")
    p.add_argument("--device", choices=("npu", "cuda", "cpu"), default=None,
                   help="default: TORCHDAG_DEVICE, else detected from /dev")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the master (non-master nodes)")
    p.add_argument("--wait-for-name", action="store_true",
                   help="the master's address is a DNS name that appears late (the pod network): every rank "
                        "waits up to --timeout for it to resolve, then for the master's port (other ranks)")
    # main() splits argv at the first --exec before parsing (so the command's own options are
    # never read as preflight's); declared here so that --help lists it.
    p.add_argument("--exec", dest="command", nargs=argparse.REMAINDER, metavar="CMD",
                   help="CMD [ARG ...], last: everything after --exec is a command, passed through "
                        "unchanged. When no check fails, the variables for --nic (GLOO_SOCKET_IFNAME, "
                        "and HCCL_*/NCCL_* by device) are exported and the command replaces this process; "
                        "otherwise it is not run. Every rendered preflight starts the launcher this way")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] | None = None
    if "--exec" in argv:
        # Everything after --exec belongs to the command, untouched.
        i = argv.index("--exec")
        argv, command = argv[:i], argv[i + 1:]
        if not command:
            print("preflight: error: --exec needs a command", file=sys.stderr)
            return 2
    args = build_parser().parse_args(argv)
    device = args.device or detect_device()
    findings = run_checks(args.master_addr, args.master_port, args.node_rank, args.nproc_per_node,
                          nic=args.nic, device=device, timeout=args.timeout, nnodes=args.nnodes,
                          wait_name=args.wait_for_name)
    for f in findings:
        print(f, flush=True)
    if any(f.fatal for f in findings):
        if command:
            print(f"preflight: not starting {command[0]!r}: fatal findings above", flush=True)
        return 1
    if command is None:
        return 0
    if args.nic:
        if args.nic == "auto":
            name, ip = discover_nic(args.master_addr, args.master_port)
        else:
            name = args.nic.split(",")[0].strip().lstrip("=")
            ip = interfaces()[name][0]
        exports = nic_env(name, ip, device)
        if args.nic != "auto" and "," in args.nic:
            exports["GLOO_SOCKET_IFNAME"] = args.nic  # keep the user's list for gloo
        os.environ.update(exports)
        print("preflight: export " + " ".join(f"{k}={v}" for k, v in exports.items()), flush=True)
    print(f"preflight: exec {command[0]}", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"preflight: error: cannot exec {command[0]!r}: {exc}", file=sys.stderr, flush=True)
        return 127


if __name__ == "__main__":
    sys.exit(main())
