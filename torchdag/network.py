"""The pod network (network.mode: pod, or the older hostNetwork: false): what the plan adds
for it. Each run gets one headless Service (a resource template owned by the Workflow,
applied before any node pod) that selects this run's node pods by a per-run label; each
node's pod is named node-<rank> in that Service's subdomain, so rank 0, the master, is
node-0.<run>.<namespace>.svc.<clusterDomain>. The catalogue (`network`) holds the texts;
chart/templates/_plan.tpl computes the same under the same names."""

from __future__ import annotations

from .catalog import catalog, fill, items
from .yamlout import quote


def is_pod(values: dict) -> bool:
    """network.mode when set, else the older hostNetwork key (false means pod)."""
    mode = (values.get("network") or {}).get("mode")
    return mode == "pod" or (not mode and values.get("hostNetwork") is False)


def master_address(values: dict) -> str:
    """Rank 0's DNS name, with Argo's placeholders for the run and its namespace."""
    entry = catalog()["network"]
    return fill(entry["masterAddress"], {"run": entry["run"], "clusterDomain": values["network"]["clusterDomain"]})


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
    facts = {"run": entry["run"], "runLabel": entry["runLabel"], "port": str(int(values["port"])),
             "job": quote(values["name"])}
    return {
        "run": entry["run"],
        "label": (entry["runLabel"], entry["run"]),
        "patch": items(entry["podSpecPatch"], facts),
        "manifest": items(entry["service"], facts),
    }


def node_depends(gang: dict | None, network: dict | None) -> str:
    """The DAG tasks every node task waits for: the gang's PodGroup and the run's Service."""
    tasks = (["gang"] if gang and gang["manifest"] else []) + ([catalog()["network"]["task"]] if network else [])
    return " && ".join(tasks)
