"""The pod network (network.mode: pod): one headless Service per run selecting its node pods
by a per-run label, each pod named node-<rank> in its subdomain, so rank 0 is
node-0.<run>.<namespace>.svc.<clusterDomain>. On the host network (the default) none of this
is printed. chart/templates/_network.tpl is its twin, from the same catalogue entry."""

from __future__ import annotations

from .catalog import argo_parameter, catalog, fill, items, node_name
from .yamlout import quote


def is_pod(values: dict) -> bool:
    """network.mode when set, else the older hostNetwork key (false means pod)."""
    mode = (values.get("network") or {}).get("mode")
    return mode == "pod" or (not mode and values.get("hostNetwork") is False)


def node_nic(node: dict, values: dict) -> str:
    """The NIC a node names (its preflight's and NCCL/GLOO/HCCL's): its own `nic`, else on the pod
    network `network.nic`; "" for none (the host network's default route)."""
    return node.get("nic") or (values["network"]["nic"] if is_pod(values) else "")


def master_address(values: dict) -> str:
    """Rank 0's DNS name, with Argo's placeholders for the run and its namespace."""
    entry = catalog()["network"]
    return fill(entry["masterAddress"], {"master": node_name(0), "run": entry["run"],
                                         "clusterDomain": values["network"]["clusterDomain"]})


def rendezvous_wait(values: dict) -> str:
    """How long preflight waits for the master's name and port: torchrun's own rendezvous
    bound (timeouts.rendezvous, or torchrun's default when that is null)."""
    return str(int(values["timeouts"]["rendezvous"] or catalog()["network"]["rendezvousDefault"]))


def network_plan(values: dict) -> dict | None:
    """What the templates print for the pod network, or None on the host network: the run
    label of every node pod, the pod spec patch (hostname, subdomain) and the Service."""
    if not is_pod(values):
        return None
    entry = catalog()["network"]
    facts = {"run": entry["run"], "runLabel": entry["runLabel"], "jobLabel": catalog()["labels"]["job"],
             "port": str(int(values["port"])), "job": quote(values["name"]),
             "hostname": node_name(argo_parameter("node-rank"))}
    return {
        "run": entry["run"], "task": entry["task"],
        "label": (entry["runLabel"], entry["run"]),
        "patch": items(entry["podSpecPatch"], facts),
        "manifest": items(entry["service"], facts),
    }


def node_depends(gang: dict | None, network: dict | None) -> str:
    """The DAG tasks every node task waits for: the gang's PodGroup and the run's Service."""
    tasks = ([gang["task"]] if gang and gang["manifest"] else []) + ([catalog()["network"]["task"]] if network else [])
    return " && ".join(tasks)
