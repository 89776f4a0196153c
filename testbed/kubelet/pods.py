"""One pod on one of our Nodes: its containers as local processes, its status reported.

Init containers run one at a time, in order; then every container at once. A container
is its process and everything that process starts (testbed.runtime.ProcessTree):
when the first ends the others are killed, as a container's processes die with it. The
status goes to pods/status after every change. Stopping (pod deletion, Argo's Terminate)
sends SIGTERM to every running container, SIGKILL after the grace period.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Protocol

from ..kube import ApiException, Kube, api_message
from ..runtime import MARKER_ENV, ProcessTree, process_env, process_table
from .cgroups import CpuCgroup, cpu_limit_of
from .logs import LogPump
from .sandbox import SA_PATH, Sandbox, wrap
from .security import process_prefix
from .status import WAIT_NOT_RUN, ContainerState, PodState, exit_code_of, termination_message
from .translate import ContainerRun, PodContext, PodError, plan_pod

POLL = 0.2
# A --no-exec pod annotated with this ends at once with the annotation's exit code.
NO_EXEC_EXIT = "torchdag.io/no-exec-exit"
TREE_EVERY = 5  # polls between two looks at the container's process tree
BACKOFF_FIRST, BACKOFF_MAX = 10.0, 300.0  # kubelet's container restart back-off
TOKEN_SECONDS = 86400
PUMP_DRAIN_S = 2.0



def is_daemon(pod: dict) -> bool:
    """Argo's template of the pod (ARGO_TEMPLATE, which Argo gives each init container) says
    `daemon: true`."""
    for container in (pod.get("spec") or {}).get("initContainers") or []:
        for env in container.get("env") or []:
            if env.get("name") == "ARGO_TEMPLATE":
                try:
                    return bool(json.loads(env.get("value") or "{}").get("daemon"))
                except ValueError:
                    return False
    return False

class Recording(Protocol):
    def write(self, entry: dict) -> None: ...


class PodHost(Protocol):
    """What a pod worker needs of the kubelet that runs it (kubelet.py's Kubelet): the API,
    the process environment, where logs go, and the calls back when its pod is done."""

    api: Kube
    base_env: dict[str, str]
    bin_dir: str
    no_exec: bool
    no_exec_seconds: float
    no_exec_hold: str | None
    released_at: float
    stopping: threading.Event  # set when the kubelet stops
    record: Recording | None
    run_id: str
    state_dir: Path

    def say(self, text: str) -> None: ...

    def address(self, node: str) -> str: ...

    def context_for(self, pod: dict) -> PodContext: ...

    def log_path(self, namespace: str, pod: str, container: str) -> Path: ...

    def pod_done(self, worker: PodWorker) -> None: ...


class PodWorker:
    def __init__(self, kubelet: PodHost, pod: dict):
        self.k = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta.get("namespace", "default"), meta["name"], meta["uid"]
        self.key = f"{self.namespace}/{self.name}"
        spec = pod["spec"]
        node = spec["nodeName"]
        # No pod network here: every pod, hostNetwork or not, has its Node's address.
        address = kubelet.address(node)
        self.state = PodState(node, address, address,
                              spec.get("restartPolicy", "Always"),
                              kept_conditions=list((pod.get("status") or {}).get("conditions") or []))
        self.images = {c["name"]: c.get("image", "") for c in spec.get("initContainers", []) + spec["containers"]}
        self.state.inits = [ContainerState(c["name"], c.get("image", ""), init=True)
                            for c in spec.get("initContainers") or []]
        self.state.mains = [ContainerState(c["name"], c.get("image", "")) for c in spec["containers"]]
        self.trees: dict[str, ProcessTree] = {}
        self.popens: dict[str, subprocess.Popen] = {}
        self.pumps: dict[str, LogPump] = {}
        self.cgroups: dict[str, CpuCgroup] = {}  # containers with a CPU limit
        self.stop_reason: str | None = None
        self.kill_at: float | None = None
        self.done = threading.Event()
        self.stopping = threading.Event()  # set by stop(): ends a --no-exec pod's Running time early
        # Wakes a held --no-exec pod: stopped, or released (SIGUSR1). Thousands of held pods each
        # polling once a second kept a 2-core machine's kubelet at 116% CPU, starving the controller.
        self.wake = threading.Event()
        self.exit_code: int | None = None  # --no-exec: end now with this code (exit_with)
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"pod {self.key}", daemon=True)
        active = spec.get("activeDeadlineSeconds")
        self.deadline = time.monotonic() + float(active) if active is not None else None

    # -- control from the kubelet's watch threads

    def start(self) -> None:
        self.thread.start()

    def exit_with(self, code: int) -> None:
        """--no-exec: end the held pod now as its process exiting `code` would (the annotation
        NO_EXEC_EXIT: the scale bench's stand-in for ranks that fail once a peer is lost)."""
        if self.exit_code is None:
            self.exit_code = code
            self.k.say(f"{self.key}: exiting {code} (annotation {NO_EXEC_EXIT})")
            self.stopping.set()
            self.wake.set()

    def stop(self, reason: str, grace: float) -> None:
        """SIGTERM every running container now, SIGKILL after grace seconds."""
        with self.lock:
            first = self.stop_reason is None
            self.stop_reason = self.stop_reason or reason
            kill_at = time.monotonic() + max(grace, 0)
            self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)
            self.stopping.set()
            self.wake.set()
            if first:
                self.k.say(f"{self.key}: stopping ({reason}; SIGKILL after {grace:g} s)")
                for tree in self.trees.values():
                    tree.signal(signal.SIGTERM)

    # -- the pod's life

    def push(self) -> None:
        """Report the pod's status. A report the API server did not take for a while (a timeout,
        429 or 5xx) is sent again, backing off to 30 s, until it is taken, the pod is gone or the
        kubelet stops, as kubelet's status manager keeps syncing: 4,096 pods ending at once timed
        out 975 reports, whose pods then stayed Running on the server for good."""
        delay = 1.0
        while True:
            try:
                self.k.api.patch_pod_status(self.namespace, self.name, self.state.to_api())
                return
            except Exception as err:  # noqa: BLE001 -- a deleted pod or a restarting API server: said, not fatal
                passing = not isinstance(err, ApiException) or err.status in (429, 500, 502, 503, 504)
                if delay == 1.0 or not passing:
                    self.k.say(f"{self.key}: status not reported: {api_message(err)}"
                               + (" (tried again until taken)" if passing else ""))
                if not passing or self.k.stopping.wait(delay):
                    return
                delay = min(30.0, delay * 2)

    def _run(self) -> None:
        try:
            if self.k.no_exec:
                self._complete_without_processes()
            else:
                self._run_processes()
        except Exception as err:  # noqa: BLE001 -- one pod's trouble must not stop the others
            self.k.say(f"{self.key}: kubelet error: {err!r}")
        finally:
            if getattr(self, "sandbox", None) is not None:
                self.sandbox.release_volumes()
            for cgroup in self.cgroups.values():
                cgroup.remove()
            self.done.set()
            self.k.pod_done(self)

    def _complete_without_processes(self) -> None:
        """--no-exec (benchmarks): Running, then Succeeded; nothing is started. With
        --record, each container's process as it would start is written down first. A pod
        stopped while Running (deleted, or its Workflow terminated) ends as a process that
        took SIGTERM would: exit 143. With no_exec_hold, only pods that carry that label key
        are held Running; the others end at once. Once the kubelet is told to release them
        (SIGUSR1: the scale bench has what it measures), every pod held since ends Succeeded."""
        if self.k.record is not None:
            self._record()
        for c in self.state.inits:
            c.start(None, self.state.node)
            c.finish(0, "not run: --no-exec")
        for c in self.state.mains:
            c.start(None, self.state.node)
        self.push()
        labels = self.pod["metadata"].get("labels") or {}
        hold = self.k.no_exec_seconds if self.k.no_exec_hold in (None, *labels) else 0
        since = time.monotonic()
        until = since + hold
        stopped = self.stopping.is_set()
        # An Argo daemon (the scheduling watch) runs until it is stopped: one that ends on its own,
        # even with exit 0, fails its node (operator.go assessNodeStatus).
        daemon = is_daemon(self.pod)
        while not stopped and (daemon or (self.k.released_at < since and time.monotonic() < until)):
            self.wake.wait(None if daemon else until - time.monotonic())
            self.wake.clear()  # before released_at is read again: a release after this wakes the next wait
            stopped = self.stopping.is_set()
        code, message = (143, f"not run: --no-exec; {self.stop_reason}") if stopped else (0, "not run: --no-exec")
        if self.exit_code is not None and not self.stop_reason:
            code, message = self.exit_code, f"not run: --no-exec; exit {self.exit_code} ({NO_EXEC_EXIT})"
        for c in self.state.mains:
            c.finish(code, message)
        self.push()

    def _record(self) -> None:
        meta = self.pod["metadata"]
        base = {"namespace": self.namespace, "pod": self.name, "node": self.state.node,
                "annotations": meta.get("annotations") or {}, "labels": meta.get("labels") or {}}
        try:
            inits, mains = plan_pod(self.pod, self.k.context_for(self.pod))
        except PodError as err:
            self.k.record.write(dict(base, error=str(err)))
            return
        for run in inits + mains:
            self.k.record.write(dict(base, container=run.name, init=run.init, role=run.role, argv=run.argv,
                                     env=run.env, cwd=run.cwd, device=run.device, notes=run.notes))

    def _plan(self) -> tuple[list[ContainerRun], list[ContainerRun]] | None:
        """The containers as they will start; while one cannot (a missing ConfigMap), the
        pod stays Pending with the reason and the plan is tried again, as kubelet does."""
        while self.stop_reason is None:
            try:
                return plan_pod(self.pod, self.k.context_for(self.pod))
            except PodError as err:
                for c in self.state.inits + self.state.mains:
                    c.waiting = ("CreateContainerConfigError", str(err))
                self.push()
                self.k.say(f"{self.key}: cannot start: {err}")
                time.sleep(5)
        return None

    def _run_processes(self) -> None:
        self.push()  # Pending, with IPs and start time
        plan = self._plan()
        if plan is None:
            return
        inits, mains = plan
        self.sandbox = Sandbox.for_pod(self.k.state_dir, self.pod)
        self._prepare_volumes()
        for run in inits:
            state = self._state(run)
            state.waiting = ("PodInitializing", "")
            self._start(run, state)
            self.push()
            self._wait({run.name: state})
            self.push()
            if state.exit_code != 0 or self.stop_reason:
                self._finish_not_started()
                return
        states = {}
        for run in mains:
            state = self._state(run)
            if run.role == "argo-wait":
                # Running (and ready) beside main, as the sidecar it stands for: Argo holds a
                # daemon template's node until every container of its pod is ready.
                state.stand_in = True
                state.start(None, self.state.node)
                continue
            self._start(run, state)
            states[run.name] = state
        self.push()
        self._wait(states)
        for state in self.state.mains:
            if state.stand_in and not state.terminated:
                state.finish(0, WAIT_NOT_RUN)
        self.push()

    def _finish_not_started(self) -> None:
        self.push()

    def _state(self, run: ContainerRun) -> ContainerState:
        return next(c for c in (self.state.inits if run.init else self.state.mains) if c.name == run.name)

    def _prepare_volumes(self) -> None:
        spec = self.pod["spec"]
        for volume in spec.get("volumes") or []:
            sources = (volume.get("projected") or {}).get("sources") or []
            if any("serviceAccountToken" in s for s in sources):
                self._service_account()
            for kind, lookup in (("configMap", self.k.api.config_map_data), ("secret", self.k.api.secret_data)):
                if kind in volume:
                    ref = volume[kind]
                    data = lookup(self.namespace, ref.get("name") or ref.get("secretName"))
                    if data is not None:
                        self.sandbox.write_files(volume["name"], data, ref.get("items"))

    def _service_account(self) -> None:
        account = self.pod["spec"].get("serviceAccountName") or "default"
        try:
            token = self.k.api.token_for(self.namespace, account, self.pod, TOKEN_SECONDS)
        except Exception as err:  # noqa: BLE001 -- the container then finds no token, as it would say
            self.k.say(f"{self.key}: no token for ServiceAccount {account}: {str(err).splitlines()[0]}")
            return
        self.sandbox.write_service_account(token, self.k.api.ca_bytes(), self.namespace)
        self.k.say(f"{self.key}: ServiceAccount {account} token (TokenRequest, bound to the pod) at {SA_PATH}")

    def _start(self, run: ContainerRun, state: ContainerState) -> None:
        log_path = self.k.log_path(self.namespace, self.name, run.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        notes = list(run.notes)
        termination = self.sandbox.termination_file(run.name)
        binds: list[tuple[str, str]] = []
        if self.sandbox.mounts_allowed:
            binds = self.sandbox.binds(self.pod["spec"].get("volumes") or [], run.volume_mounts,
                                       (termination, run.termination_path), notes)
        elif run.volume_mounts:
            notes.append("not root: no mount namespace, the container's volumes and "
                         f"{run.termination_path} are not mounted")
        state.termination_file = termination  # type: ignore[attr-defined]
        env = process_env(self.k.base_env, self.k.bin_dir, run.env)
        if run.role == "argoexec":  # `argoexec init` copies itself from PATH into /var/run/argo
            env["PATH"] = str(Path(run.argv[0]).parent) + ":" + env["PATH"]
        marker = f"{self.k.run_id}/{self.uid}/{run.name}"  # unique per kubelet: finds this container's orphans
        env[MARKER_ENV] = marker
        argv = wrap(process_prefix(self.pod, run.name, run.role, notes) + run.argv, binds)
        limit = cpu_limit_of(self.pod, run.name)
        if limit:
            if run.name not in self.cgroups:
                cgroup = CpuCgroup.for_container(self.uid, run.name, limit, notes)
                if cgroup is not None:
                    self.cgroups[run.name] = cgroup
            if run.name in self.cgroups:
                argv = self.cgroups[run.name].wrap(argv)
        for note in notes:
            self.k.say(f"{self.key} {run.name}: {note}")
        read_end, write_end = os.pipe()  # through LogPump: each line's time kept for the logs API
        try:
            popen = subprocess.Popen(argv, env=env, cwd=run.cwd, stdin=subprocess.DEVNULL, stdout=write_end,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as err:
            os.close(read_end)
            state.finish(128, f"cannot start {run.argv[0]}: {err.strerror}", reason="StartError")
            self.k.say(f"{self.key} {run.name}: cannot start: {err}")
            return
        finally:
            os.close(write_end)
        self.pumps[run.name] = LogPump(read_end, log_path)
        self.pumps[run.name].start()
        with self.lock:
            self.popens[run.name] = popen
            self.trees[run.name] = ProcessTree(popen.pid, marker)
            if self.stop_reason is not None:
                self.trees[run.name].signal(signal.SIGTERM)
        state.start(popen.pid, self.state.node)
        state.run = run  # type: ignore[attr-defined]
        self.k.say(f"{self.key} {run.name}: pid {popen.pid} ({run.role}, device {run.device}): "
                   f"{shlex.join(run.argv)} > {log_path}")

    def _wait(self, states: dict[str, ContainerState]) -> None:
        """Until every container in states has ended for good; each change reported at once."""
        polls = 0
        while any(s.running or s.restart_at is not None for s in states.values()):
            time.sleep(POLL)
            polls += 1
            # The process table once a second, shared by the containers: a scan of /proc is
            # not free on a small machine, and signals look up the tree afresh anyway.
            table = process_table() if polls % TREE_EVERY == 0 else None
            if self.deadline is not None and time.monotonic() >= self.deadline and self.stop_reason is None:
                # kubelet's activeDeadline handler: the pod fails, its containers are killed
                self.state.reason = "DeadlineExceeded"
                self.state.message = "Pod was active on the node longer than the specified deadline"
                self.stop(f"spec.activeDeadlineSeconds {self.pod['spec']['activeDeadlineSeconds']} passed", 0)
            with self.lock:
                kill = self.kill_at is not None and time.monotonic() >= self.kill_at
                stopping = self.stop_reason is not None
            for name, state in states.items():
                if state.restart_at is not None:
                    if stopping:
                        state.restart_at = None
                        state.finish(*self._last_exit(state))
                        self.push()
                    elif time.monotonic() >= state.restart_at:
                        state.restart_at = None
                        self._start(state.run, state)  # type: ignore[attr-defined]
                        self.push()
                    continue
                if not state.running:
                    continue
                popen, tree = self.popens[name], self.trees[name]
                if table is not None:
                    tree.refresh(table)
                if kill and tree.alive(table):
                    tree.signal(signal.SIGKILL)
                if popen.poll() is None:
                    continue
                tree.signal(signal.SIGKILL)  # the container's other processes die with it
                self.pumps[name].join(PUMP_DRAIN_S)  # its last lines in the log before the tail is read
                self._finished(name, state, popen.returncode)
                if not stopping and self._restarts(state):
                    backoff = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** state.restart_count)
                    self.k.say(f"{self.key} {name}: restarting in {backoff:g} s (restartPolicy "
                               f"{self.state.restart_policy})")
                    state.restart(time.monotonic() + backoff, backoff)
                self.push()

    def _restarts(self, state: ContainerState) -> bool:
        """kubelet's rule: Always restarts every container that ends, OnFailure a failed one;
        an init container only when it failed."""
        policy = self.state.restart_policy
        if policy == "Never" or state.stand_in:
            return False
        return state.exit_code != 0 or (policy == "Always" and not state.init)

    @staticmethod
    def _last_exit(state: ContainerState) -> tuple[int, str]:
        last = state.last_state.get("terminated") or {}
        return last.get("exitCode", 0), last.get("message", "")

    def _finished(self, name: str, state: ContainerState, returncode: int) -> None:
        code, sig = exit_code_of(returncode)
        run: ContainerRun = state.run  # type: ignore[attr-defined]
        try:
            text = state.termination_file.read_text(errors="replace")  # type: ignore[attr-defined]
        except OSError:
            text = ""
        message = termination_message(text, run.termination_policy, code, self._log_tail(name))
        state.finish(code, message)
        state.signal = sig
        if run.emissary:  # what the emissary would leave for Argo's wait container
            argo = self._var_run_argo()
            if argo is not None:
                (argo / "ctr" / name).mkdir(parents=True, exist_ok=True)
                (argo / "ctr" / name / "exitcode").write_text(str(code))
        self.k.say(f"{self.key} {name}: exit {code}{f' (signal {sig})' if sig else ''}"
                   f"{f': {message.strip()}' if message.strip() else ''}")

    def _var_run_argo(self) -> Path | None:
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes") or []}
        for c in self.pod["spec"]["containers"]:
            for m in c.get("volumeMounts") or []:
                if m["mountPath"] == "/var/run/argo" and m["name"] in volumes:
                    return self.sandbox.source_for(volumes[m["name"]], [])
        return None

    def _log_tail(self, name: str) -> str:
        path = self.k.log_path(self.namespace, self.name, name)
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 16384))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""
