"""How status, logs and diagnose reach the cluster (torchdag/kubeconfig.py,
torchdag/diagnose/cluster.py): kubeconfigs as kubectl reads them, each unreadable one as one
line naming the file; a NAME as a user means it; the Workflow's nodes at every size Argo
stores them. The API here is a loopback stand-in answering the few requests the commands
make (tests/e2e/test_diagnose_e2e.py asks the real API server the same questions)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from torchdag.cli import torchdag_main

REPO = Path(__file__).resolve().parents[2]
NS = "train"
WF_PREFIX = f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/workflows"


def workflow(name: str, job: str, created: str, phase: str = "Failed", **status) -> dict:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": created,
                         "labels": {"torchdag.io/job": job}},
            "status": {"phase": phase, **status}}


def node(wf: str, rank: int, phase: str, message: str = "") -> tuple[str, dict]:
    return f"{wf}-{100 + rank}", {
        "id": f"{wf}-{100 + rank}", "type": "Pod", "templateName": "cpu-x1", "name": f"{wf}.train(0).node-{rank}",
        "displayName": f"node-{rank}", "phase": phase, "message": message, "hostNodeName": f"host-{rank}",
        "startedAt": "2026-12-04T17:20:00Z", "finishedAt": f"2026-12-04T17:3{rank}:00Z",
        "inputs": {"parameters": [{"name": "host", "value": f"host-{rank}"},
                                  {"name": "node-rank", "value": str(rank)}]}}


def packed(nodes: dict) -> str:
    """As Argo's workflow/packer stores them: JSON, gzip, base64."""
    return base64.b64encode(gzip.compress(json.dumps(nodes).encode())).decode()


class FakeApi:
    """Workflows (get, list by label selector; metadata only when asked), pods, events, logs;
    and, when `argo_nodes` is set, Argo's server's GET of a Workflow. Records each request."""

    def __init__(self):
        self.workflows: dict[str, dict] = {}
        self.pods: list[dict] = []
        self.argo_nodes: dict | None = None
        self.requests: list[tuple[str, dict]] = []

    def answer(self, path: str, query: dict, headers) -> tuple[int, dict | str]:
        self.requests.append((path, {"query": query, "authorization": headers.get("Authorization"),
                                     "accept": headers.get("Accept")}))
        if path.startswith("/api/v1/workflows/") and self.argo_nodes is not None:
            name = path.rsplit("/", 1)[-1]
            served = json.loads(json.dumps(self.workflows[name]))
            served["status"]["nodes"] = self.argo_nodes
            return 200, served
        if path == WF_PREFIX:
            selector = query.get("labelSelector", [""])[0]
            key, _, value = selector.partition("=")
            items = [w for w in self.workflows.values() if key in w["metadata"]["labels"]
                     and (not value or w["metadata"]["labels"][key] == value)]
            if "PartialObjectMetadataList" in (headers.get("Accept") or ""):
                items = [{"kind": "PartialObjectMetadata", "metadata": w["metadata"]} for w in items]
            return 200, {"kind": "WorkflowList", "items": items}
        if path.startswith(WF_PREFIX + "/"):
            name = path.rsplit("/", 1)[-1]
            if name in self.workflows:
                return 200, self.workflows[name]
            return 404, {"kind": "Status", "code": 404, "message": f'workflows.argoproj.io "{name}" not found'}
        if path == f"/api/v1/namespaces/{NS}/pods":
            selector = query.get("labelSelector", [""])[0]
            wf = selector.partition("=")[2]
            return 200, {"kind": "PodList", "items": [p for p in self.pods
                                                      if p["metadata"]["labels"].get(
                                                          "workflows.argoproj.io/workflow") == wf]}
        if path == f"/api/v1/namespaces/{NS}/events":
            return 200, {"kind": "EventList", "items": []}
        if path.endswith("/log"):
            return 200, "2026-12-04T17:30:00Z [trainer] step 3/9\n"
        return 404, {"kind": "Status", "code": 404, "message": "not found"}


@pytest.fixture
def api():
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            code, body = fake.answer(url.path, urllib.parse.parse_qs(url.query), self.headers)
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake
    server.shutdown()
    server.server_close()


