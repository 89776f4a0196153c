"""The process kubelet: watches the pods bound to its Nodes and runs each (pods.py), keeps
the Nodes Ready (nodes.py), deletes deleted pods once their processes are gone, and stands
in for what Argo does through pods/exec (workflows.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from ..kube import Kube
from ..runtime import Options
from .nodes import NodeKeeper
from .pods import NO_EXEC_EXIT, PodWorker
from .sandbox import remove_made_folders
from .translate import PodContext

TERMINAL = ("Succeeded", "Failed")


class Recorder:
    """JSON lines, one per container, written whole under a lock (pods finish on many threads)."""

    def __init__(self, path: str):
        self.file = open(path, "a", encoding="utf-8")
        self.lock = threading.Lock()

    def write(self, entry: dict) -> None:
        with self.lock:
            self.file.write(json.dumps(entry) + "\n")
            self.file.flush()


class Kubelet:
    def __init__(self, api: Kube, nodes: list[str], *, state_dir: Path, options: Options,
                 argoexec: str | None = None, wait: str = "report", no_exec: bool = False,
                 no_exec_seconds: float = 0.0, no_exec_hold: str | None = None, lease_every: float = 10.0,
                 out=None, record=None):
        self.api = api
        self.nodes = set(nodes)
        self.state_dir = state_dir
        self.logs_dir = state_dir / "logs"
        self.options = options
        self.argoexec = argoexec
        self.wait = wait
        self.no_exec = no_exec
        self.no_exec_seconds = no_exec_seconds
        self.no_exec_hold = no_exec_hold  # only pods with this label key are held no_exec_seconds (None: all)
        self.released_at = 0.0  # SIGUSR1's time (monotonic): --no-exec pods held since before it end now
        self.record = record  # a Recorder (--record): what each container would start
        self.out = out or sys.stderr
        self.base_env = dict(os.environ)
        self.bin_dir = str(Path(sys.executable).parent)
        self.run_id = f"kubelet-{os.getpid()}-{time.time_ns()}"
        self.keeper = NodeKeeper(api, nodes, lease_every=lease_every, say=self.say)
        self.workers: dict[str, PodWorker] = {}  # uid -> worker (finished ones kept: not run twice)
        self.deleting: set[str] = set()  # uids whose pod is being deleted
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._say_lock = threading.Lock()

    def say(self, text: str) -> None:
        with self._say_lock:
            self.out.write(f"[kubelet {time.strftime('%H:%M:%S')}] {text}\n")
            self.out.flush()

    # -- what workers ask

    def address(self, node: str) -> str:
        """The Node's address; with no pod network here, every pod on it has this IP too."""
        return self.keeper.address(node)

    def log_path(self, namespace: str, pod: str, container: str) -> Path:
        return self.logs_dir / namespace / pod / f"{container}.log"

    def pod_running(self, namespace: str, name: str) -> bool:
        """Whether a pod of that name still has processes here (a followed log goes on)."""
        with self.lock:
            return any(w.key == f"{namespace}/{name}" and not w.done.is_set() for w in self.workers.values())

    def context_for(self, pod: dict) -> PodContext:
        node = pod["spec"]["nodeName"]
        ip = self.address(node)
        return PodContext(node_name=node, host_ip=ip, pod_ip=ip,
                          api_host=self.api.api_host, api_port=self.api.api_port,
                          allocatable=self.keeper.allocatable(node), config_maps=self.api.config_map_data,
                          secrets=self.api.secret_data, options=self.options, argoexec=self.argoexec, wait=self.wait)

    def pod_done(self, worker: PodWorker) -> None:
        if worker.uid in self.deleting:
            self._delete_now(worker.pod)

    # -- pod events

    def _delete_now(self, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            self.api.delete_pod_now(meta.get("namespace", "default"), meta["name"], meta["uid"])
            self.say(f"{meta.get('namespace', 'default')}/{meta['name']}: deleted (processes gone)")
        except Exception as err:  # noqa: BLE001
            self.say(f"{meta['name']}: final delete failed: {str(err).splitlines()[0]}")

    def on_pod(self, kind: str, pod: dict) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if spec.get("nodeName") not in self.nodes:
            return
        uid = meta["uid"]
        key = f"{meta.get('namespace', 'default')}/{meta['name']}"
        if kind == "DELETED":
            with self.lock:
                worker = self.workers.pop(uid, None)
            if worker is not None and not worker.done.is_set():
                worker.stop("pod object removed", 0)
            return
        with self.lock:
            worker = self.workers.get(uid)
        if meta.get("deletionTimestamp"):
            if uid in self.deleting:
                return
            self.deleting.add(uid)
            grace = meta.get("deletionGracePeriodSeconds")
            if worker is None or worker.done.is_set():
                self._delete_now(pod)
            else:
                worker.stop("pod deleted", float(30 if grace is None else grace))
            return
        if worker is not None:
            code = (meta.get("annotations") or {}).get(NO_EXEC_EXIT)
            if self.no_exec and code is not None and code.lstrip("-").isdigit():
                worker.exit_with(int(code))
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL:
            return
        if phase == "Running":  # ours from before this kubelet started: its processes are gone
            self._lost(pod, key)
            return
        worker = PodWorker(self, pod)
        with self.lock:
            self.workers[uid] = worker
        self.say(f"{key}: bound to {spec['nodeName']}: {'completing (--no-exec)' if self.no_exec else 'starting'}")
        # One thread per pod, --no-exec too: its pods wait (--no-exec-seconds) Running, all at
        # once, as a job's pods run (a worker pool would cap how many are Running).
        worker.start()

    def _lost(self, pod: dict, key: str) -> None:
        """A Running pod no process of ours backs (a kubelet restart): reported Failed."""
        worker = PodWorker(self, pod)
        for state in worker.state.inits + worker.state.mains:
            state.start(None, worker.state.node)
            state.finish(137, "the process kubelet restarted and its processes are gone", reason="Error")
        worker.state.reason, worker.state.message = "NodeLost", "the process kubelet restarted"
        worker.push()
        self.say(f"{key}: was Running before this kubelet started: reported Failed")
        with self.lock:
            self.workers[pod["metadata"]["uid"]] = worker
        worker.done.set()

    def watch_pods(self) -> None:
        """List then watch every bound pod; filter to our Nodes (one watch for any number of Nodes)."""
        query = {"fieldSelector": "spec.nodeName!="}
        while not self.stopping.is_set():
            try:
                items, cont = [], None
                while True:
                    page = self.api.request("GET", "/api/v1/pods", query=dict(query, limit="500", **{"continue": cont}))
                    items += page["items"]
                    version, cont = page["metadata"]["resourceVersion"], page["metadata"].get("continue")
                    if not cont:
                        break
                for pod in items:
                    self.on_pod("ADDED", pod)
                while not self.stopping.is_set():
                    for event in self.api.watch("/api/v1/pods", dict(query, resourceVersion=version)):
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self.on_pod(event["type"], obj)
            except Exception as err:  # noqa: BLE001 -- relist after any break (410 Gone included)
                if self.stopping.is_set():
                    return
                self.say(f"pod watch: {str(err).splitlines()[0]}; listing again")
                time.sleep(1)

    def follow_selector(self, selector: str, every: float = 10.0) -> None:
        """--selector: Nodes registered later are served too (their already-bound pods
        started), Nodes deleted are dropped."""
        unlisted: set[str] = set()
        while not self.stopping.wait(every):
            try:
                listed = self.api.request("GET", "/api/v1/nodes", query={"labelSelector": selector})
            except Exception as err:  # noqa: BLE001
                self.say(f"node list: {str(err).splitlines()[0]}")
                continue
            found = {n["metadata"]["name"]: n for n in listed["items"]}
            new = set(found) - self.nodes
            # Heartbeats first, for all of them: a Node unserved for 50 s is tainted unreachable
            # (one pod list per new Node made 3,000 Nodes wait minutes for their first Lease).
            for name in sorted(new):
                self.keeper.info[name] = found[name]
                self.keeper.nodes.append(name)
                self.nodes.add(name)
                self.say(f"serving node {name} (matches {selector})")
            unlisted |= new  # their pods bound before we served them: the watch passed them by
            if unlisted:
                try:
                    pods = self.api.request("GET", "/api/v1/pods", query={
                        "fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"})["items"]
                except Exception as err:  # noqa: BLE001 -- tried again next round
                    self.say(f"pod list: {str(err).splitlines()[0]}")
                else:
                    for pod in pods:
                        if (pod.get("spec") or {}).get("nodeName") in unlisted:
                            self.on_pod("ADDED", pod)
                    unlisted = set()
            for name in sorted(self.nodes - set(found)):
                self.nodes.discard(name)
                self.keeper.nodes.remove(name)
                self.say(f"node {name} is gone: no longer served")

    # -- lifecycle

    def release(self) -> None:
        """--no-exec: every pod held Running since before now ends Succeeded (the scale bench's
        "done measuring"); pods that start later are held as ever."""
        self.released_at = time.monotonic()
        for worker in self.running_workers():
            worker.wake.set()

    def running_workers(self) -> list[PodWorker]:
        with self.lock:
            return [w for w in self.workers.values() if not w.done.is_set()]

    def shutdown(self, grace: float = 2.0) -> None:
        """Stop every process we started (the pods stay as the API server last heard)."""
        self.stopping.set()
        self.keeper.stop()
        for worker in self.running_workers():
            worker.stop("the process kubelet is stopping", grace)
        deadline = time.monotonic() + grace + 3
        for worker in self.running_workers():
            worker.done.wait(max(0.0, deadline - time.monotonic()))
        if not self.running_workers():
            remove_made_folders()  # /opt/torchdag/... mount points: this machine is left as found

