"""A small in-cluster Kubernetes API client for torchdag/agents/gangwatch.py: standard library
only (urllib, ssl, json), so it runs in the training image without a Kubernetes client.
Errors are one line: ApiError for a call that failed, Exit for a reason to stop."""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request


class AgentError(Exception):
    """The root of the helpers' own errors (they run without the trainer: torchdag/agents/)."""


PREFIX = "[gang-watch]"
REQUEST_TIMEOUT = 10.0
TERMINATION_LOG_LIMIT = 4000  # Kubernetes keeps at most 4096 bytes of a termination message


class Exit(AgentError):
    """Stop with this status; message (if any) is printed, and written as the
    termination message when the status is not 0."""

    def __init__(self, code: int, message: str = "", stream=None, terminate_note: bool = True):
        super().__init__(message)
        self.code = code
        self.message = message
        self.stream = stream
        self.terminate_note = terminate_note


class ApiError(AgentError):
    """An API call that did not succeed.  status is None when there was no HTTP answer."""

    def __init__(self, method: str, path: str, status: int | None, detail: str):
        super().__init__(detail)
        self.method, self.path, self.status, self.detail = method, path, status, detail

    @property
    def transient(self) -> bool:
        return self.status is None or self.status in (408, 429) or self.status >= 500

    def __str__(self) -> str:
        what = f"HTTP {self.status}" if self.status is not None else "no answer"
        return f"{self.method} {self.path}: {what}: {self.detail}"


def say(*parts: str, stream=None) -> None:
    print(PREFIX, *parts, file=stream or sys.stdout, flush=True)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


# ----------------------------------------------------------------- API client

class Api:
    def __init__(self, server: str, token_file: str, ca_file: str):
        self.server = server.rstrip("/")
        self.token_file = token_file
        self.context = None
        if self.server.startswith("https://"):
            try:
                self.context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise Exit(2, f"error: cannot load the API server's CA from {ca_file}: {exc}", sys.stderr) from exc

    def _token(self) -> str:
        # Read on every call: projected ServiceAccount tokens are rotated in place.
        try:
            with open(self.token_file) as f:
                return f.read().strip()
        except OSError as exc:
            raise Exit(2, f"error: cannot read the ServiceAccount token {self.token_file}: {exc.strerror or exc} "
                          "(is automountServiceAccountToken off for this pod?)", sys.stderr) from exc

    def call(self, method: str, path: str, body: dict | None = None,
             content_type: str = "application/json") -> dict | None:
        """The decoded JSON answer; None on 404.  Raises ApiError otherwise."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        request.add_header("Authorization", "Bearer " + self._token())
        if data is not None:
            request.add_header("Content-Type", content_type)
        shown = urllib.parse.unquote(path.split("?", 1)[0])
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT, context=self.context) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise ApiError(method, shown, exc.code, _status_message(exc)) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            # Connection refused or reset, DNS, TLS, timeouts, a truncated answer.
            reason = getattr(exc, "reason", None) or exc
            raise ApiError(method, shown, None, one_line(str(reason)) or type(exc).__name__) from exc
        except Exception as exc:
            raise ApiError(method, shown, None, f"{type(exc).__name__}: {one_line(str(exc))}") from exc
        try:
            return json.loads(raw.decode() or "{}")
        except ValueError:
            raise ApiError(method, shown, 200, "the answer is not JSON") from None


def _status_message(exc: urllib.error.HTTPError) -> str:
    """The message of a Kubernetes Status answer, else the start of the body."""
    try:
        raw = exc.read().decode(errors="replace")
    except Exception:  # noqa: BLE001 - an error body that cannot be read is an empty one
        raw = ""
    try:
        message = json.loads(raw).get("message")
    except (ValueError, AttributeError):
        message = None
    return one_line(message or raw[:300] or exc.reason or "")


def write_termination_log(path: str, message: str) -> None:
    """Kubernetes shows the file as the container's termination message, Argo as the
    node's message.  Only written where it exists (Kubernetes creates it)."""
    if not path or not os.path.exists(path) or not os.access(path, os.W_OK):
        return
    data = message.encode()
    if len(data) > TERMINATION_LOG_LIMIT:
        tail = " ... (cut: the gang-watch log has every rank)"
        data = data[:TERMINATION_LOG_LIMIT - len(tail)].decode(errors="ignore").encode() + tail.encode()
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError:
        pass


def default_api_server() -> str | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host:
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    return f"https://{host}:{port or 443}"
