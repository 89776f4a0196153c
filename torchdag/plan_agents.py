"""The helpers the containers run (torchdag/agents/), delivered by the Workflow itself.

With `agents.fromWorkflow` (the default) a resource task creates a ConfigMap that holds the
files the job's containers run (catalog `agents.files`), owned by the Workflow (deleted with
it); every container that may run one mounts it read-only at the agents path, so a user's
image with python3 runs every feature, and torchdag's own image gets the same files. The
files are printed as they are, in a YAML block: they must hold no Argo tag (`{{`), which Argo
would substitute in the manifest. chart/files/agents/ holds byte-identical copies for the
chart (tools/sync_chart.py).
"""

from __future__ import annotations

from . import AGENTS_DIR
from .catalog import catalog, items
from .yamlout import quote

MANIFEST_INDENT = " " * 8  # under the resource template's `manifest: |`


def agent_text(name: str) -> str:
    return (AGENTS_DIR / name).read_text(encoding="utf-8")


def agents_plan(values: dict, facts: dict) -> dict | None:
    """The ConfigMap task's manifest (lines as printed), the pod volume and the mount; None when
    the image brings the helpers or the containers run none. facts: recorder, preflight, watch."""
    entry = catalog()["agents"]
    # device: the training container mounts the folder over the image's, whose trainer imports
    # torchdag_ddp and torchdag_device from it
    files = items(entry["files"], {**facts, "device": facts["recorder"] or facts["preflight"]})
    if not values["agents"]["fromWorkflow"] or not files:
        return None
    lines = items(entry["manifest"], {"name": quote(entry["configMap"])})
    for name in files:
        lines.append(f"  {quote(name)}: |")
        lines += ["    " + line if line else "" for line in agent_text(name).split("\n")[:-1]]
    return {
        "task": entry["task"],
        "files": files,
        "manifest": tuple(MANIFEST_INDENT + line if line else "" for line in lines),
        "volume": {"name": entry["volume"], "configMap": {"name": entry["configMap"]}},
        "mount": {"name": entry["volume"], "mountPath": entry["path"], "readOnly": True},
    }
