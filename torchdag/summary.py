"""The per-node table a reviewer reads first: YAML comments at the top of the rendered
file (free against Argo's object size), `torchdag render --summary`, and the chart's NOTES.

Every string in it comes from a field whose pattern excludes newlines and `#` (node
names, addresses, NICs, the job name), so a comment line stays one line.
"""

from __future__ import annotations

from . import catalog
from .plan import Plan
from .rbac import files_argument


def summary_lines(plan: Plan, short: bool = False) -> list[str]:
    v = plan.values
    nodes = plan.nodes
    texts = catalog.catalog()["summary"]
    scheduling, pg_timeout = v["scheduling"], v["timeouts"]["processGroup"]
    fields = {**scheduling, "timeout": int(scheduling["timeout"]),
              "queue": catalog.fill(texts["queue"]["some" if scheduling["queue"] else "none"], scheduling)}
    hccl = catalog.hccl_exec_timeout(pg_timeout) if pg_timeout else 0
    facts = {
        **catalog.catalog()["hcclExecTimeout"],
        "name": v["name"], "count": len(nodes), "worldSize": plan.world_size, "backend": plan.backend,
        "reason": plan.backend_reason, "master": plan.master.name, "address": plan.master_address,
        "port": int(v["port"]),
        "gang": catalog.fill(texts["gang"]["none" if scheduling["gang"] == "none" else "some"], fields),
        "podNetwork": plan.network is not None, "run": catalog.catalog()["network"]["run"],
        "restarts": int(v["failurePolicy"]["maxRestarts"]), "hcclExecTimeout": hccl, "pgTimeout": int(pg_timeout or 0),
        "nodeRecovery": plan.node_retry is not None, "minNodes": plan.elastic_from,
        "hcclRounded": bool(pg_timeout) and hccl != int(pg_timeout)
                       and any(catalog.is_ascend(shape.accelerator) for shape in plan.shapes),
        "cpuBuckets": plan.backend == "gloo" and any(shape.device != "cpu" for shape in plan.shapes),
        "agentsCarried": bool(plan.agents), "agentsFromImage": not v["agents"]["fromWorkflow"],
        "agentCount": len(plan.agents["files"]) if plan.agents else 0,
        "agentsPath": catalog.catalog()["agents"]["path"],
        "roles": files_argument(plan),
    }
    lines = catalog.items(texts["lines"], facts)
    header = texts["columns"]
    rows = [[{"rank": str(node.rank), "node": node.name, "address": node.address, "nic": node.nic or "-",
              "accelerator": node.accelerator, "devices": str(node.devices), "template": node.shape.name}[column]
             for column in header] for node in nodes]
    skipped, half = 0, texts["shortRows"] // 2
    if short and len(rows) > 2 * half:
        skipped = len(rows) - 2 * half
        rows = rows[:half] + rows[-half:]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row) -> str:
        return "  ".join(cell.rjust(widths[0]) if i == 0 else cell.ljust(widths[i]) for i,
                         cell in enumerate(row)).rstrip()

    lines.append(line(header))
    for index, row in enumerate(rows):
        if skipped and index == half:
            lines.append(catalog.fill(texts["skipped"], {"skipped": skipped}))
        lines.append(line(row))
    return lines


def summary_comment(plan: Plan) -> str:
    lines = summary_lines(plan) + [catalog.catalog()["summary"]["footer"]]
    return "\n".join(f"# {line}" if line else "#" for line in lines)
