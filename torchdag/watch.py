"""The tasks that bound how long a node's pod may wait for its machine (scheduling.timeout):
every job's scheduling watch (catalogue `watch`), and under node recovery the host check beside
each retried pod (`hostCheck`). Both run torchdag/agents/gangwatch.py (scheduling.watchCommand).
chart/templates/_watch.tpl is the twin."""

from __future__ import annotations

from .catalog import catalog, fill, items
from .yamlout import dollar_escape


def elastic_from(values: dict) -> int:
    """The first rank of the elastic members (elastic.minNodes; the node count when 0)."""
    return int(values["elastic"]["minNodes"]) or len(values["nodes"])


def _watch_facts(values: dict, nodes: int, gang_plan: dict | None) -> dict:
    """The facts of the scheduling watch's arguments (catalogue `watch` and `hostCheck`)."""
    entry = catalog()["gangs"][gang_plan["kind"]] if gang_plan else {}
    group = entry.get("podGroup")
    # The object the watch reads the gang's reason from and deletes: the PodGroup, or Kueue's Workload.
    watched = group or entry.get("watchObject")
    least = elastic_from(values)
    return {**(watched or {}), "group": catalog()["gangName"], "count": str(nodes), "gang": bool(gang_plan),
            "timeout": str(int(values["scheduling"]["timeout"])), "podGroup": bool(group),
            "watchObject": bool(watched),
            "elastic": least < nodes, "minNodes": str(least),
            "rejoinSeconds": str(int(values["elastic"]["rejoinSeconds"])),
            "input:node-rank": fill(catalog()["container"]["inputParameter"], {"name": "node-rank"})}


def scheduling_watch(values: dict, nodes: list, gang_plan: dict | None) -> dict:
    """The task that bounds scheduling (scheduling.timeout) in every job (catalogue `watch`)."""
    entry = catalog()["watch"]
    command = values["scheduling"]["watchCommand"] + items(entry["args"], _watch_facts(values, len(nodes), gang_plan))
    return {"task": entry["task"]["gang" if gang_plan else "none"], "requests": entry["requests"], "env": entry["env"],
            "command": [dollar_escape(word) for word in command]}


def host_check(values: dict, gang_plan: dict | None) -> dict:
    """Node recovery: the task that bounds each retried pod's scheduling (catalogue `hostCheck`):
    the scheduling watch on that one pod, beside it in its retry wrapper's step group."""
    entry = catalog()["hostCheck"]
    facts = _watch_facts(values, len(values["nodes"]), gang_plan)
    command = values["scheduling"]["watchCommand"] + items(entry["args"], facts)
    return {"task": entry["task"], "requests": entry["requests"], "env": catalog()["watch"]["env"],
            "when": fill(entry["when"], {"retries": catalog()["container"]["argoArguments"]["restart"]}),
            "command": [dollar_escape(word) for word in command]}
