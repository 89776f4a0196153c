"""What `torchdag status/logs/diagnose` read from the cluster, through the official
`kubernetes` client (an optional dependency: `pip install 'torchdag[cluster]'`), found as
kubectl finds it: --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else the pod's
in-cluster ServiceAccount. Everything comes back as the API's plain JSON (dicts)."""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import TorchdagError
from .views import WORKFLOW_LABEL

CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 5, 30
LOG_FETCHERS = 16


class ClusterUnusable(TorchdagError):
    """One line for the user (no traceback); exit status 2."""

    exit_code = 2
    prog = "torchdag"

    def lines(self) -> list[str]:
        return [f"{self.prog}: error: {self}"]


def _client_module():
    try:
        import kubernetes  # imported here: `torchdag render` must not need it
    except ImportError:
        raise ClusterUnusable("this command needs the Kubernetes Python client: pip install 'torchdag[cluster]' "
                              "(or pip install kubernetes)") from None
    return kubernetes


def _explain(err: Exception, what: str, namespace: str, server: str) -> ClusterUnusable:
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
    return ClusterUnusable(f"cannot reach the API server {server}: {text}")


class Cluster:
    def __init__(self, kubeconfig: str | None, namespace: str | None, context: str | None = None):
        kubernetes = _client_module()
        from kubernetes import client, config

        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        default = Path.home() / ".kube" / "config"
        try:
            if path or default.exists():
                chosen = path or str(default)
                if not Path(chosen).exists():
                    raise ClusterUnusable(f"kubeconfig {chosen}: no such file")
                settings = client.Configuration()
                config.load_kube_config(config_file=chosen, context=context, client_configuration=settings)
                settings.retries = 0  # an unreachable API server: one line, now (set before the pool is made)
                self.api = client.ApiClient(settings)
                _, active = config.list_kube_config_contexts(config_file=chosen)
                current = ((active or {}).get("context") or {}).get("namespace")
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                settings = client.Configuration()
                config.load_incluster_config(client_configuration=settings)
                settings.retries = 0
                self.api = client.ApiClient(settings)
                ns_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                current = ns_file.read_text().strip() if ns_file.exists() else None
            else:
                raise ClusterUnusable("no cluster to talk to: pass --kubeconfig FILE, set KUBECONFIG, or run in a pod")
        except kubernetes.config.ConfigException as err:
            raise ClusterUnusable(f"kubeconfig: {err}") from None
        self.namespace = namespace or current or "default"
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.timeout = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)

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

    def workflow(self, name: str) -> dict:
        found = self._json(self.custom.get_namespaced_custom_object, "workflows.argoproj.io", "argoproj.io",
                           "v1alpha1", self.namespace, "workflows", name)
        if found is None:
            raise ClusterUnusable(f"no Workflow {name!r} in namespace {self.namespace!r} "
                                  f"(kubectl get workflows -n {self.namespace})")
        return found

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

    def snapshot(self, name: str, tail: int | None = 2000, with_events: bool = True):
        """(workflow, pods, events, logs by pod name) for one Workflow; logs fetched in parallel."""
        workflow = self.workflow(name)
        pods = self.pods(name)
        events = self.events() if with_events else []
        names = [p["metadata"]["name"] for p in pods
                 if ((p.get("status") or {}).get("phase") or "Pending") != "Pending"
                 or any((c.get("state") or {}).get("running") or (c.get("state") or {}).get("terminated")
                        for c in (p.get("status") or {}).get("containerStatuses") or [])]
        with ThreadPoolExecutor(max_workers=LOG_FETCHERS) as pool:
            logs = dict(zip(names, pool.map(lambda pod: self.log(pod, tail), names)))
        return workflow, pods, events, logs

