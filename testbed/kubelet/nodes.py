"""Keeps our Nodes Ready, as a kubelet's two heartbeats do: a Lease in kube-node-lease
renewed every `lease_every` seconds (kubelet: 10 s of a 40 s lease) and the Ready condition
in the Node's status, posted at start and every `status_every` seconds (kubelet reports an
unchanged status every 5 minutes). The node-lifecycle controller taints a Node whose lease
and status both go stale for --node-monitor-grace-period (50 s by default); with many
Nodes the renewals are made by a few threads."""

from __future__ import annotations

import ipaddress
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes.client.exceptions import ApiException

from ..kube import STRATEGIC, Kube
from .status import now

LEASE_SECONDS = 40


class NodeKeeper:
    def __init__(self, api: Kube, nodes: list[str], *, lease_every: float = 10.0, status_every: float = 300.0,
                 workers: int = 16, say=print):
        self.api = api
        self.nodes = list(nodes)
        self.lease_every = lease_every
        self.status_every = status_every
        self.say = say
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="heartbeat")
        self.info: dict[str, dict] = {}  # node -> its object as last read
        self.failing: set[str] = set()
        self.posted: set[str] = set()  # Nodes whose status this kubelet has posted
        self.serving_port = 0  # the kubelet API's port (logs.py), once it serves
        self._stop = threading.Event()

    def address(self, node: str) -> str:
        addresses = ((self.info.get(node) or {}).get("status") or {}).get("addresses") or []
        for kind in ("InternalIP", "ExternalIP"):
            for entry in addresses:
                if entry.get("type") == kind and _is_ip(entry.get("address", "")):
                    return entry["address"]
        # A Node registered with a DNS name as its address (a values file's host without
        # `address`): the API server takes only IPs as a pod's hostIP/podIP; the stand-in.
        return "127.0.0.1"

    def allocatable(self, node: str) -> dict:
        return ((self.info.get(node) or {}).get("status") or {}).get("allocatable") or {}

    def load(self) -> list[str]:
        """Read every Node once; returns the names that do not exist."""
        missing = []
        for node in self.nodes:
            found = self.api.get_or_none(f"/api/v1/nodes/{node}")
            if found is None:
                missing.append(node)
            else:
                self.info[node] = found
        return missing

    def post_status(self, node: str) -> None:
        """The Ready condition and the pressure conditions, with a fresh heartbeat (strategic
        merge by condition type: the rest of the Node's status stays as registered)."""
        stamp = now()
        known = {c.get("type"): c for c in ((self.info.get(node) or {}).get("status") or {}).get("conditions") or []}
        conditions = []
        for kind, value, reason, message in (
                ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                ("Ready", "True", "KubeletReady", "torchdag process kubelet is posting ready status")):
            old = known.get(kind) or {}
            since = old.get("lastTransitionTime") if old.get("status") == value else stamp
            conditions.append({"type": kind, "status": value, "reason": reason, "message": message,
                               "lastHeartbeatTime": stamp, "lastTransitionTime": since or stamp})
        status: dict = {"conditions": conditions}
        if not ((self.info.get(node) or {}).get("status") or {}).get("addresses"):
            status["addresses"] = [{"type": "InternalIP", "address": "127.0.0.1"},
                                   {"type": "Hostname", "address": node}]
        if self.serving_port:
            # Where the API server reaches this kubelet's API (logs): localhost, the port
            # it serves on (kube-apiserver tries InternalDNS first: testbed/cluster/up.py).
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.serving_port}}
            status["addresses"] = status.get("addresses", []) + [{"type": "InternalDNS", "address": "localhost"}]
        self.info[node] = self.api.request("PATCH", f"/api/v1/nodes/{node}/status", body={"status": status},
                                           content_type=STRATEGIC)

    def renew_lease(self, node: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        spec = {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": stamp}
        try:
            self.api.request("PATCH", path, body={"spec": spec}, content_type=STRATEGIC)
        except ApiException as err:
            if err.status != 404:
                raise
            uid = (self.info.get(node) or {}).get("metadata", {}).get("uid")
            owner = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}] if uid else []
            self.api.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", body={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease", "ownerReferences": owner},
                "spec": spec})

    def beat_all(self, status: bool) -> int:
        """One round over every Node; returns how many failed."""
        def one(node: str) -> bool:
            try:
                if status or node not in self.posted:  # a Node served since the last round: its status now
                    self.post_status(node)
                    self.posted.add(node)
                self.renew_lease(node)
            except Exception as err:  # noqa: BLE001 -- said once, and tried again every round
                if node not in self.failing:
                    self.failing.add(node)
                    self.say(f"node {node}: heartbeat failed: {str(err).splitlines()[0]} (said once; "
                             "tried again every round)")
                return False
            if node in self.failing:
                self.failing.discard(node)
                self.say(f"node {node}: heartbeats go through again")
            return True
        return sum(1 for ok in self.pool.map(one, list(self.nodes)) if not ok)

    def run(self) -> None:
        last_status = 0.0
        while not self._stop.is_set():
            begin = time.monotonic()
            due = begin - last_status >= self.status_every
            self.beat_all(status=due)
            if due:
                last_status = begin
            took = time.monotonic() - begin
            if took > self.lease_every:
                self.say(f"heartbeats of {len(self.nodes)} nodes took {took:.1f} s, more than --lease-every "
                         f"{self.lease_every:g} s")
            self._stop.wait(max(0.0, self.lease_every - took))

    def stop(self) -> None:
        self._stop.set()
        self.pool.shutdown(wait=False)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
