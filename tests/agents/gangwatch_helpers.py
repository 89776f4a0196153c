"""A fake Kubernetes API on 127.0.0.1 and the way to run torchdag/agents/gangwatch.py
against it, for the gang-watch tests here (tests/agents/). This folder's conftest.py imports its `api`
fixture, so the tests need no import."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from trainer_helpers import REPO, clean_env

GANGWATCH = REPO / "torchdag" / "agents" / "gangwatch.py"
WF, NS, TOKEN = "gang-volcano-x7k2p", "training", "test-token-123"
SELECTOR = f"workflows.argoproj.io/workflow={WF}"
PODS_PATH = f"/api/v1/namespaces/{NS}/pods"
WF_PATH = f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows/{WF}"
UNSCHEDULABLE = "0/12 nodes are available: 12 Insufficient huawei.com/Ascend910."
RUNNING_WF = {"metadata": {"name": WF}, "spec": {}, "status": {"phase": "Running"}}
PODGROUP = "scheduling.volcano.sh/v1beta1/podgroups/" + WF
PODGROUP_PATH = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NS}/podgroups/{WF}"


def pod(rank: int, how: str = "condition", message: str = UNSCHEDULABLE, attempt: str = WF) -> dict:
    """A training pod as the API lists it: scheduled one of three ways, or Pending."""
    meta = {"name": f"{WF}-node-{rank}-{1000 + rank}", "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"workflows.argoproj.io/workflow": WF, "torchdag.io/node-rank": str(rank)},
            "annotations": {"workflows.argoproj.io/node-name": f"{attempt}.node-{rank}"}}
    spec, status = {}, {"phase": "Pending"}
    if how == "condition":
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    elif how == "running":
        status["phase"] = "Running"
    elif how == "nodename":
        spec["nodeName"] = "atlas-01"
    elif how == "failed":
        status["phase"] = "Failed"
    elif how == "unschedulable":
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": message}]
    return {"metadata": meta, "spec": spec, "status": status}


def task_pod(task: str, node_id: str, phase: str = "Running", attempt: str = WF, message: str = "") -> dict:
    """A pod of another task (the watch's own, `gang`), as Argo labels and annotates it."""
    meta = {"name": f"{WF}-{task}-{abs(hash(node_id)) % 10000}", "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"workflows.argoproj.io/workflow": WF},
            "annotations": {"workflows.argoproj.io/node-name": f"{attempt}.{task}",
                            "workflows.argoproj.io/node-id": node_id}}
    status = {"phase": phase}
    if message:
        status["containerStatuses"] = [{"name": "main", "state": {"terminated": {
            "exitCode": 1, "reason": "Error", "message": message}}}]
    return {"metadata": meta, "spec": {"nodeName": "atlas-01"}, "status": status}


def pod_list(*pods) -> tuple[int, dict]:
    return 200, {"kind": "PodList", "items": list(pods)}


def status(code: int, message: str) -> tuple[int, dict]:
    return code, {"kind": "Status", "status": "Failure", "message": message, "code": code}


class FakeApi:
    """Answers GET pods from a script (the last answer repeats), GET and PATCH of the
    Workflow from fixed answers, and records every request."""

    def __init__(self):
        self.pods: list[tuple[int, dict]] = [pod_list()]
        self.workflow: tuple[int, dict] = (200, RUNNING_WF)
        self.patch: list[tuple[int, dict]] = [(200, RUNNING_WF)]
        self.delete: tuple[int, dict] = (200, {"kind": "PodGroup"})
        self.pod_status: tuple[int, dict] = (200, {"kind": "Pod"})  # PATCH of a pod's status
        self.objects: dict[str, tuple[int, dict]] = {}  # GET (and DELETE) of other paths: a gang's object
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    def answer(self, method: str, path: str, headers, body: bytes) -> tuple[int, dict]:
        with self.lock:
            self.requests.append({"method": method, "path": path, "headers": dict(headers), "body": body})
            if headers.get("Authorization") != f"Bearer {TOKEN}":
                return status(401, "Unauthorized")
            route = urllib.parse.urlsplit(path).path
            if method == "GET" and route == PODS_PATH:
                return self.pods.pop(0) if len(self.pods) > 1 else self.pods[0]
            if method == "GET" and route == WF_PATH:
                return self.workflow
            if method == "PATCH" and route == WF_PATH:
                return self.patch.pop(0) if len(self.patch) > 1 else self.patch[0]
            if method == "DELETE" and (route == PODGROUP_PATH or route in self.objects):
                return self.delete
            if method in ("GET", "PATCH") and route in self.objects:
                return self.objects[route]
            if method == "PATCH" and route.startswith(PODS_PATH + "/") and route.endswith("/status"):
                return self.pod_status
            return status(404, f"no route for {method} {route}")

    def calls(self, method: str, route: str) -> list[dict]:
        return [r for r in self.requests if r["method"] == method and urllib.parse.urlsplit(r["path"]).path == route]


@pytest.fixture
def api():
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            code, payload = fake.answer(self.command, self.path, self.headers, body)
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_DELETE = _serve

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def watch_argv(api_url: str, tmp_path: Path, *extra: str, pods: int | None = 3, timeout: float = 10,
               poll: float = 0.1, termination_log: Path | None = None) -> list[str]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    log = termination_log if termination_log is not None else tmp_path / "termination-log"
    if termination_log is None:
        log.write_text("")  # Kubernetes creates the file; the script only writes an existing one
    count = [f"--pods={pods}"] if pods is not None else []
    return [sys.executable, str(GANGWATCH), f"--workflow={WF}", f"--namespace={NS}", *count, f"--timeout={timeout:g}",
            f"--poll={poll:g}", "--api-server", api_url, "--token-file", str(token), "--termination-log", str(log),
            *extra]


def run_watch(api_url: str, tmp_path: Path, *extra: str, env: dict | None = None, **how) -> subprocess.CompletedProcess:
    return subprocess.run(watch_argv(api_url, tmp_path, *extra, **how), capture_output=True, text=True,
                          env=watch_env(**(env or {})), timeout=60)


def watch_env(**extra: str) -> dict:
    """No in-cluster settings of the machine running the tests leak in."""
    return {**{k: v for k, v in clean_env().items() if not k.startswith(("KUBERNETES_", "ARGO_"))}, **extra}


def assert_clean(r: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr


def until_sigterm(argv: list[str], seen, settle: float = 0.0) -> tuple[int, str, str]:
    """The watch started, left to run until `seen()` (30 s at most) and `settle` seconds more,
    then stopped as Argo stops it (SIGTERM): (exit code, stdout, stderr)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=watch_env())
    try:
        deadline = time.monotonic() + 30
        while not seen() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(settle)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err
