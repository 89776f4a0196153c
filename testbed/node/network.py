"""Addresses and links of one cluster's real nodes, in this machine's network namespace.

A cluster claims a slot S (0-63) for as long as it exists; S gives it two /24s of
198.18.0.0/15, the range the tests may use (docs/e2e.md), that no other cluster on this
machine uses at the same time:

    198.18.(128+2S).0/24   services: 198.18.(128+2S).128/25 is the service range (the
                           kubernetes Service .129, the cluster DNS .138); node k's
                           address is 198.18.(128+2S).(k+1)
    198.18.(129+2S).0/24   pods: node k's pods get 198.18.(129+2S).(32k)/27, gateway .32k+1

Each node has a bridge `tdS.k` (its "NIC"): the node's address is on it, and the CNI bridge
plugin plugs the node's pods into it. A bridge `tdS.svc` holds the service addresses
(listened on by the kubernetes Service's proxy and the cluster DNS). Nothing leaves this
machine: the slot's /23 has an `unreachable` route, and packets that pods send are routed
only within the cluster (a policy rule sends whatever arrives on the bridges to a table with
the cluster's pod routes and an unreachable default). Forwarding is switched on for the
bridges alone (net.ipv4.conf.<bridge>.forwarding), not for the machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

SLOTS = 64
MAX_NODES = 8
CLAIMS = Path("/run/torchdag-nodes")  # claims of slots: one file per slot, naming its cluster
TABLE_BASE = 17000  # the policy-routing table of slot S is TABLE_BASE + S


class NetworkError(RuntimeError):
    pass


@dataclass(frozen=True)
class Slot:
    index: int

    @property
    def services(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"198.18.{128 + 2 * self.index}.128/25")

    @property
    def range(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"198.18.{128 + 2 * self.index}.0/23")

    @property
    def service_ip(self) -> str:
        """The kubernetes Service's ClusterIP: the service range's first address."""
        return str(self.services.network_address + 1)

    @property
    def dns_ip(self) -> str:
        return str(self.services.network_address + 10)

    def node_ip(self, k: int) -> str:
        return f"198.18.{128 + 2 * self.index}.{k + 1}"

    def pod_subnet(self, k: int) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"198.18.{129 + 2 * self.index}.{32 * k}/27")

    def pod_gateway(self, k: int) -> str:
        return str(self.pod_subnet(k).network_address + 1)

    def bridge(self, k: int) -> str:
        return f"td{self.index}.{k}"

    @property
    def service_bridge(self) -> str:
        return f"td{self.index}.svc"

    @property
    def table(self) -> int:
        return TABLE_BASE + self.index


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _sysctl(path: str, value: str) -> None:
    Path("/proc/sys/net/ipv4/conf", path, "forwarding").write_text(value)


@contextlib.contextmanager
def _claims_locked():
    CLAIMS.mkdir(parents=True, exist_ok=True)
    with open(CLAIMS / "lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _owner_alive(claim: Path) -> bool:
    """A claim holds while its cluster's state file says the slot is its own."""
    try:
        owner = Path(json.loads(claim.read_text())["cluster"])
        return json.loads((owner / "state.json").read_text()).get("slot") == int(claim.name)
    except (OSError, ValueError, KeyError):
        return False


def claim(cluster_root: Path, state: dict, save) -> Slot:
    """This cluster's slot (kept in its state.json; claimed now when it has none). `save(state)`
    writes state.json: it runs under the claims' lock, since a claim whose owner's state does not
    name the slot yet reads as dead to the next cluster, which would take the slot as well."""
    if "slot" in state:
        return Slot(state["slot"])
    with _claims_locked():
        for index in range(SLOTS):
            path = CLAIMS / str(index)
            if path.exists() and _owner_alive(path):
                continue
            release(Slot(index), force=True)  # what a cluster that died without `down` left behind
            path.write_text(json.dumps({"cluster": str(cluster_root)}) + "\n")
            state["slot"] = index
            save(state)
            return Slot(index)
    raise NetworkError(f"all {SLOTS} cluster slots of this machine are taken ({CLAIMS})")


