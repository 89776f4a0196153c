#!/usr/bin/env python3
"""Bounded wait for a gang: stop the Workflow if its training pods are not all placed in time.

    python3 torchdag/agents/gangwatch.py --workflow=NAME --namespace=NS --pods=N --timeout=SECONDS

With `scheduling.gang` set, the rendered Workflow runs this as the task `gang-watch`,
beside the training tasks (without a gang, `schedule-watch`: --what=pods).  It polls the
Kubernetes API for the Workflow's training pods (label ``torchdag.io/node-rank``) and exits
0 as soon as every node rank 0..N-1 has a pod that the scheduler has placed.  If that does
not happen within --timeout seconds it names every unplaced rank with the scheduler's
reason, sets the Workflow's ``spec.shutdown`` to ``Terminate`` (Argo then deletes the
Pending pods, stops the running ones and fails the Workflow) and exits 1.

Under node recovery each retried node's pod gets one of its own (the `host-check` task,
--what=retry --rank=R), in the same step group: if that pod is not scheduled in time (its
host is gone, say), an elastic member's pod is marked Failed, naming the host, so that its
attempt ends and the job goes on without it; a required member's job is stopped as above.
Argo's own bounds do not reach a pod the scheduler never places: a template's `timeout` is
checked only when the controller happens to look at the Workflow again, and a pod's
activeDeadlineSeconds only once a kubelet runs it.

Standard library only (urllib, ssl, json): it runs in the training image without
importing torch or a Kubernetes client.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import urllib.parse

if __package__:  # imported as torchdag.agents.gangwatch
    from .gangpods import RANK_LABEL, WORKFLOW_LABEL, Observation, ranges
    from .kubeapi import PREFIX, Api, ApiError, Exit, default_api_server, say, write_termination_log
else:  # run by path, its siblings beside it: the image's torchdag/agents/ or the Workflow's ConfigMap
    from gangpods import RANK_LABEL, WORKFLOW_LABEL, Observation, ranges
    from kubeapi import PREFIX, Api, ApiError, Exit, default_api_server, say, write_termination_log

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
ARGO_TAG = "{" * 2
WORKFLOW_API = "/apis/argoproj.io/v1alpha1"
FINISHED = ("Succeeded", "Failed", "Error")
RBAC = "get/list on pods and get/patch on workflows.argoproj.io"
WORKFLOW_CHECK_EVERY = 30.0  # seconds between looks at the Workflow itself (it can be large)
GRACE_POLLS, GRACE_MAX = 6, 30.0  # at the deadline: retries for a fresh look, or for the PATCH


# ------------------------------------------------------------------- watch

class Watch:
    def __init__(self, args: argparse.Namespace, api: Api):
        self.args = args
        self.api = api
        self.ns = args.namespace
        self.wf = args.workflow
        self.node_id = os.environ.get("ARGO_NODE_ID") or None
        self.start = time.monotonic()
        self.last_error = None
        self.error_key = None

    # -- paths
    def pods_path(self) -> str:
        # Every pod of the Workflow: the training pods, the watch's own (its attempt) and
        # the other tasks' (a failed `gang` task).
        selector = f"{WORKFLOW_LABEL}={self.wf}"
        return (f"/api/v1/namespaces/{urllib.parse.quote(self.ns, safe='')}/pods"
                f"?labelSelector={urllib.parse.quote(selector, safe='')}")

    def workflow_path(self) -> str:
        return (f"{WORKFLOW_API}/namespaces/{urllib.parse.quote(self.ns, safe='')}"
                f"/workflows/{urllib.parse.quote(self.wf, safe='')}")

    def grace(self) -> float:
        return min(GRACE_MAX, GRACE_POLLS * self.args.poll)

    def elapsed(self) -> int:
        return int(round(time.monotonic() - self.start))

    def elastic(self) -> bool:
        """--what=retry: the watched rank is an elastic member (elastic.minNodes): the job goes on without it."""
        args = self.args
        return args.rank is not None and args.elastic_from is not None and args.rank >= args.elastic_from

    def timeout(self) -> float:
        return self.args.elastic_timeout if self.elastic() and self.args.elastic_timeout else self.args.timeout

    # -- words: a gang is placed or not; without one (--what pods) each node's pod is scheduled or not
    def not_placed(self) -> str:
        return (f"gang not placed within {self.timeout():g} s" if self.args.what == "gang"
                else f"not scheduled within {self.timeout():g} s")

    def what_failed(self) -> str:
        return "the gang was not placed" if self.args.what == "gang" else "a pod was not scheduled"

    def placed_line(self) -> str:
        n = self.args.pods
        if self.args.what == "retry":
            return f"node-rank {self.args.rank}'s retried pod scheduled after {self.elapsed()} s"
        return (f"gang placed: {n}/{n} pods scheduled after {self.elapsed()} s" if self.args.what == "gang"
                else f"every pod scheduled: {n}/{n} after {self.elapsed()} s")

    # -- errors
    def fatal(self, exc: ApiError, verb: str, resource: str) -> Exit:
        if exc.status == 401:
            return Exit(2, f"error: the API server rejected the ServiceAccount token "
                           f"({self.args.token_file}): {exc}", sys.stderr)
        if exc.status == 403:
            needs = "patch on pods/status" if resource == "pods/status" else RBAC
            return Exit(2, f"error: RBAC: not allowed to {verb} {resource} in namespace {self.ns} ({exc.detail}); "
                           f"the Workflow's ServiceAccount needs {needs} in {self.ns}: apply the Roles the render "
                           f"header's rbac: line names (docs/rbac.md), or set rbac.create in the chart", sys.stderr)
        return Exit(2, f"error: {exc}", sys.stderr)

    def transient(self, exc: ApiError) -> None:
        """Said once per streak of the same failure (whichever call met it), not on every poll."""
        key = (exc.status, exc.detail)
        if key != self.error_key:
            say(f"API error, retrying until the deadline: {exc}")
        self.error_key, self.last_error = key, str(exc)

    # -- the Workflow
    def check_workflow(self) -> None:
        """Ends the watch (Exit 0) when there is nothing left to watch."""
        try:
            wf = self.api.call("GET", self.workflow_path())
        except ApiError as exc:
            if exc.transient:
                self.transient(exc)
                return
            raise self.fatal(exc, "get", "workflows.argoproj.io") from exc
        if wf is None:
            raise Exit(0, f"workflow {self.wf} not found in namespace {self.ns}: nothing to watch")
        phase = (wf.get("status") or {}).get("phase")
        if phase in FINISHED:
            raise Exit(0, f"workflow {self.wf} already finished ({phase}): nothing to watch")
        shutdown = (wf.get("spec") or {}).get("shutdown")
        if shutdown:
            raise Exit(0, f"workflow {self.wf} is being stopped (shutdown: {shutdown}): nothing to watch")

    # -- the pods
    def observe(self) -> Observation | None:
        try:
            answer = self.api.call("GET", self.pods_path())
        except ApiError as exc:
            if exc.transient:
                self.transient(exc)
                return None
            raise self.fatal(exc, "list", "pods") from exc
        if self.error_key:
            say("API reachable again")
            self.error_key = None
        obs = Observation((answer or {}).get("items") or [], self.args.pods, self.node_id, self.args.rank)
        if obs.trusted and obs.failing:
            raise Exit(0, f"workflow {self.wf} is failing without the gang ({obs.failing}) and has no pod left "
                          "to place: nothing to watch")
        return obs if obs.trusted else None

    def stop_workflow(self, reason: str) -> None:
        body = {"spec": {"shutdown": "Terminate"}}
        give_up = time.monotonic() + self.grace()
        while True:
            try:
                answer = self.api.call("PATCH", self.workflow_path(), body, "application/merge-patch+json")
            except ApiError as exc:
                if exc.transient and time.monotonic() < give_up:
                    self.transient(exc)
                    time.sleep(min(self.args.poll, 5.0))
                    continue
                failed = (Exit(2, f"error: could not stop workflow {self.wf}: {exc}", sys.stderr)
                          if exc.transient else self.fatal(exc, "patch", "workflows.argoproj.io"))
                failed.message += f"; and {self.what_failed()}: {reason}"
                raise failed from exc
            break
        if answer is None:
            raise Exit(0, f"workflow {self.wf} no longer exists: nothing to stop", terminate_note=False)
        # Argo now stops every running pod of the Workflow, this one included: its SIGTERM
        # must not cut the PodGroup's deletion short or turn this verdict into exit 143.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Exit(1, f"stopped workflow {self.wf}: {self.not_placed()}"
                   + self.delete_podgroup(), terminate_note=False)

    def fail_pod(self, latest: Observation, reason: str) -> None:
        """An elastic member's retried pod that was not scheduled: marked Failed with the
        reason as its message (as a kubelet ends a pod), which Argo reads as its node's
        failure; the scheduler no longer tries to place a pod in a terminal phase. Its
        attempt fails, and the job goes on without the member (continueOn)."""
        pods = latest.by_rank.get(self.args.rank) or []
        if not pods:
            raise Exit(1, f"{reason}; no pod to end", terminate_note=False)
        newest = max(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        name = newest["metadata"]["name"]
        path = (f"/api/v1/namespaces/{urllib.parse.quote(self.ns, safe='')}/pods/"
                f"{urllib.parse.quote(name, safe='')}/status")
        body = {"status": {"phase": "Failed", "reason": "Unschedulable", "message": f"{PREFIX} {reason}"}}
        give_up = time.monotonic() + self.grace()
        while True:
            try:
                answer = self.api.call("PATCH", path, body, "application/merge-patch+json")
            except ApiError as exc:
                if exc.transient and time.monotonic() < give_up:
                    self.transient(exc)
                    time.sleep(min(self.args.poll, 5.0))
                    continue
                failed = (Exit(2, f"error: could not end pod {name}: {exc}", sys.stderr) if exc.transient
                          else self.fatal(exc, "patch", "pods/status"))
                failed.message += f"; and {self.what_failed()}: {reason}"
                raise failed from exc
            break
        if answer is None:
            raise Exit(0, f"pod {name} no longer exists: nothing to end", terminate_note=False)
        raise Exit(1, f"ended pod {name} (Failed): node-rank {self.args.rank} is an elastic member "
                      f"(elastic.minNodes {self.args.elastic_from}): the job goes on without it", terminate_note=False)

    def gang_says(self) -> str:
        """The gang scheduler's own reason, from the gang's object (--podgroup), when it gives
        one: Kueue's Workload says why it has not admitted the group (its QuotaReserved or
        Admitted condition, e.g. "insufficient quota for huawei.com/Ascend910 ..."), while the
        pods only show Kubernetes' SchedulingGated; Volcano's PodGroup, its Unschedulable
        condition. "" when there is none or it cannot be read (the pods' reasons still stand)."""
        if not self.args.podgroup or self.args.what != "gang":
            return ""
        group_version, resource, name = self.args.podgroup.rsplit("/", 2)
        path = (f"/apis/{group_version}/namespaces/{urllib.parse.quote(self.ns, safe='')}/{resource}/"
                f"{urllib.parse.quote(name, safe='')}")
        try:
            found = self.api.call("GET", path)
        except ApiError:
            return ""
        conditions = ((found or {}).get("status") or {}).get("conditions") or []
        for kind, status in (("QuotaReserved", "False"), ("Admitted", "False"), ("Unschedulable", "True")):
            said = next((c for c in conditions if c.get("type") == kind and c.get("status") == status), None)
            if said and said.get("message"):
                return f"{resource} {name}: {said['message']}"
        return ""

    def delete_podgroup(self) -> str:
        """The PodGroup lives as long as the Workflow (ttlStrategy, days) and would keep
        holding its queue's capacity: delete it once the job is stopped. Kueue's Workload
        too: until it is gone Kueue keeps its finalizer on the pods Argo deletes, and they
        stay Terminating. Best effort."""
        if not self.args.podgroup:
            return ""
        group_version, resource, name = self.args.podgroup.rsplit("/", 2)
        path = (f"/apis/{group_version}/namespaces/{urllib.parse.quote(self.ns, safe='')}/{resource}/"
                f"{urllib.parse.quote(name, safe='')}")
        try:
            gone = self.api.call("DELETE", path) is None
        except ApiError as exc:
            return f"; could not delete {resource} {name} ({exc}): delete it by hand to free its queue"
        return f"; {resource} {name} " + ("was already gone" if gone else "deleted")

    def run(self) -> None:
        args = self.args
        deadline = self.start + self.timeout()
        if args.what == "retry":
            say(f"watching workflow {self.wf} in namespace {self.ns}: node-rank {args.rank}'s retried pod must be "
                f"scheduled within {self.timeout():g} s"
                + (" (an elastic member: elastic.rejoinSeconds)" if self.elastic() else ""))
        else:
            say(f"watching workflow {self.wf} in namespace {self.ns}: {args.pods} training pod(s), "
                f"node-rank {ranges(range(args.pods))}, must be scheduled within {self.timeout():g} s")
        self.check_workflow()
        last_check = time.monotonic()
        latest: Observation | None = None
        shown = -1
        while True:
            # Under Argo a look counts once it lists the watch's own pod: that tells which
            # pods belong to this attempt of a restarted DAG.
            obs = self.observe()
            if obs is not None:
                latest = obs
                if obs.complete:
                    raise Exit(0, self.placed_line())
                if len(obs.placed) != shown and args.what != "retry":
                    shown = len(obs.placed)
                    say(f"{shown}/{args.pods} pods scheduled after {self.elapsed()} s; "
                        f"waiting for node-rank {ranges(obs.unplaced)}")
            now = time.monotonic()
            if now >= deadline:
                break
            if now - last_check >= WORKFLOW_CHECK_EVERY:
                self.check_workflow()
                last_check = time.monotonic()
            time.sleep(max(0.0, min(args.poll, deadline - time.monotonic())))

        # The deadline: decide on a recent look at the pods, never blind.
        fresh_for = max(3 * args.poll, 15.0)
        give_up = time.monotonic() + self.grace()
        while latest is None or time.monotonic() - latest.at > fresh_for:
            if time.monotonic() >= give_up:
                raise Exit(2, f"error: could not read the pods of workflow {self.wf} at the deadline "
                              f"({self.last_error}); not stopping it without looking", sys.stderr)
            time.sleep(min(args.poll, 5.0))
            obs = self.observe()
            if obs is not None:
                latest = obs
        if latest.complete:
            raise Exit(0, self.placed_line())
        self.check_workflow()
        if args.what == "retry":
            reason = f"{self.not_placed()}: " + "; ".join(latest.reasons(with_host=True))
        else:
            reason = (f"{self.not_placed()}: {len(latest.placed)}/{args.pods} pods scheduled; "
                      + "".join(f"{said}; " for said in [self.gang_says()] if said)
                      + "; ".join(latest.reasons(with_host=True)))
        say(reason)
        write_termination_log(args.termination_log, reason)
        if self.elastic():
            self.fail_pod(latest, reason)
        self.stop_workflow(reason)


# ---------------------------------------------------------------------- CLI

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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.what == "retry" and args.rank is None:
        parser.error("--what=retry needs --rank")
    if args.what != "retry" and args.pods is None:
        parser.error("--pods is required (but with --what=retry)")
    if args.what == "retry":
        args.pods = args.rank + 1  # the ranks an observation reads: the watched one is the last
    # An Argo tag left as written; the text is built so that this file, which the Workflow carries in a
    # ConfigMap, holds none itself (Argo would substitute it there).
    if any(ARGO_TAG in (word or "") for word in (args.workflow, args.namespace, args.podgroup)):
        print(f"{PREFIX} error: --workflow/--namespace hold an unsubstituted Argo variable "
              f"({args.workflow!r}, {args.namespace!r}); run it as an Argo task or pass the names",
              file=sys.stderr, flush=True)
        return 2
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        server = args.api_server or default_api_server()
        if not server:
            raise Exit(2, "error: KUBERNETES_SERVICE_HOST is not set (not in a pod?); pass --api-server URL",
                       sys.stderr)
        if not server.startswith(("https://", "http://")):
            raise Exit(2, f"error: --api-server must be an http:// or https:// URL, not {server!r}", sys.stderr)
        Watch(args, Api(server, args.token_file, args.ca_file)).run()
        return 0  # not reached: run() ends with Exit
    except Exit as done:
        if done.code == 2 and args.what in ("pods", "retry"):
            # Without a gang the job can run without this bound: a watch that cannot read the
            # API (no RBAC, no token) says so and steps aside instead of failing the job.
            done = Exit(0, f"warning: not watching scheduling ({done.message.removeprefix('error: ')}); the job "
                           f"runs without scheduling.timeout's bound", sys.stderr)
        if done.message:
            say(done.message, stream=done.stream)
            if done.code != 0 and done.terminate_note:
                write_termination_log(args.termination_log, done.message)
        return done.code
    except KeyboardInterrupt:
        say("interrupted", stream=sys.stderr)
        return 130


def _on_sigterm(signum, frame):
    # Argo stops this task when the Workflow is stopped, terminated or past its deadline.
    say("terminated (SIGTERM): the Workflow is being stopped")
    sys.stdout.flush()
    os._exit(143)


if __name__ == "__main__":
    sys.exit(main())
