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
    typed = plan.typed
    job, gang = typed.job, typed.gang
    texts = catalog.catalog()["summary"]
    pg_timeout = job.process_group_seconds or 0
    gang_text = texts["gang"]["none"] if gang is None else catalog.fill(texts["gang"]["some"], {
        "gang": gang.kind, "timeout": gang.timeout_seconds,
        "queue": catalog.fill(texts["queue"]["some" if gang.queue else "none"], {"queue": gang.queue or ""})})
    hccl = catalog.hccl_exec_timeout(pg_timeout) if pg_timeout else 0
    facts = {
        **catalog.catalog()["hcclExecTimeout"],
        "name": job.name, "count": job.nnodes, "worldSize": job.world_size, "backend": job.backend,
        "reason": job.backend_reason, "master": job.master_host, "address": job.master_address, "port": job.port,
        "gang": gang_text, "podNetwork": typed.network.service, "run": catalog.catalog()["network"]["run"],
        "restarts": typed.retry.limit if typed.retry else 0, "hcclExecTimeout": hccl, "pgTimeout": pg_timeout,
        "nodeRecovery": bool(typed.retry and typed.retry.recovery == "node"), "minNodes": job.min_nodes,
        "hcclRounded": bool(pg_timeout) and hccl != pg_timeout
                       and any(catalog.is_ascend(shape.accelerator) for shape in typed.shapes),
        "cpuBuckets": job.backend == "gloo" and any(shape.device != "cpu" for shape in typed.shapes),
        "agentsCarried": bool(typed.helpers.files), "agentsFromImage": not typed.helpers.from_workflow,
        "agentCount": len(typed.helpers.files), "agentsPath": typed.helpers.path,
        "roles": files_argument(plan),
    }
    lines = catalog.items(texts["lines"], facts)
    header = texts["columns"]
    rows = [[{"rank": str(node.rank), "node": node.host, "address": node.address, "nic": node.nic or "-",
              "accelerator": node.accelerator, "devices": str(node.devices), "template": node.shape}[column]
             for column in header] for node in typed.nodes]
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
