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

With --keep-watching (every rendered job's watch: an Argo daemon, ended with the DAG) it then
watches the pending pods while the job runs: a machine lost for good leaves a pod Argo
re-creates on the gone host, Pending for ever, which it ends as below after the same bound.

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
import re
import signal
import sys
import time
import urllib.parse

if __package__:  # imported as torchdag.agents.gangwatch
    from .gangargs import RBAC, build_parser
    from .gangpods import (
        NODE_ID_ANNOTATION,
        NODE_NAME_ANNOTATION,
        RANK_LABEL,
        WORKFLOW_LABEL,
        Observation,
        is_scheduled,
        pinned_host,
        ranges,
        why_unscheduled,
    )
    from .kubeapi import PREFIX, Api, ApiError, Exit, default_api_server, say, write_termination_log
else:  # run by path, its siblings beside it: the image's torchdag/agents/ or the Workflow's ConfigMap
    from gangargs import RBAC, build_parser
    from gangpods import (
        NODE_ID_ANNOTATION,
        NODE_NAME_ANNOTATION,
        RANK_LABEL,
        WORKFLOW_LABEL,
        Observation,
        is_scheduled,
        pinned_host,
        ranges,
        why_unscheduled,
    )
    from kubeapi import PREFIX, Api, ApiError, Exit, default_api_server, say, write_termination_log

ARGO_TAG = "{" * 2
WORKFLOW_API = "/apis/argoproj.io/v1alpha1"
FINISHED = ("Succeeded", "Failed", "Error")
RESULT_DONE_LABEL = "workflows.argoproj.io/report-outputs-completed"
RETRIED = re.compile(r"\((\d+)\)\[\d+\]\.[^.]+$")  # a node recovery attempt's pod: `node-2(1)[0].train`
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
    def pods_path(self, pending_training: bool = False) -> str:
        # Every pod of the Workflow: the training pods, the watch's own (its attempt) and
        # the other tasks' (a failed `gang` task); or only its pending training pods.
        selector = f"{WORKFLOW_LABEL}={self.wf}" + (f",{RANK_LABEL}" if pending_training else "")
        return (f"/api/v1/namespaces/{urllib.parse.quote(self.ns, safe='')}/pods"
                f"?labelSelector={urllib.parse.quote(selector, safe='')}"
                + ("&fieldSelector=" + urllib.parse.quote("status.phase=Pending", safe="") if pending_training else ""))

    def workflow_path(self) -> str:
        return (f"{WORKFLOW_API}/namespaces/{urllib.parse.quote(self.ns, safe='')}"
                f"/workflows/{urllib.parse.quote(self.wf, safe='')}")

    def grace(self) -> float:
        return min(GRACE_MAX, GRACE_POLLS * self.args.poll)

    def elapsed(self) -> int:
        return int(round(time.monotonic() - self.start))

    def elastic(self, rank: int | None = None) -> bool:
        """The rank (--what=retry: the watched one) is an elastic member (elastic.minNodes)."""
        rank, args = self.args.rank if rank is None else rank, self.args
        return rank is not None and args.elastic_from is not None and rank >= args.elastic_from

    def timeout(self, rank: int | None = None) -> float:
        return self.args.elastic_timeout if self.elastic(rank) and self.args.elastic_timeout else self.args.timeout

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
        pods = latest.by_rank.get(self.args.rank) or []
        if not pods:
            raise Exit(1, f"{reason}; no pod to end", terminate_note=False)
        newest = max(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        raise Exit(1, self.end_pod(newest["metadata"]["name"], self.args.rank, reason), terminate_note=False)

    def end_pod(self, name: str, rank: int, reason: str) -> str:
        """An elastic member's pod that was not scheduled: marked Failed with the reason as its
        message (as a kubelet ends a pod), which Argo reads as its node's failure; the scheduler
        no longer tries to place a pod in a terminal phase. Its attempt fails, and the job goes
        on without the member (continueOn). Returns the line that says so."""
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
            return f"pod {name} no longer exists: nothing to end"
        return (f"ended pod {name} (Failed): node-rank {rank} is an elastic member "
                f"(elastic.minNodes {self.args.elastic_from}): the job goes on without it"
                + self.settle_result(((answer.get("metadata") or {}).get("annotations") or {}).get(NODE_ID_ANNOTATION)))

    def settle_result(self, node_id: str | None) -> str:
        """A pod Argo re-created keeps its node's id, and the task result the first pod left
        unfinished when its machine went: Argo reads the node's failure only once that result is
        complete, or 10 minutes after (TASK_RESULT_TIMEOUT_DURATION). Marked complete, as the
        pod's executor marks it when a pod ends (the job's Role lets it patch task results)."""
        if not node_id:
            return ""
        path = (f"{WORKFLOW_API}/namespaces/{urllib.parse.quote(self.ns, safe='')}/workflowtaskresults/"
                f"{urllib.parse.quote(node_id, safe='')}")
        try:
            self.api.call("PATCH", path, {"metadata": {"labels": {RESULT_DONE_LABEL: "true"}}},
                          "application/merge-patch+json")
        except ApiError as exc:
            return f"; its task result is not marked complete ({exc}): Argo reads the failure within 10 min"
        return ""

    def keep_watching(self, attempt: str | None) -> None:
        """Every rank placed: for as long as the job runs, a pod of this attempt that waits for a
        machine longer than its rank's bound is ended, as at the first placement. Only pending
        pods are listed (a field selector), so a look costs little however large the job."""
        # Worded apart from the verdict, which diagnose reads (signature never-scheduled).
        say(f"keeping watch while the job runs: a pod waiting for its machine over {self.args.timeout:g} s"
            + (f" ({self.args.elastic_timeout or self.args.timeout:g} s for an elastic member) " if
               self.args.elastic_from is not None else " ") + "is ended, naming its host")
        path = self.pods_path(pending_training=True)
        waiting_since: dict[str, float] = {}
        ended: set[str] = set()  # ended once: a list may still show it Pending
        while True:
            time.sleep(self.args.poll)
            try:
                pods = (self.api.call("GET", path) or {}).get("items") or []
            except ApiError as exc:
                if not exc.transient:
                    raise self.fatal(exc, "list", "pods") from exc
                self.transient(exc)
                continue
            now, seen = time.monotonic(), {}
            for pod in pods:
                meta = pod.get("metadata") or {}
                node_name = (meta.get("annotations") or {}).get(NODE_NAME_ANNOTATION, "")
                rank = (meta.get("labels") or {}).get(RANK_LABEL, "")
                if ((pod.get("status") or {}).get("phase") not in ("Pending", "", None) or is_scheduled(pod)
                        or not rank.isdigit() or (attempt and node_name and not node_name.startswith(attempt))):
                    continue
                name = meta.get("name", "?")
                if name in ended:
                    continue
                seen[name] = since = waiting_since.get(name, now)
                # A retried pod (node recovery's attempt 1, 2, ...) is its host check's first: twice the bound here.
                bound = self.timeout(int(rank)) * (2 if (retry := RETRIED.search(node_name)) and retry[1] != "0" else 1)
                if now - since < bound:
                    continue
                host = f" on host {pinned_host(pod)}" if pinned_host(pod) else ""
                reason = (f"not scheduled within {bound:g} s: node-rank {rank}{host} (pod {name}), "
                          f"re-created after every rank was placed: {why_unscheduled(pod)}")
                say(reason)
                write_termination_log(self.args.termination_log, reason)
                if not self.elastic(int(rank)):
                    self.stop_workflow(reason)
                say(self.end_pod(name, int(rank), reason))
                ended.add(name)
            waiting_since = seen

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
                    break
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
            if not args.keep_watching:
                raise Exit(0, self.placed_line())
            say(self.placed_line())
            self.keep_watching(latest.attempt)
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.what == "retry" and args.rank is None:
        parser.error("--what=retry needs --rank")
    if args.what != "retry" and args.pods is None:
        parser.error("--pods is required (but with --what=retry)")
    if args.what == "retry" and args.keep_watching:
        parser.error("--keep-watching is for the job's watch, not --what=retry")
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
        if done.code == 0 and args.keep_watching:
            # An Argo daemon that ends on its own, even with 0, fails its node (and failFast the
            # DAG): it stays until Argo ends it with the DAG (SIGTERM).
            say("idle until the job's DAG ends")
            while True:
                time.sleep(3600)
        return done.code
    except KeyboardInterrupt:
        say("interrupted", stream=sys.stderr)
        return 130


def _on_sigterm(signum, frame):
    # Argo stops this task when the Workflow is stopped, terminated or past its deadline, and
    # (--keep-watching, a daemon) when the DAG has ended.
    say("terminated (SIGTERM): the job's DAG has ended, or the Workflow is being stopped")
    sys.stdout.flush()
    os._exit(143)


if __name__ == "__main__":
    sys.exit(main())