def kubeconfig(path: Path, server: str, token: str = "t0k3n", context: str = "c", current: str | None = "c",
               namespace: str | None = NS, user: dict | None = None, cluster: dict | None = None) -> Path:
    ctx = {"cluster": f"{context}-cluster", "user": f"{context}-user", **({"namespace": namespace} if namespace
                                                                           else {})}
    doc = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": f"{context}-cluster", "cluster": cluster or {"server": server}}],
           "users": [{"name": f"{context}-user", "user": user or {"token": token}}],
           "contexts": [{"name": context, "context": ctx}]}
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = torchdag_main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- kubeconfigs -------------------------------------------------------------------------

def written(path: Path, content: str | bytes) -> Path:
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path


UNREADABLE = {
    "directory": (lambda p: p.mkdir() or p, "is a directory, not a file"),
    "bad YAML": (lambda p: written(p, "apiVersion: v1\nclusters: [{name: c\n"), "not valid YAML at line 3"),
    "a list": (lambda p: written(p, "- name: c\n- name: d\n"), "the file is a YAML list"),
    "binary": (lambda p: written(p, bytes(range(256)) * 4), "not UTF-8 text"),
    "CA data not base64": (lambda p: kubeconfig(p, "", cluster={"server": "https://127.0.0.1:9",
                                                                "certificate-authority-data": "not base64!"}),
                           "clusters[c-cluster].certificate-authority-data is not base64"),
    "CA data not a certificate": (lambda p: kubeconfig(p, "", cluster={
        "server": "https://127.0.0.1:9", "certificate-authority-data": base64.b64encode(b"hello\n").decode()}),
        "certificate-authority(-data) is not a PEM CA certificate"),
    "CA file missing": (lambda p: kubeconfig(p, "", cluster={"server": "https://127.0.0.1:9",
                                                             "certificate-authority": "no-such-ca.crt"}),
                        "File does not exist"),
    "a server that is no URL": (lambda p: kubeconfig(p, "htp:/127.0.0.1:9"), "server 'htp:/127.0.0.1:9' is not an "
                                                                            "http(s) URL"),
    "no current-context": (lambda p: kubeconfig(p, "https://127.0.0.1:9", current=None),
                           "no current-context; pass --context (its contexts: c)"),
    "a context it lacks": (lambda p: kubeconfig(p, "https://127.0.0.1:9", current="prod"),
                           "current-context 'prod': no such context (its contexts: c)"),
    "an auth provider the client lacks": (lambda p: kubeconfig(p, "https://127.0.0.1:9", user={
        "auth-provider": {"name": "azure", "config": {}}}), "auth-provider 'azure' is not one the client runs"),
    "an entry without a name": (lambda p: written(p, "clusters: [{cluster: {server: x}}]\n"),
                                "clusters[0]: an entry without a name"),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_kubeconfig_is_one_line_naming_the_file_and_exit_2(tmp_path, capsys, case):
    make, words = UNREADABLE[case]
    path = make(tmp_path / "config")
    code, out, err = run(capsys, "status", "job", "--kubeconfig", str(path))
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith(f"torchdag status: error: kubeconfig {path}"), err
    assert words in err and "internal bug" not in err


def test_a_missing_credential_plugin_is_one_line_not_a_stray_log_line_and_a_blamed_server(tmp_path):
    """The client only logs a plugin it cannot run (`ERROR:root:`) and sends no credentials;
    kubectl stops there: so do we. A subprocess, so that nothing of pytest's logging hides the
    client's own."""
    path = kubeconfig(tmp_path / "config", "https://127.0.0.1:9", user={"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "kubelogin-not-installed", "args": ["get-token"]}})
    done = subprocess.run([sys.executable, "-m", "torchdag", "diagnose", "job", "--kubeconfig", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (f"torchdag diagnose: error: kubeconfig {path}: user c-user's credential plugin failed: "
                           "its exec command 'kubelogin-not-installed' is not installed or not on PATH "
                           "(users[c-user].user.exec.command; kubectl fails the same way)\n")


def test_a_credential_plugin_that_works_gives_its_token(tmp_path, capsys, api):
    plugin = tmp_path / "get-token"
    plugin.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps({{'apiVersion': "
                      "'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', "
                      "'status': {'token': 'from-exec'}}))\n")
    plugin.chmod(0o755)
    path = kubeconfig(tmp_path / "config", api.url, user={"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}})
    api.workflows["job-abcde"] = workflow("job-abcde", "job", "2026-12-04T17:00:00Z")
    code, out, err = run(capsys, "status", "job-abcde", "--kubeconfig", str(path))
    assert code == 0 and out.startswith("workflow job-abcde: Failed"), err
    assert {r[1]["authorization"] for r in api.requests} == {"Bearer from-exec"}


def test_kubeconfig_lists_merge_as_kubectl_merges_them(tmp_path, capsys, api, monkeypatch):
    """KUBECONFIG=a:b: the context named in a is defined in b; a's server for the same cluster
    name is not b's (the first file wins); a missing file in the list is skipped."""
    api.workflows["job-abcde"] = workflow("job-abcde", "job", "2026-12-04T17:00:00Z")
    a = tmp_path / "a.yaml"
    a.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "in-b",
                                 "clusters": [{"name": "other", "cluster": {"server": "https://127.0.0.1:9"}}],
                                 "users": [{"name": "a-user", "user": {"token": "from-a"}}],
                                 "contexts": [{"name": "in-a", "context": {"cluster": "other", "user": "a-user"}}]}))
    b = kubeconfig(tmp_path / "b.yaml", api.url, token="from-b", context="in-b", current="in-a")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(a), str(tmp_path / "missing.yaml"), str(b)]))
    code, out, err = run(capsys, "status", "job-abcde")
    assert code == 0 and out.startswith("workflow job-abcde: Failed"), err
    assert {r[1]["authorization"] for r in api.requests} == {"Bearer from-b"}
    # --context picks the other one: a's cluster, which does not answer
    code, out, err = run(capsys, "status", "job-abcde", "--context", "in-a", "-n", NS)
    assert code == 2 and "cannot reach the API server https://127.0.0.1:9" in err, err
    code, out, err = run(capsys, "status", "job-abcde", "--context", "nope")
    assert code == 2 and "--context nope: no such context (its contexts: in-a, in-b)" in err, err


def test_in_a_pod_without_a_kubeconfig_the_service_account_is_used(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "9")
    code, out, err = run(capsys, "status", "job")
    # not in a pod after all: the ServiceAccount's files are missing, said in one line
    assert code == 2 and err.startswith("torchdag status: error: in-cluster config (the pod's ServiceAccount): ")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    code, out, err = run(capsys, "status", "job")
    assert code == 2 and "no cluster to talk to: no ~/.kube/config, and this is not a pod" in err, err


# -- names ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, words", [
    ("", "argument NAME: is empty"),
    ("Bladetrain", "argument NAME: 'Bladetrain' is not a Workflow's or a job's name"),
    ("a b", "is not a Workflow's or a job's name"),
    ("x" * 254, "at most 253 characters"),
])
def test_an_empty_or_invalid_name_is_refused_before_any_request(tmp_path, capsys, api, name, words):
    path = kubeconfig(tmp_path / "config", api.url)
    with pytest.raises(SystemExit) as exit_:
        torchdag_main(["diagnose", name, "--kubeconfig", str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and words in err, err
    assert api.requests == []


def test_a_name_is_a_workflow_a_job_or_latest(tmp_path, capsys, api):
    path = str(kubeconfig(tmp_path / "config", api.url))
    api.workflows = {w["metadata"]["name"]: w for w in (
        workflow("bladetrain-x7k2p", "bladetrain", "2026-12-04T17:00:00Z"),
        workflow("bladetrain-a1b2c", "bladetrain", "2026-12-04T16:00:00Z"),
        workflow("other-q9w8e", "other", "2026-12-04T16:30:00Z", phase="Succeeded"))}
    code, out, err = run(capsys, "status", "bladetrain-a1b2c", "--kubeconfig", path)
    assert code == 0 and out.startswith("workflow bladetrain-a1b2c: Failed") and err == "", err
    code, out, err = run(capsys, "diagnose", "bladetrain", "--kubeconfig", path, "--json")
    assert json.loads(out)["workflow"] == "bladetrain-x7k2p"
    assert err == ("torchdag diagnose: job bladetrain: its newest Workflow is bladetrain-x7k2p (of 2: kubectl get "
                   f"workflows -n {NS} -l torchdag.io/job=bladetrain)\n")
    listed = [r for r in api.requests if r[0] == WF_PREFIX]
    assert listed and all("PartialObjectMetadataList" in r[1]["accept"] for r in listed)  # metadata only
    code, out, err = run(capsys, "status", "@latest", "--kubeconfig", path)
    assert code == 0 and out.startswith("workflow bladetrain-x7k2p: Failed")
    assert err == (f"torchdag status: @latest is bladetrain-x7k2p, the newest of 3 torchdag Workflow(s) in "
                   f"namespace '{NS}'\n")
    code, out, err = run(capsys, "logs", "nosuchjob", "--kubeconfig", path)
    assert (code, out) == (2, "") and err == (f"torchdag logs: error: no Workflow and no job 'nosuchjob' in namespace "
                                              f"'{NS}' (kubectl get workflows -n {NS} -L torchdag.io/job)\n")


# -- the nodes at every size ------------------------------------------------------------

def test_compressed_nodes_are_read_by_status_and_diagnose(tmp_path, capsys, api):
    """Past 1 MiB Argo keeps the nodes gzipped in status.compressedNodes; the pods are gone
    (podGC): every rank still shows, and the failed one is named."""
    path = str(kubeconfig(tmp_path / "config", api.url))
    nodes = dict([node("big-abcde", 0, "Failed", "main: Error (exit code 1)"),
                  node("big-abcde", 1, "Failed", "main: Error (exit code 137)")])
    nodes["big-abcde-100"]["finishedAt"] = "2026-12-04T17:35:00Z"  # rank 0 stopped after rank 1
    api.workflows["big-abcde"] = workflow("big-abcde", "big", "2026-12-04T17:00:00Z", compressedNodes=packed(nodes))
    code, out, err = run(capsys, "status", "big-abcde", "--kubeconfig", path)
    rows = out.splitlines()
    assert code == 0 and err == "" and [r.split()[:2] for r in rows[2:]] == [["0", "host-0"], ["1", "host-1"]], out
    code, out, err = run(capsys, "diagnose", "big", "--kubeconfig", path, "--json")
    first = json.loads(out)["first"]
    assert (code, first["rank"], first["host"], first["exitCode"]) == (1, 1, "host-1", 137), out


def test_offloaded_nodes_are_read_through_argos_server_or_said_to_be_missing(tmp_path, capsys, api, monkeypatch):
    path = str(kubeconfig(tmp_path / "config", api.url))
    monkeypatch.delenv("ARGO_SERVER", raising=False)
    monkeypatch.delenv("ARGO_TOKEN", raising=False)
    api.workflows["huge-abcde"] = workflow("huge-abcde", "huge", "2026-12-04T17:00:00Z",
                                           offloadNodeStatusVersion="fnv:123")
    api.pods = [{"metadata": {"name": "huge-abcde-cpu-x1-1", "creationTimestamp": "2026-12-04T17:00:00Z",
                              "labels": {"workflows.argoproj.io/workflow": "huge-abcde", "torchdag.io/node-rank": "0"},
                              "annotations": {"workflows.argoproj.io/node-name": "huge-abcde.train(0).node-0"}},
                 "spec": {"nodeName": "host-0"}, "status": {"phase": "Running"}}]
    code, out, err = run(capsys, "status", "huge-abcde", "--kubeconfig", path)
    assert code == 0 and [r.split()[0] for r in out.splitlines()[2:]] == ["0"], out
    assert err.count("\n") == 1 and "its node status is offloaded to Argo's database" in err
    assert "pass --argo-server HOST:PORT (or set ARGO_SERVER)" in err
    # no pod left either (podGC): said too, rather than an empty table alone
    pods, api.pods = api.pods, []
    code, out, err = run(capsys, "status", "huge-abcde", "--kubeconfig", path)
    assert code == 0 and err.splitlines()[1] == ("torchdag status: workflow huge-abcde: none of its pods is left to "
                                                 "show (podGC deletes them: workflow.podGC)"), err
    api.pods = pods
    # through Argo's server (here the same loopback stand-in, on /api/v1/workflows/NS/NAME), with the kubeconfig's token
    api.argo_nodes = dict([node("huge-abcde", 0, "Running"), node("huge-abcde", 1, "Pending")])
    code, out, err = run(capsys, "status", "huge-abcde", "--kubeconfig", path, "--argo-server", api.url)
    assert code == 0 and err == "" and [r.split()[0] for r in out.splitlines()[2:]] == ["0", "1"], out
    served = [r for r in api.requests if r[0].startswith("/api/v1/workflows/")]
    assert served[-1] == (f"/api/v1/workflows/{NS}/huge-abcde", {"query": {}, "authorization": "Bearer t0k3n",
                                                                  "accept": "application/json"})
    # a server that does not answer: said, and the pods still shown
    code, out, err = run(capsys, "diagnose", "huge-abcde", "--kubeconfig", path, "--argo-server", "http://127.0.0.1:9")
    assert "Argo's server did not give it (cannot reach Argo's server http://127.0.0.1:9/: Connection refused)" in out
