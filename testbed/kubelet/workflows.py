"""What Argo's controller does through pods/exec, done here instead.

Argo v4.0.5 stops a running pod by exec'ing `/var/run/argo/argoexec kill 15 1` in each of
its running containers (workflow/signal/signal.go), then `kill 9 1` after the pod's
terminationGracePeriodSeconds (workflow/controller/pod/queue.go); it does so when the
Workflow is shut down (spec.shutdown Terminate, or Stop for pods not of an exit handler)
and when the Workflow's activeDeadlineSeconds has passed (exec_control.go). pods/exec needs a
kubelet server that speaks the streaming protocol; this kubelet has none, so the
controller's exec fails (it logs it and goes on). Instead this watch reads the same two
facts from the Workflow and delivers the same signals: SIGTERM to every process of each
running container (in a pod the signal goes to PID 1, the emissary, which forwards it to
the command; here the command is the container's own process), SIGKILL after the grace.
"""

from __future__ import annotations

import calendar
import threading
import time

WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
ON_EXIT_LABEL = "workflows.argoproj.io/on-exit"  # common.LabelKeyOnExit
PATH = "/apis/argoproj.io/v1alpha1/workflows"


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))


def stop_reason(workflow: dict, pod: dict, at: float) -> str | None:
    """Why Argo would terminate this running pod of this Workflow now, or None."""
    spec, status = workflow.get("spec") or {}, workflow.get("status") or {}
    on_exit = ON_EXIT_LABEL in ((pod.get("metadata") or {}).get("labels") or {})
    shutdown = spec.get("shutdown")
    if shutdown == "Terminate" or (shutdown == "Stop" and not on_exit):
        return f"workflow shutdown with strategy {shutdown} (Argo signals through pods/exec)"
    deadline, started = spec.get("activeDeadlineSeconds"), _epoch(status.get("startedAt"))
    if deadline is not None and started is not None and not on_exit and at > started + float(deadline):
        return "workflow exceeded its activeDeadlineSeconds (Argo signals through pods/exec)"
    return None


class WorkflowWatch:
    def __init__(self, kubelet):
        self.k = kubelet
        self.workflows: dict[tuple[str, str], dict] = {}
        self.lock = threading.Lock()

    def watch(self) -> None:
        while not self.k.stopping.is_set():
            try:
                listed = self.k.api.request("GET", PATH)
                with self.lock:
                    self.workflows = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in listed["items"]}
                version = listed["metadata"]["resourceVersion"]
                while not self.k.stopping.is_set():
                    for event in self.k.api.watch(PATH, {"resourceVersion": version}):
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise RuntimeError(obj.get("message", "watch error"))
                        version = obj["metadata"]["resourceVersion"]
                        key = (obj["metadata"].get("namespace"), obj["metadata"].get("name"))
                        with self.lock:
                            if event["type"] == "DELETED":
                                self.workflows.pop(key, None)
                            elif event["type"] != "BOOKMARK":
                                self.workflows[key] = obj
                        self.check()
            except Exception as err:  # noqa: BLE001 -- e.g. Argo's CRDs not installed yet
                if self.k.stopping.is_set():
                    return
                self.k.say(f"workflow watch: {str(err).splitlines()[0]}; trying again in 5 s")
                time.sleep(5)

    def check(self) -> None:
        at = time.time()
        for worker in self.k.running_workers():
            if worker.stop_reason is not None:
                continue
            meta = worker.pod["metadata"]
            name = (meta.get("labels") or {}).get(WORKFLOW_LABEL)
            with self.lock:
                workflow = self.workflows.get((meta.get("namespace", "default"), name)) if name else None
            reason = stop_reason(workflow, worker.pod, at) if workflow else None
            if reason:
                grace = worker.pod["spec"].get("terminationGracePeriodSeconds")
                worker.stop(reason, float(30 if grace is None else grace))

    def tick(self) -> None:
        """Deadlines pass without an event: checked every second."""
        while not self.k.stopping.wait(1.0):
            self.check()
