#!/usr/bin/env python3
"""How many bytes Argo's status adds to a torchdag Workflow, per pod and attempt.

Argo's controller keeps spec and status in one object (workflow/packer: json.Marshal of
the Workflow against MAX_WORKFLOW_SIZE, 1 MiB); past that it stores `status.nodes`
gzipped and base64-encoded as `compressedNodes`. This models the nodes v4.0.5's
controller writes for a rendered DAG (NodeStatus fields of a finished pod: ids from
Workflow.NodeID's FNV-32a, the template's inputs, resourcesDuration, host, timestamps;
one DAG node per attempt under a Retry node) and compresses them as the controller does.
The catalogue's argoStatus.perPod must stay above what it prints (tests/test_render_size.py
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


def compressed_status(n: int, attempts: int, gang: bool = True) -> int:
    """Bytes of compressedNodes for n training pods over `attempts` attempts (all but the
    last failed), gang resource and watch pods included."""
    nodes: dict = {}
    attempt_ids = []
    for attempt in range(attempts):
        name = f"{WORKFLOW}({attempt})"
        attempt_ids.append(node_id(name))
        tasks = [(f"node-{rank}", rank) for rank in range(n)] + ([("gang", None), ("gang-watch", None)] if gang else [])
        children = []
        for seq, (task, rank) in enumerate(tasks):
            pod = pod_node(f"{name}.{task}", task, node_id(name), rank, attempt < attempts - 1, seq)
            nodes[pod["id"]] = pod
            children.append(pod["id"])
        nodes[node_id(name)] = {"id": node_id(name), "name": name, "displayName": name, "type": "DAG",
                                "templateName": "train", "templateScope": "local/", "phase": "Succeeded",
                                "boundaryID": WORKFLOW, "startedAt": "2026-12-02T11:27:34Z",
                                "finishedAt": "2026-12-02T13:27:34Z", "progress": f"{n}/{n}", "children": children,
                                "outboundNodes": children[:n]}
    nodes[WORKFLOW] = {"id": WORKFLOW, "name": WORKFLOW, "displayName": WORKFLOW, "type": "Retry",
                       "templateName": "train", "phase": "Succeeded", "children": attempt_ids,
                       "startedAt": "2026-12-02T11:27:34Z"}
    raw = json.dumps(nodes, separators=(",", ":")).encode()
    return len(base64.b64encode(gzip.compress(raw, 6)))


def main() -> int:
    budget = catalog()["argoStatus"]
    print(f"catalogue argoStatus: perPod {budget['perPod']} B, perAttempt {budget['perAttempt']} B, "
          f"limit {budget['maxBytes']} B")
    for n in (256, 1024, 4096):
        for attempts in (1, 2, 3):
            size = compressed_status(n, attempts)
            per_pod = size / ((n + 2) * attempts)
            print(f"{n:5d} nodes, {attempts} attempt(s): compressedNodes {size:8d} B = {per_pod:5.1f} B per pod "
                  f"and attempt; budget {attempts * (budget['perAttempt'] + budget['perPod'] * (n + 2)):8d} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
