"""What the gang watch reads from the Workflow's pods: which node ranks are placed, which
attempt of a restarted DAG the watch belongs to, and whether the job is failing anyway.

Everything comes from the pods (labels, annotations, phase), never from the Workflow's
`status.nodes`: Argo empties that map once it compresses the status (`compressedNodes`)
or offloads it to a database, which large or long-restarted jobs reach.
"""

from __future__ import annotations

import time

WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
RANK_LABEL = "torchdag.io/node-rank"
NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"
NODE_ID_ANNOTATION = "workflows.argoproj.io/node-id"
ACTIVE = ("Pending", "Running", "", None)  # a pod not yet given a phase is pending
# What a gang scheduler writes on a pod it holds back only because of its gang, not because the
# pod itself does not fit: such a rank is named after the ranks that do not fit (the cause),
# so that the first rank of the watch's verdict, which diagnose names, is one whose host is
# short. Read in scheduler-plugins v0.32.7 pkg/coscheduling (PostFilter's "optimistic rejection",
# Permit's timeout and the Unreserve that follows it, PreFilter's backoff and sibling count) and
# seen on the local cluster;
# Kubernetes' own "SchedulingGated" is what a pod Kueue has not admitted shows.
GANG_HELD = ("optimistic rejection in PostFilter", "rejection in Unreserve", "rejected due to timeout after waiting",
             "failed recently", "cannot find enough sibling pods", "SchedulingGated")


def is_scheduled(pod: dict) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") in ("Running", "Succeeded", "Failed"):
        return True
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    return any(c.get("type") == "PodScheduled" and c.get("status") == "True"
               for c in status.get("conditions") or [])


def why_unscheduled(pod: dict) -> str:
    """The scheduler's own words, e.g. 'Unschedulable: 0/12 nodes are available: ...'."""
    status = pod.get("status") or {}
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") != "True":
            reason = c.get("reason") or "not scheduled"
            message = c.get("message")
            return f"{reason}: {message}" if message else reason
    return f"{status.get('phase') or 'Pending'}, no scheduling decision yet"


def pinned_host(pod: dict) -> str:
    """The host the pod's node affinity asks for (kubernetes.io/hostname), or ""."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    for term in (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("values"):
                return expr["values"][0]
    return ""


def ranges(ranks) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    ranks = sorted(ranks)
    out: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(out)


def _annotation(pod: dict, key: str) -> str:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(key) or ""


def failure_of(pod: dict) -> str:
    """A failed pod in Argo's words where the pod has them: `main: Error (exit code 1): ...`."""
    status = pod.get("status") or {}
    if status.get("message"):
        return status["message"]
    for container in status.get("containerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated") or {}
        if ended.get("exitCode"):
            text = f"{container.get('name')}: {ended.get('reason') or 'Error'} (exit code {ended['exitCode']})"
            return f"{text}: {ended['message']}" if ended.get("message") else text
    return ""


class Observation:
    """The Workflow's pods at one moment, seen from the watch's own attempt.

    Under Argo (`node_id`, from ARGO_NODE_ID) the watch finds its own pod by the
    `workflows.argoproj.io/node-id` annotation; its node name (`wf(1).gang-watch` after a
    restart) says which pods are of this attempt. Until the own pod is listed the look is
    not `trusted`: an earlier attempt's placed pods must not count. `only`: the one rank
    watched (a node's host check, beside its retried pod in the same attempt).
    """

    def __init__(self, pods: list[dict], n: int, node_id: str | None, only: int | None = None):
        self.at = time.monotonic()
        self.n = n
        own = next((p for p in pods if node_id and _annotation(p, NODE_ID_ANNOTATION) == node_id), None)
        self.trusted = own is not None or not node_id
        own_name = _annotation(own, NODE_NAME_ANNOTATION) if own else ""
        self.attempt = own_name.rsplit(".", 1)[0] + "." if "." in own_name else None
        by_rank: dict[int, list[dict]] = {}
        failed, active = None, False
        for pod in pods:
            if pod is own:
                continue
            node_name = _annotation(pod, NODE_NAME_ANNOTATION)
            if self.attempt and node_name and not node_name.startswith(self.attempt):
                continue  # a pod of an earlier attempt of a restarted DAG
            phase = (pod.get("status") or {}).get("phase")
            if phase in ACTIVE:
                active = True
            elif phase == "Failed" and failed is None:
                task = node_name.rsplit(".", 1)[-1] if node_name else (pod.get("metadata") or {}).get("name", "?")
                message = failure_of(pod)
                failed = f"{task}: Failed" + (f": {message}" if message else "")
            try:
                rank = int(((pod.get("metadata") or {}).get("labels") or {}).get(RANK_LABEL, ""))
            except ValueError:
                continue
            if 0 <= rank < n:
                by_rank.setdefault(rank, []).append(pod)
        self.by_rank = by_rank
        self.placed = {r for r, ps in by_rank.items() if any(is_scheduled(p) for p in ps)}
        self.unplaced = [r for r in ([only] if only is not None else range(n)) if r not in self.placed]
        # A task of this attempt failed (say `gang`, the PodGroup) and no other pod is
        # pending or running: the Workflow only waits for this watch, and will fail.
        self.failing = failed if failed and not active and self.unplaced else None

    @property
    def complete(self) -> bool:
        return not self.unplaced

    def reasons(self, with_host: bool = False) -> list[str]:
        """One item per unplaced rank, with the scheduler's words; the ranks a gang scheduler
        holds back only for their gang (GANG_HELD) after the others."""
        items = []
        for rank in self.unplaced:
            pods = self.by_rank.get(rank)
            if not pods:
                items.append((False, f"node-rank {rank}: no pod yet"))
                continue
            newest = max(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
            name = (newest.get("metadata") or {}).get("name", "?")
            host = f" on host {pinned_host(newest)}" if with_host and pinned_host(newest) else ""
            why = why_unscheduled(newest)
            items.append((any(words in why for words in GANG_HELD), f"node-rank {rank}{host} (pod {name}): {why}"))
        return [text for held, text in sorted(items, key=lambda item: item[0])]
