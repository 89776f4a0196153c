"""Gang scheduling (scheduling.gang): what every training pod carries to join the job's one
gang, and the PodGroup the Workflow creates first (catalogue `gangs`). chart/templates/_gang.tpl
is its twin."""

from __future__ import annotations

from .catalog import catalog, fill, items, resource_name
from .watch import elastic_from
from .yamlout import quote


def gang(values: dict, nodes: list) -> dict | None:
    """What every training pod carries to join the job's one gang, and the PodGroup
    manifest (lines of YAML) the Workflow creates before the pods, if the scheduler has one
    (catalogue `gangs`)."""
    scheduling = values["scheduling"]
    if scheduling["gang"] == "none":
        return None
    entry, group_name = catalog()["gangs"][scheduling["gang"]], catalog()["gangName"]
    fields = {"group": group_name, "count": str(len(nodes)), "queue": scheduling["queue"] or ""}
    # The fewest machines the job may run with: a member retried after a loss joins the
    # survivors' gang, which a minimum of every node would never place again.
    least = elastic_from(values)
    gang = {
        "kind": scheduling["gang"],
        "task": catalog()["gangTask"],  # the PodGroup's, when there is one
        "scheduler_name": scheduling["schedulerName"] or entry["schedulerName"],
        "labels": [(key, fill(value, fields)) for key, value in sorted(entry["podLabels"].items())],
        "annotations": [(key, fill(value, fields)) for key, value in sorted(entry["podAnnotations"].items())],
        "manifest": None,
        "role_annotation": entry.get("roleAnnotation"),  # printed with each template's name
    }
    group = entry["podGroup"]
    if group:
        priority = values["workflow"]["priorityClassName"]
        facts = {"count": str(len(nodes)), "minMember": str(least), "timeout": str(int(scheduling["timeout"])),
                 "queue": quote(scheduling["queue"]) if scheduling["queue"] else "",
                 "priorityClassName": quote(priority) if priority else ""}
        spec = [f"{key}: {value}" for key, value in items(group["spec"], facts)]
        totals: dict[str, int] = {}
        for node in nodes[:least] if group["minResources"] else []:
            name = resource_name(node.accelerator, values)
            if name:
                totals[name] = totals.get(name, 0) + node.devices
        if totals:
            spec += ["minResources:",
                     *[f"  {quote(name)}: {quote(str(count))}" for name, count in sorted(totals.items())]]
        head = {"apiVersion": quote(group["apiVersion"]), "name": quote(group_name)}
        gang["manifest"] = [*items(catalog()["podGroupManifest"], head), *[f"  {line}" for line in spec]]
    return gang
