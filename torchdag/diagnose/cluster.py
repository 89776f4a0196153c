"""What `torchdag status/logs/diagnose` read from the cluster, through the official
`kubernetes` client (an optional dependency: `pip install '.[cluster]'` in a checkout of
torchdag), found as kubectl finds it (torchdag/kubeconfig.py). Everything comes back as the
API's plain JSON (dicts).

A NAME is what a user calls the job: a Workflow's name; a job's name (the `torchdag.io/job`
label every rendered Workflow carries), which means its newest Workflow; or `@latest`, the
newest torchdag Workflow of the namespace. The Workflow's nodes are read at every size:
from `status.nodes`; from `status.compressedNodes` (gzip and base64, what Argo stores past
its 1 MiB); when Argo offloaded them to its database (`status.offloadNodeStatusVersion`),
through Argo's server if one is given (`--argo-server`, else $ARGO_SERVER), else not at all:
a note says so, and the pods (by label) tell the rest."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

from ..cli import LATEST
from ..errors import TorchdagError
from ..kubeconfig import ClusterUnusable, connect, kubernetes_client
from .views import _EPOCH, WORKFLOW_LABEL, parse_time

__all__ = ["ClusterUnusable", "Cluster", "LATEST", "JOB_LABEL"]

CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 5, 30
LOG_FETCHERS = 16
JOB_LABEL = "torchdag.io/job"  # catalog.yaml labels.job: every rendered Workflow and pod carries it
WORKFLOWS = ("argoproj.io", "v1alpha1", "workflows")
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


def _explain(err: Exception, what: str, namespace: str, server: str, who: str = "the API server") -> ClusterUnusable:
    """An API or connection error as one line: urllib3's own text repeats the URL and the
    connection object, so an unreachable server is named with the operating system's reason."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(err, ApiException):
        try:
            message = json.loads(err.body or "{}").get("message") or err.reason
        except ValueError:
            message = err.reason
        if err.status == 403:
            return ClusterUnusable(f"forbidden: cannot read {what} in namespace {namespace!r} ({message})")
        if err.status == 401:
            return ClusterUnusable(f"the API server rejected the credentials ({message})")
        return ClusterUnusable(f"{what}: API error {err.status}: {message}")
    reason = str(getattr(err, "reason", None) or err)
    errno = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", reason)
    text = errno.group(1).strip() if errno else (reason.splitlines()[0][:200] if reason else type(err).__name__)
    return ClusterUnusable(f"cannot reach {who} {server}: {text}")


def decode_nodes(compressed: str) -> dict:
    """`status.compressedNodes`: the nodes' JSON, gzipped, base64 (Argo's workflow/packer)."""
    return json.loads(gzip.decompress(base64.b64decode(compressed)))


def argo_server_url(server: str) -> str:
    """ARGO_SERVER as the argo CLI takes it: host:port, https unless ARGO_SECURE=false, under
    ARGO_BASE_HREF; a full http(s) URL as it is."""
    url = server if re.match(r"https?://", server) else \
        ("http://" if os.environ.get("ARGO_SECURE", "true").lower() == "false" else "https://") + server
    return url.rstrip("/") + "/" + os.environ.get("ARGO_BASE_HREF", "").strip("/")