def release(slot: Slot, force: bool = False) -> None:
    """Remove the slot's links, routes and rules, and its claim."""
    for link in links(slot):
        ip("link", "del", link, check=False)
    ip("route", "del", "unreachable", str(slot.range), check=False)
    while ip("rule", "del", "lookup", str(slot.table), check=False).returncode == 0:
        pass
    ip("route", "flush", "table", str(slot.table), check=False)
    if not force:
        with _claims_locked():
            (CLAIMS / str(slot.index)).unlink(missing_ok=True)


def links(slot: Slot) -> list[str]:
    listed = ip("-o", "link", "show", check=False).stdout.splitlines()
    names = [line.split(":")[1].strip().split("@")[0] for line in listed if ":" in line]
    return [name for name in names if name.startswith(f"td{slot.index}.")]


def _bridge(name: str, addresses: list[str]) -> None:
    if ip("link", "show", name, check=False).returncode:
        ip("link", "add", name, "type", "bridge")
    present = ip("-o", "addr", "show", "dev", name).stdout
    for address in addresses:
        if f" {address} " not in present and f" {address.split('/')[0]}/" not in present:
            ip("addr", "add", address, "dev", name)
    ip("link", "set", name, "up")


def setup_services(slot: Slot) -> None:
    """The service bridge and the slot's guard routes (idempotent)."""
    _bridge(slot.service_bridge, [f"{slot.service_ip}/32", f"{slot.dns_ip}/32"])
    if str(slot.range) not in ip("route", "show", "type", "unreachable").stdout:
        ip("route", "add", "unreachable", str(slot.range))


TEST_RANGE = ipaddress.ip_network("198.18.0.0/15")


def local_addresses() -> set[str]:
    listed = ip("-o", "-4", "addr", "show", check=False).stdout.split()
    return {word.split("/")[0] for word in listed if "/" in word and word[0].isdigit()}


def adoptable(address: str, nic: str) -> str:
    """Why a values file's address and NIC cannot be a node's own here ("" when they can): the
    address must be in the test range and on no interface of this machine, the NIC a name no
    interface has."""
    try:
        if ipaddress.ip_address(address) not in TEST_RANGE:
            return f"{address} is outside {TEST_RANGE}, the only addresses this machine may take"
    except ValueError:
        return f"{address!r} is not an IPv4 address"
    if address in local_addresses():
        return f"{address} is on this machine already"
    if not nic or len(nic) > 15 or ip("link", "show", nic, check=False).returncode == 0:
        return f"an interface {nic} exists on this machine already" if nic else "no nic given"
    return ""


def setup_node(slot: Slot, k: int, bridge: str | None = None, address: str | None = None) -> None:
    """Node k's bridge (the slot's `td<slot>.<k>`, or `bridge`) with its address (the slot's, or
    `address`) and its pods' gateway, forwarding on it, and the policy routing that keeps its
    pods' packets within the cluster (idempotent)."""
    if not 0 <= k < MAX_NODES:
        raise NetworkError(f"a cluster has at most {MAX_NODES} real nodes")
    bridge = bridge or slot.bridge(k)
    _bridge(bridge, [f"{address or slot.node_ip(k)}/32", f"{slot.pod_gateway(k)}/{slot.pod_subnet(k).prefixlen}"])
    _sysctl(bridge, "1")
    ip("route", "replace", str(slot.pod_subnet(k)), "dev", bridge, "table", str(slot.table))
    if "default" not in ip("route", "show", "table", str(slot.table)).stdout:
        ip("route", "add", "unreachable", "default", "table", str(slot.table))
    if f"iif {bridge} lookup {slot.table}" not in ip("rule", "show").stdout:
        ip("rule", "add", "iif", bridge, "lookup", str(slot.table), "priority", str(slot.table))


def remove_node(slot: Slot, k: int, bridge: str | None = None) -> None:
    bridge = bridge or slot.bridge(k)
    ip("rule", "del", "iif", bridge, "lookup", str(slot.table), check=False)
    ip("route", "del", str(slot.pod_subnet(k)), "table", str(slot.table), check=False)
    ip("link", "del", bridge, check=False)
