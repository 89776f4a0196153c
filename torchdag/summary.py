"""The per-node table a reviewer reads first: YAML comments at the top of the rendered
file (free against Argo's object size), `torchdag render --summary`, and the chart's NOTES.

Every string in it comes from a field whose pattern excludes newlines and `#` (node
names, addresses, NICs, the job name), so a comment line stays one line.
"""

from __future__ import annotations

from . import catalog
from .plan import Plan

# Jobs larger than this print the first and last rows only (NOTES, --summary --short).
SHORT_ROWS = 8


def summary_lines(plan: Plan, short: bool = False) -> list[str]:
    v = plan.values
    nodes = plan.nodes
    master = plan.master
    failure = v.get("failurePolicy") or {}
    scheduling = v.get("scheduling") or {}
    lines = [
        f"torchdag job {v['name']}: {len(nodes)} node(s), world size {plan.world_size}, backend {plan.backend} ({plan.backend_reason})",
        f"master: {master.name} (rank 0) at {master.address}:{int(v['port'])}",
        f"gang scheduling: {_gang_text(scheduling)}; whole-job restarts: {int(failure.get('maxRestarts') or 0)}",
    ]
    pg_timeout = (v.get("timeouts") or {}).get("processGroup")
    if pg_timeout and any(catalog.is_ascend(shape.accelerator) for shape in plan.shapes):
        hccl = catalog.hccl_exec_timeout(pg_timeout)
        if hccl != int(pg_timeout):
            note = catalog.catalog()["hcclExecTimeout"]
            lines.append(catalog.fill(note["note"], {**note, "seconds": hccl, "given": int(pg_timeout)}))
    header = ("rank", "node", "address", "nic", "accelerator", "devices", "template")
    rows = [
        (str(node.rank), node.name, node.address, node.nic or "-", node.accelerator, str(node.devices), node.shape.name)
        for node in nodes
    ]
    skipped = 0
    if short and len(rows) > SHORT_ROWS:
        skipped = len(rows) - SHORT_ROWS
        rows = rows[: SHORT_ROWS // 2] + rows[-SHORT_ROWS // 2 :]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row) -> str:
        return "  ".join(cell.rjust(widths[0]) if i == 0 else cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()

    lines.append(line(header))
    for index, row in enumerate(rows):
        if skipped and index == SHORT_ROWS // 2:
            lines.append(f"... {skipped} more node(s) ...")
        lines.append(line(row))
    return lines


def _gang_text(scheduling: dict) -> str:
    gang = scheduling.get("gang") or "none"
    if gang == "none":
        return "none"
    queue = f"queue {scheduling['queue']}, " if scheduling.get("queue") else ""
    return f"{gang} ({queue}placed within {int(scheduling['timeout'])} s or stopped)"


def summary_comment(plan: Plan) -> str:
    lines = summary_lines(plan) + ["Rendered by torchdag: edit the values file, not this file."]
    return "\n".join(f"# {line}" if line else "#" for line in lines)
