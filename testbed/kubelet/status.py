"""A pod's status as kubelet reports it (pkg/kubelet/kubelet_pods.go generateAPIPodStatus,
getPhase), built from what happened to its processes."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

MESSAGE_LIMIT = 4096  # kubelet keeps at most 4096 bytes of a termination message
FALLBACK_LINES = 80  # FallbackToLogsOnError: the last 80 lines, at most 2048 bytes
FALLBACK_BYTES = 2048
WAIT_NOT_RUN = ("the process kubelet does not run Argo's wait sidecar (--wait report): no outputs are saved "
                "and no WorkflowTaskResult is written; this state stands for it")


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerState:
    """One container as it went: waiting, then running, then terminated."""

    name: str
    image: str
    init: bool = False
    waiting: tuple[str, str] = ("PodInitializing", "")  # (reason, message)
    pid: int | None = None
    started_at: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    finished_at: str | None = None
    reason: str | None = None  # for terminated: Completed, Error, OOMKilled, ContainerCannotRun...
    message: str = ""
    node: str = ""
    stand_in: bool = False  # not a process: Argo's wait sidecar under --wait report
    restart_count: int = 0
    last_state: dict = field(default_factory=dict)  # the previous run's terminated state, after a restart
    restart_at: float | None = None  # time.monotonic() of the next start (restartPolicy Always/OnFailure)

    @property
    def running(self) -> bool:
        return self.started_at is not None and self.exit_code is None

    @property
    def terminated(self) -> bool:
        return self.exit_code is not None

    def start(self, pid: int | None, node: str) -> None:
        self.pid, self.node, self.started_at = pid, node, now()

    def finish(self, exit_code: int, message: str = "", reason: str | None = None) -> None:
        self.exit_code = exit_code
        self.finished_at = now()
        self.started_at = self.started_at or self.finished_at
        self.reason = reason or ("Completed" if exit_code == 0 else "Error")
        self.message = message[-MESSAGE_LIMIT:] if message else ""

    def restart(self, at: float, backoff: float) -> None:
        """This run ended and the container starts again at `at` (kubelet's back-off)."""
        self.last_state = self.to_api()["state"]
        self.restart_count += 1
        self.restart_at = at
        self.waiting = ("CrashLoopBackOff", f"back-off {backoff:g}s restarting failed container={self.name}")
        self.started_at = self.exit_code = self.signal = self.finished_at = self.reason = None
        self.message = ""

    def to_api(self) -> dict:
        status = {"name": self.name, "image": self.image, "imageID": "", "restartCount": self.restart_count,
                  "ready": self.running and not self.init, "started": self.running, "lastState": self.last_state}
        if self.pid is not None:
            status["containerID"] = f"process://{self.node}/{self.pid}"
        if self.terminated:
            term = {"exitCode": self.exit_code, "reason": self.reason, "startedAt": self.started_at,
                    "finishedAt": self.finished_at}
            if self.signal:
                term["signal"] = self.signal
            if self.pid is not None:
                term["containerID"] = status["containerID"]
            if self.message:
                term["message"] = self.message
            status["state"] = {"terminated": term}
        elif self.running:
            status["state"] = {"running": {"startedAt": self.started_at}}
        else:
            reason, message = self.waiting
            status["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        return status


def exit_code_of(returncode: int) -> tuple[int, int | None]:
    """subprocess' returncode -> (exit code as a container runtime reports it, signal):
    killed by signal N reads 128+N."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def termination_message(file_text: str, policy: str, exit_code: int, log_tail: str) -> str:
    """The file's text; with FallbackToLogsOnError and nothing in the file on a failure,
    the end of the container's log (kubelet's findContainerStatusTerminationMessage)."""
    if file_text.strip() or policy != "FallbackToLogsOnError" or exit_code == 0:
        return file_text[:MESSAGE_LIMIT]
    lines = log_tail.splitlines()[-FALLBACK_LINES:]
    return "\n".join(lines)[-FALLBACK_BYTES:]


@dataclass
class PodState:
    node: str
    host_ip: str
    pod_ip: str
    restart_policy: str = "Never"
    inits: list[ContainerState] = field(default_factory=list)
    mains: list[ContainerState] = field(default_factory=list)
    start_time: str = field(default_factory=now)
    reason: str | None = None  # pod-level, e.g. when it could not start
    message: str | None = None
    kept_conditions: list[dict] = field(default_factory=list)  # others' (PodScheduled): a merge patch replaces the list
    _transitions: dict = field(default_factory=dict)  # condition type -> (status, when it last changed)

    def phase(self) -> str:
        """kubelet's getPhase for restartPolicy Never and OnFailure, without restarts."""
        failed_init = any(c.terminated and c.exit_code != 0 for c in self.inits)
        if failed_init:
            return "Failed" if self.restart_policy == "Never" else "Pending"
        if not all(c.terminated for c in self.inits):
            return "Pending"
        if not self.mains or any(not c.terminated and not c.running and not c.stand_in for c in self.mains):
            return "Running" if any(c.running or c.restart_count for c in self.mains) else "Pending"
        if any(c.running for c in self.mains):
            return "Running"
        return "Succeeded" if all(c.exit_code == 0 for c in self.mains) else "Failed"

    def conditions(self) -> list[dict]:
        initialized = all(c.terminated and c.exit_code == 0 for c in self.inits)
        phase = self.phase()
        ready = phase == "Running" and all(c.running for c in self.mains if not c.stand_in)
        done = phase in ("Succeeded", "Failed")

        def cond(kind: str, ok: bool, reason: str | None = None) -> dict:
            value = "True" if ok else "False"
            if self._transitions.get(kind, (None,))[0] != value:
                self._transitions[kind] = (value, now())
            entry = {"type": kind, "status": value, "lastTransitionTime": self._transitions[kind][1],
                     "lastProbeTime": None}
            if reason and not ok:
                entry["reason"] = reason
            return entry

        not_ready = "PodCompleted" if done else "ContainersNotReady"
        ours = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
        return [c for c in self.kept_conditions if c.get("type") not in ours] + [
                cond("PodReadyToStartContainers", not done),
                cond("Initialized", initialized or done, "ContainersNotInitialized"),
                cond("ContainersReady", ready, not_ready),
                cond("Ready", ready, not_ready)]

    def to_api(self) -> dict:
        status = {
            "phase": self.phase(),
            "conditions": self.conditions(),
            "hostIP": self.host_ip, "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.pod_ip, "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "containerStatuses": [c.to_api() for c in self.mains],
        }
        if self.inits:
            status["initContainerStatuses"] = [c.to_api() for c in self.inits]
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message or ""
        return status
