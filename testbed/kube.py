"""The test bed's one Kubernetes client (the cluster tooling's and the process kubelet's): the
API server through the official `kubernetes` client's transport (kubeconfig, TLS, auth),
with plain dicts in and out: pods carry Argo's whole template in their env, and
building client models for thousands of them would cost more than the work itself."""

from __future__ import annotations

import base64
import json
import threading
from typing import Iterator
from urllib.parse import urlparse

import urllib3
from kubernetes import config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def api_message(err: Exception) -> str:
    """One line: the API server's own message for a refused request (its Status body), else the error's first line."""
    if isinstance(err, ApiException):
        try:
            message = json.loads(err.body or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            return f"({err.status}) {message}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


class Kube:
    def __init__(self, kubeconfig: str):
        self.client = config.new_client_from_config(config_file=kubeconfig)
        self.cfg = self.client.configuration
        self.server = urlparse(self.cfg.host)
        self._lock = threading.Lock()

    @property
    def api_host(self) -> str:
        return self.server.hostname or "127.0.0.1"

    @property
    def api_port(self) -> int:
        return self.server.port or 443

    def ca_bytes(self) -> bytes:
        """The CA that signed the API server's certificate (what a pod's ca.crt holds)."""
        if self.cfg.ssl_ca_cert:
            with open(self.cfg.ssl_ca_cert, "rb") as f:
                return f.read()
        return b""

    def _send(self, method: str, path: str, query: dict | None, body, content_type: str | None,
              timeout: float | None):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        _, url, headers, body, _ = self.client.param_serialize(
            method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"])
        return self.client.call_api(method, url, headers, body, _request_timeout=timeout)

    def request(self, method: str, path: str, *, query: dict | None = None, body=None,
                content_type: str | None = None, timeout: float | None = 30) -> dict:
        """JSON in and out; ApiException (with .status) on any non-2xx answer."""
        resp = self._send(method, path, query, body, content_type, timeout)
        data = resp.read()
        if not 200 <= resp.status <= 299:
            raise ApiException(status=resp.status, reason=resp.reason, http_resp=resp)
        return json.loads(data) if data else {}

    def ready(self) -> bool:
        """The API server's /readyz answers ok (plain text, not JSON)."""
        try:
            resp = self._send("GET", "/readyz", None, None, None, 5)
            return resp.status == 200 and resp.read().strip() == b"ok"
        except (OSError, ApiException, urllib3.exceptions.HTTPError):
            return False

    def get_or_none(self, path: str) -> dict | None:
        try:
            return self.request("GET", path)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def watch(self, path: str, query: dict, timeout: int = 300) -> Iterator[dict]:
        """Watch events (dicts with type and object) until the server closes the stream."""
        query = dict(query, watch="true", timeoutSeconds=str(timeout), allowWatchBookmarks="true")
        resp = self._send("GET", path, query, None, None, timeout + 30)
        if not 200 <= resp.status <= 299:
            resp.read()
            raise ApiException(status=resp.status, reason=resp.reason, http_resp=resp)
        try:
            for line in iter_resp_lines(resp.response):
                if line:
                    yield json.loads(line)
        finally:
            resp.response.release_conn()

    # -- the calls the kubelet makes

    def patch_pod_status(self, namespace: str, name: str, status: dict) -> dict:
        # Merge patch: lists (container statuses, conditions) are sent whole, as kubelet's status manager does.
        return self.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                            body={"status": status}, content_type=MERGE)

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's final delete once the containers are gone (grace 0, this pod's UID only)."""
        try:
            self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                         body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    def token_for(self, namespace: str, service_account: str, pod: dict, seconds: int) -> str:
        """A ServiceAccount token bound to the pod (TokenRequest API; the audience defaults
        to the API server's own), as kubelet projects into kube-api-access volumes."""
        meta = pod["metadata"]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                            "uid": meta["uid"]}}}
        answer = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                              body=body)
        return answer["status"]["token"]

    def config_map_data(self, namespace: str, name: str) -> dict | None:
        found = self.get_or_none(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        if found is None:
            return None
        data = dict(found.get("data") or {})
        data.update({k: base64.b64decode(v).decode("utf-8", "replace")
                     for k, v in (found.get("binaryData") or {}).items()})
        return data

    def secret_data(self, namespace: str, name: str) -> dict | None:
        found = self.get_or_none(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        if found is None:
            return None
        return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (found.get("data") or {}).items()}