class Cluster:
    def __init__(self, kubeconfig: str | None, namespace: str | None, context: str | None = None,
                 argo_server: str | None = None):
        kubernetes_client()
        from kubernetes import client

        connection = connect(kubeconfig, context)
        self.connection = connection
        self.api = client.ApiClient(connection.settings)
        self.namespace = namespace or connection.namespace or "default"
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.timeout = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)
        self.argo_server = argo_server if argo_server is not None else os.environ.get("ARGO_SERVER") or None
        self.notes: list[str] = []  # how the NAME was resolved: said on stderr
        self.status_notes: list[str] = []  # how the nodes were read, when not from the Workflow object

    def _json(self, call, what: str, *args, **kwargs):
        try:
            resp = call(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
            return json.loads(resp.data)
        except TorchdagError:
            raise
        except Exception as err:  # noqa: BLE001 -- every API/connection failure becomes one line
            from kubernetes.client.exceptions import ApiException

            if isinstance(err, ApiException) and err.status == 404:
                return None
            raise _explain(err, what, self.namespace, self.api.configuration.host) from None

    def workflow(self, name: str) -> dict | None:
        """The Workflow of this name as the API stores it, or None (with_nodes reads its nodes)."""
        return self._json(self.custom.get_namespaced_custom_object, "workflows.argoproj.io", WORKFLOWS[0],
                          WORKFLOWS[1], self.namespace, WORKFLOWS[2], name)

    def _newest(self, selector: str) -> tuple[str | None, int]:
        """The newest Workflow's name among those the label selector picks, and how many it picks
        (their metadata only: a Workflow may be a MiB)."""
        found = self._json(self.custom.list_namespaced_custom_object, "workflows.argoproj.io", WORKFLOWS[0],
                           WORKFLOWS[1], self.namespace, WORKFLOWS[2], label_selector=selector,
                           _headers={"Accept": METADATA_ONLY})
        items = [i.get("metadata") or {} for i in (found or {}).get("items") or []]
        if not items:
            return None, 0
        newest = max(items, key=lambda m: (parse_time(m.get("creationTimestamp")) or _EPOCH, m.get("name", "")))
        return newest.get("name"), len(items)

    def resolve(self, name: str) -> dict:
        """The Workflow a NAME means (docstring above), with its nodes; how it was found is
        added to self.notes."""
        where = f"namespace {self.namespace!r}"
        if name == LATEST:
            newest, count = self._newest(JOB_LABEL)
            if newest is None:
                raise ClusterUnusable(f"{LATEST}: no torchdag Workflow in {where} (none carries the {JOB_LABEL} "
                                      f"label; kubectl get workflows -n {self.namespace})")
            self.notes.append(f"{LATEST} is {newest}, the newest of {count} torchdag Workflow(s) in {where}")
            name = newest
        found = self.workflow(name)
        if found is None:
            newest, count = self._newest(f"{JOB_LABEL}={name}") if len(name) <= 63 else (None, 0)  # a label value
            if newest is None:
                raise ClusterUnusable(f"no Workflow and no job {name!r} in {where} "
                                      f"(kubectl get workflows -n {self.namespace} -L {JOB_LABEL})")
            self.notes.append(f"job {name}: its newest Workflow is {newest}" + (
                f" (of {count}: kubectl get workflows -n {self.namespace} -l {JOB_LABEL}={name})" if count > 1
                else ""))
            found = self.workflow(newest)
            if found is None:
                raise ClusterUnusable(f"job {name}: its Workflow {newest} was deleted just now; run again")
        return self.with_nodes(found)

    def with_nodes(self, workflow: dict) -> dict:
        """The Workflow with `status.nodes` filled in when Argo stored them elsewhere."""
        status = workflow.get("status") or {}
        name = (workflow.get("metadata") or {}).get("name", "")
        self.status_notes = []
        if status.get("nodes"):
            return workflow
        if status.get("compressedNodes"):
            try:
                status["nodes"] = decode_nodes(status["compressedNodes"])
            except (ValueError, OSError, EOFError) as err:  # binascii.Error, gzip.BadGzipFile, JSON: ValueError
                self.status_notes.append(f"workflow {name}: status.compressedNodes cannot be read ({err}); shown "
                                         f"from its pods only (label {WORKFLOW_LABEL}={name})")
            return workflow
        version = status.get("offloadNodeStatusVersion")
        if not version:
            return workflow
        if not self.argo_server:
            self.status_notes.append(
                f"workflow {name}: its node status is offloaded to Argo's database (status.offloadNodeStatusVersion "
                f"{version}); shown from its pods only (label {WORKFLOW_LABEL}={name}): a pod already deleted is "
                "missing; pass --argo-server HOST:PORT (or set ARGO_SERVER) to read the nodes through Argo's server")
            return workflow
        try:
            served = self._argo_get(f"/api/v1/workflows/{self.namespace}/{name}")
        except ClusterUnusable as err:
            self.status_notes.append(f"workflow {name}: its node status is offloaded to Argo's database and Argo's "
                                     f"server did not give it ({err}); shown from its pods only")
            return workflow
        nodes = (served.get("status") or {}).get("nodes")
        if nodes:
            status["nodes"] = nodes
        else:
            self.status_notes.append(f"workflow {name}: Argo's server {self.argo_server} gave no nodes for it "
                                     "(offloaded status gone from its database?); shown from its pods only")
        return workflow

    def _argo_get(self, path: str) -> dict:
        """GET from Argo's server (its REST API, as the argo CLI uses it): with ARGO_TOKEN, else
        the kubeconfig's bearer token; ARGO_INSECURE_SKIP_VERIFY=true skips the TLS check."""
        from kubernetes import client

        base = argo_server_url(self.argo_server)
        settings = client.Configuration(host=base)
        settings.retries = 0
        settings.verify_ssl = os.environ.get("ARGO_INSECURE_SKIP_VERIFY", "").lower() != "true"
        token = os.environ.get("ARGO_TOKEN") or self.connection.bearer_token()
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = token if " " in token else f"Bearer {token}"
        try:
            response = client.ApiClient(settings).call_api("GET", base.rstrip("/") + path, header_params=headers,
                                                           _request_timeout=self.timeout)
            body = response.read()
        except Exception as err:  # noqa: BLE001 -- a connection failure as one line
            raise _explain(err, "Argo's server", self.namespace, base, who="Argo's server") from None
        if response.status != 200:
            try:
                message = json.loads(body).get("message") or response.reason
            except ValueError:
                message = response.reason
            raise ClusterUnusable(f"Argo's server {base}: HTTP {response.status}: {message}")
        try:
            return json.loads(body)
        except ValueError:
            raise ClusterUnusable(f"Argo's server {base} answered with no JSON (is it Argo's server?)") from None

    def pods(self, name: str) -> list[dict]:
        found = self._json(self.core.list_namespaced_pod, "pods", self.namespace,
                           label_selector=f"{WORKFLOW_LABEL}={name}")
        return (found or {}).get("items") or []

    def events(self) -> list[dict]:
        found = self._json(self.core.list_namespaced_event, "events", self.namespace,
                           field_selector="involvedObject.kind=Pod")
        return (found or {}).get("items") or []

    def log(self, pod: str, tail: int | None = None, since_seconds: int | None = None) -> str:
        """The main container's log, each line prefixed with its time (timestamps=true); "" when there is none."""
        kwargs = {"container": "main", "timestamps": True}
        if tail is not None:
            kwargs["tail_lines"] = tail
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        try:
            resp = self.core.read_namespaced_pod_log(pod, self.namespace, _preload_content=False,
                                                     _request_timeout=self.timeout, **kwargs)
            return resp.data.decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 -- a pod not started yet or gone has no log: shown as none
            return ""

    def follow(self, pod: str, since_seconds: int | None = None):
        """The main container's log lines as they come (follow=true), each with its time."""
        kwargs = {"container": "main", "timestamps": True, "follow": True}
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        resp = self.core.read_namespaced_pod_log(pod, self.namespace, _preload_content=False, **kwargs)
        buffer = b""
        for chunk in resp.stream(4096):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                yield line.decode("utf-8", "replace")
        if buffer:
            yield buffer.decode("utf-8", "replace")

    def fetch(self, name: str) -> dict:
        """The Workflow of this exact name again (status --watch), with its nodes."""
        found = self.workflow(name)
        if found is None:
            raise ClusterUnusable(f"no Workflow {name!r} in namespace {self.namespace!r} any more (deleted)")
        return self.with_nodes(found)

    def snapshot(self, workflow: dict, tail: int | None = 2000, with_events: bool = True):
        """(workflow, pods, events, logs by pod name) for one Workflow (resolve's or fetch's);
        logs fetched in parallel."""
        name = (workflow.get("metadata") or {}).get("name", "")
        pods = self.pods(name)
        if self.status_notes and not pods:  # nodes unread, and nothing to tell from instead
            self.status_notes = self.status_notes + [
                f"workflow {name}: none of its pods is left to show (podGC deletes them: workflow.podGC)"]
        events = self.events() if with_events else []
        names = [p["metadata"]["name"] for p in pods
                 if ((p.get("status") or {}).get("phase") or "Pending") != "Pending"
                 or any((c.get("state") or {}).get("running") or (c.get("state") or {}).get("terminated")
                        for c in (p.get("status") or {}).get("containerStatuses") or [])]
        with ThreadPoolExecutor(max_workers=LOG_FETCHERS) as pool:
            logs = dict(zip(names, pool.map(lambda pod: self.log(pod, tail), names)))
        return workflow, pods, events, logs

