#!/usr/bin/env python3
"""How many bytes Argo's status adds to a torchdag Workflow, per pod and attempt.

Argo's controller keeps spec and status in one object (workflow/packer: json.Marshal of
the Workflow against MAX_WORKFLOW_SIZE, 1 MiB); past that it stores `status.nodes`
gzipped and base64-encoded as `compressedNodes`. This models the nodes v4.0.5's
controller writes for a rendered DAG (NodeStatus fields of a finished pod: ids from
Workflow.NodeID's FNV-32a, the template's inputs, resourcesDuration, host, timestamps;
one DAG node per attempt under a Retry node) and compresses them as the controller does.
The catalogue's argoStatus.perPod must stay above what it prints (tests/render/test_render_size.py
checks one size); the real controller's numbers come from the local cluster's scale bench.

    python bench/bench_status.py            # 256, 1,024 and 4,096 nodes, 1-3 attempts
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from torchdag.catalog import catalog

WORKFLOW = "big-x7k2p"


def fnv32a(text: str) -> int:
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def node_id(name: str) -> str:
    return WORKFLOW if name == WORKFLOW else f"{WORKFLOW}-{fnv32a(name)}"


def pod_node(name: str, task: str, boundary: str, rank: int | None, failed: bool, seq: int) -> dict:
    node = {"id": node_id(name), "name": name, "displayName": task, "type": "Pod", "templateName": "ascend910-x8",
            "templateScope": "local/", "phase": "Failed" if failed else "Succeeded", "boundaryID": boundary,
            "startedAt": "2026-12-02T11:27:34Z", "finishedAt": f"2026-12-02T13:{seq % 60:02d}:{seq // 60 % 60:02d}Z",
            "progress": "1/1", "resourcesDuration": {"cpu": 7000 + seq * 7 % 1000, "huawei.com/Ascend910": 57600 + seq
                                                     * 13 % 977, "memory": 123456 + seq * 31 % 9973},
            "hostNodeName": f"atlas-{seq % 10000:04d}", "taskResultSynced": True,
            "outputs": {"exitCode": "1" if failed else "0"}}
    if failed:
        node["message"] = "workflow shutdown with strategy:  Terminate"
    if rank is not None:
        node["inputs"] = {"parameters": [{"name": "host", "value": f"atlas-{rank:04d}"},
                                         {"name": "node-rank", "value": str(rank)},
                                         {"name": "nic", "value": "enp189s0f0"},
                                         {"name": "if-ip", "value": f"10.{rank // 250}.{rank % 250}.1"}]}
    return node


def loop_display(task: str, index: int, rank: int) -> str:
    """Argo's name for an expanded withItems node (operator.go processItem,
    generateNodeName): the task, the item's index and its keys in sorted order."""
    return f"{task}({index}:host:atlas-{rank:04d},ip:10.{rank // 250}.{rank % 250}.1,nic:enp189s0f0,rank:{rank})"


def compressed_status(n: int, attempts: int, gang: bool = True, loop_items: int = 0) -> int:
    """Bytes of compressedNodes for n training pods over `attempts` attempts (all but the
    last failed), gang resource and watch pods included. loop_items > 0: the nodes in
    withItems tasks of that many items (catalog nodeLoops), each task a TaskGroup node."""
    nodes: dict = {}
    attempt_ids = []
    for attempt in range(attempts):
        name = f"{WORKFLOW}({attempt})"
        attempt_ids.append(node_id(name))
        if loop_items:
            tasks = [(loop_display(f"nodes-{rank // loop_items}", rank % loop_items, rank), rank) for rank in range(n)]
        else:
            tasks = [(f"node-{rank}", rank) for rank in range(n)]
        tasks += [("gang", None), ("gang-watch", None)] if gang else []
        children = []
        groups: dict[str, list] = {}
        for seq, (task, rank) in enumerate(tasks):
            group = task.split("(")[0] if loop_items and rank is not None else None
            boundary = node_id(name)
            pod = pod_node(f"{name}.{task}", task, boundary, rank, attempt < attempts - 1, seq)
            nodes[pod["id"]] = pod
            if group:
                groups.setdefault(group, []).append(pod["id"])
            else:
                children.append(pod["id"])
        for group, members in groups.items():
            group_id = node_id(f"{name}.{group}")
            nodes[group_id] = {"id": group_id, "name": f"{name}.{group}", "displayName": group, "type": "TaskGroup",
                               "templateName": "ascend910-x8", "templateScope": "local/", "phase": "Succeeded",
                               "boundaryID": node_id(name), "startedAt": "2026-12-02T11:27:34Z",
                               "finishedAt": "2026-12-02T13:27:34Z", "progress": f"{len(members)}/{len(members)}",
                               "children": members}
            children.insert(0, group_id)
        outbound = [pod for group in groups.values() for pod in group] if loop_items else children[:n]
        nodes[node_id(name)] = {"id": node_id(name), "name": name, "displayName": name, "type": "DAG",
                                "templateName": "train", "templateScope": "local/", "phase": "Succeeded",
                                "boundaryID": WORKFLOW, "startedAt": "2026-12-02T11:27:34Z",
                                "finishedAt": "2026-12-02T13:27:34Z", "progress": f"{n}/{n}", "children": children,
                                "outboundNodes": outbound}
    nodes[WORKFLOW] = {"id": WORKFLOW, "name": WORKFLOW, "displayName": WORKFLOW, "type": "Retry",
                       "templateName": "train", "phase": "Succeeded", "children": attempt_ids,
                       "startedAt": "2026-12-02T11:27:34Z"}
    raw = json.dumps(nodes, separators=(",", ":")).encode()
    return len(base64.b64encode(gzip.compress(raw, 6)))


def main() -> int:
    budget = catalog()["argoStatus"]
    print(f"catalogue argoStatus: perPod {budget['perPod']} B, perAttempt {budget['perAttempt']} B, "
          f"limit {budget['maxBytes']} B")
    loop_items = catalog()["nodeLoops"]["maxItems"]
    for n in (256, 1024, 4096):
        for attempts in (1, 2, 3):
            for shape, items in (("flat", 0), ("loops", loop_items)):
                size = compressed_status(n, attempts, loop_items=items)
                per_pod = size / ((n + 2) * attempts)
                total = attempts * (budget["perAttempt"] + budget["perPod"] * (n + 2))
                print(f"{n:5d} nodes, {attempts} attempt(s), {shape:5s}: compressedNodes {size:8d} B = "
                      f"{per_pod:5.1f} B per pod and attempt; budget {total:8d} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
