"""The command line of the scheduling watch (gangwatch.py): its arguments and its --help.
Standard library only, as gangwatch.py."""

from __future__ import annotations

import argparse

if __package__:  # imported as torchdag.agents.gangargs
    from .gangpods import RANK_LABEL, WORKFLOW_LABEL
else:  # run by path, its siblings beside it: the image's torchdag/agents/ or the Workflow's ConfigMap
    from gangpods import RANK_LABEL, WORKFLOW_LABEL

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
RBAC = "get/list on pods and get/patch on workflows.argoproj.io"


def positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
        return value
    return parse


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def podgroup_path(text: str) -> str:
    parts = text.split("/")
    if len(parts) != 4 or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not GROUP/VERSION/RESOURCE/NAME")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchdag/agents/gangwatch.py", allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Bounded wait for a gang-scheduled torchdag Workflow (its `gang-watch` task).\n\n"
            "Polls the Kubernetes API for the Workflow's training pods, labelled\n"
            f"  {WORKFLOW_LABEL}=WORKFLOW and {RANK_LABEL}=0..PODS-1.\n"
            "A rank is placed when one of its pods is scheduled: condition PodScheduled=True,\n"
            "phase Running/Succeeded/Failed, or spec.nodeName set. Image pulls come after\n"
            "scheduling and do not count.\n\n"
            "  every rank placed            -> 'gang placed: N/N pods scheduled after S s', exit 0\n"
            "                                  (--keep-watching: then watches the pending pods, below)\n"
            "  not placed within --timeout  -> prints every unplaced rank with the scheduler's reason,\n"
            "                                  writes that line to --termination-log, PATCHes the\n"
            "                                  Workflow with spec.shutdown=Terminate (Argo deletes the\n"
            "                                  Pending pods, stops the running ones and fails the\n"
            "                                  Workflow), exit 1\n"
            "  the Workflow is gone, finished (Succeeded/Failed/Error), being stopped, or failing\n"
            "  with no task left pending or running -> nothing to watch, exit 0\n\n"
            "In a pod it calls https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT with the\n"
            f"ServiceAccount's token and CA from {SA_DIR}/.\n"
            f"That ServiceAccount needs {RBAC}\n"
            "in the namespace (the chart's rbac.create grants them; see docs/gang.md).\n"
            "Under Argo, ARGO_NODE_ID (set by Argo) limits the watch to the pods of its own attempt\n"
            "when failurePolicy restarts the DAG. Calls without an answer, 429 and 5xx are retried\n"
            "until the deadline; at the deadline the Workflow is stopped only after a fresh look at\n"
            "the pods."),
        epilog="Exit status: 0 placed, or nothing to watch; 1 not placed in time, and the Workflow was\n"
               "stopped; 2 usage, RBAC (403), a rejected token, or no answer from the API at the deadline\n"
               "(the Workflow is then left alone).")
    p.add_argument("--workflow", required=True, help="the Workflow's name (Argo's workflow.name)")
    p.add_argument("--namespace", required=True, help="its namespace (Argo's workflow.namespace)")
    p.add_argument("--pods", type=positive(int), default=None,
                   help="number of training pods, one per node rank 0..PODS-1 (not with --what=retry)")
    p.add_argument("--timeout", type=positive(float), required=True,
                   help="seconds the gang may take to be placed, counted from this watch's start")
    p.add_argument("--what", choices=("gang", "pods", "retry"), default="gang",
                   help="gang: the pods form a gang (scheduling.gang); pods: a job without a gang, each node's pod "
                        "must be scheduled in time (its host named when it is not); retry: node recovery's host "
                        "check, the one retried pod of --rank in this watch's own attempt (default: %(default)s)")
    p.add_argument("--rank", type=non_negative, default=None,
                   help="--what=retry: the node rank whose retried pod is watched")
    p.add_argument("--elastic-from", type=non_negative, default=None, metavar="RANK",
                   help="--what=retry: the first elastic member's rank (elastic.minNodes): a member from it on has "
                        "its pod marked Failed at the deadline instead of the Workflow stopped")
    p.add_argument("--elastic-timeout", type=positive(float), default=None, metavar="SECONDS",
                   help="--what=retry: an elastic member's bound instead of --timeout (elastic.rejoinSeconds)")
    p.add_argument("--keep-watching", action="store_true",
                   help="once every rank is placed, go on (an Argo daemon task, which Argo ends with the DAG): a pod "
                        "of this attempt that waits for a machine longer than its rank's bound (its host lost, the pod "
                        "re-created by Argo) is ended as at the first placement (not with --what=retry)")
    p.add_argument("--podgroup", default=None, type=podgroup_path,
                   help="GROUP/VERSION/RESOURCE/NAME of the gang's object (its PodGroup, or Kueue's Workload): its "
                        "reason named and the object deleted when the watch stops the Workflow (needs get and "
                        "delete on that resource)")
    p.add_argument("--poll", type=positive(float), default=5.0, help="seconds between looks at the pods (default 5)")
    p.add_argument("--api-server", default=None,
                   help="API server URL (default: https:// from KUBERNETES_SERVICE_HOST and "
                        "KUBERNETES_SERVICE_PORT; http:// is allowed for tests)")
    p.add_argument("--token-file", default=f"{SA_DIR}/token", help="bearer token file (default: %(default)s)")
    p.add_argument("--ca-file", default=f"{SA_DIR}/ca.crt", help="CA bundle for https (default: %(default)s)")
    p.add_argument("--termination-log", default="/dev/termination-log",
                   help="where the reason for a non-zero exit is written, if the file exists and is writable "
                        "(default: %(default)s)")
    return p
