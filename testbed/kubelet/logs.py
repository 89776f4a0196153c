"""Container logs as a kubelet serves them, so `kubectl logs`, `argo logs` and `torchdag
logs` work here as on a real cluster.

- `LogPump`: a container's stdout and stderr come through a pipe; each line goes to
  `<container>.log` unchanged (what the kubelet's other code and the tests read) and the
  time it arrived to `<container>.log.times` (one RFC 3339 time per line), which the API's
  `timestamps=true` needs (a real kubelet keeps both in its CRI log file).
- `LogServer`: the kubelet API's `GET /containerLogs/{namespace}/{pod}/{container}` (the
  path the API server proxies `pods/log` to, with `follow`, `tailLines`, `timestamps`,
  `sinceSeconds`, `sinceTime`, `limitBytes`), over HTTPS on loopback. Its serving
  certificate is self-signed at start, as a kubelet without one makes its own; the caller
  must show a client certificate signed by the cluster's CA: the API server's
  `--kubelet-client-certificate`, which `make cluster-up` hands it. The API server reaches
  it through the Node's `InternalDNS` address `localhost` and `daemonEndpoints` port
  (kube-apiserver `--kubelet-preferred-address-types` puts InternalDNS first).
"""

from __future__ import annotations

import datetime as dt
import os
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, unquote, urlparse

FOLLOW_POLL_S = 0.2


def stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def times_path(log: Path) -> Path:
    return log.with_name(log.name + ".times")


class LogPump(threading.Thread):
    """Copies a pipe to the log file, and the arrival time of each line to its .times file."""

    def __init__(self, fd: int, log: Path):
        super().__init__(name=f"log {log}", daemon=True)
        self.fd, self.log = fd, log

    def run(self) -> None:
        pending = False  # a line begun and not ended: its time is written with its newline
        with open(self.log, "ab") as out, open(times_path(self.log), "a") as times:
            while True:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                out.write(chunk)
                out.flush()
                when = stamp()
                times.write(f"{when}\n" * chunk.count(b"\n"))
                pending = not chunk.endswith(b"\n")
                times.flush()
            if pending:
                times.write(f"{stamp()}\n")
        os.close(self.fd)


def read_lines(log: Path) -> list[tuple[str, bytes]]:
    """(time, line with its newline) for every line of a log; a line without a recorded time
    takes the one before it (or the file's change time)."""
    try:
        data = log.read_bytes()
    except OSError:
        return []
    try:
        times = times_path(log).read_text().split()
    except OSError:
        times = []
    fallback = dt.datetime.fromtimestamp(log.stat().st_mtime, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lines = data.splitlines(keepends=True)
    out, last = [], None
    for index, line in enumerate(lines):
        last = times[index] if index < len(times) else (last or fallback)
        out.append((last, line))
    return out


def select(lines: list[tuple[str, bytes]], query: dict[str, str], now: dt.datetime) -> list[tuple[str, bytes]]:
    """sinceSeconds/sinceTime, then tailLines, as the kubelet applies them."""
    since = None
    if query.get("sinceSeconds"):
        since = now - dt.timedelta(seconds=int(query["sinceSeconds"]))
    elif query.get("sinceTime"):
        since = dt.datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00"))
    if since is not None:
        lines = [(t, line) for t, line in lines if _time(t) >= since]
    if query.get("tailLines"):
        tail = int(query["tailLines"])
        lines = lines[-tail:] if tail > 0 else []
    return lines


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def render(lines: list[tuple[str, bytes]], timestamps: bool) -> bytes:
    return b"".join((f"{t} ".encode() if timestamps else b"") + line for t, line in lines)


def self_signed(folder: Path) -> tuple[Path, Path]:
    """kubelet.crt/kubelet.key for localhost and 127.0.0.1 (made once, with openssl)."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "kubelet.crt", folder / "kubelet.key"
    if not (cert.exists() and key.exists()):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "3650", "-subj",
                        "/CN=torchdag-process-kubelet", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       check=True, capture_output=True)
    return cert, key


class LogServer:
    """The kubelet API's containerLogs on 127.0.0.1:port (0: any free port)."""

    def __init__(self, log_path: Callable[[str, str, str], Path], running: Callable[[str, str], bool],
                 ca_file: str, folder: Path, port: int = 0):
        cert, key = self_signed(folder)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=ca_file)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # the kubelet's log stays about pods
                pass

            def do_GET(self) -> None:
                server.answer(self)

        self.log_path, self.running = log_path, running
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="kubelet API", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        url = urlparse(request.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._send(request, 404, b"not found: this kubelet serves /containerLogs/{namespace}/{pod}/{container}\n")
            return
        _, namespace, pod, container = parts
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        log = self.log_path(namespace, pod, container)
        if not log.exists():
            self._send(request, 404, f"container {container!r} of pod {namespace}/{pod} has no log here "
                                     "(not started, or not this kubelet's)\n".encode())
            return
        timestamps = query.get("timestamps") == "true"
        every = read_lines(log)
        try:
            lines = select(every, query, dt.datetime.now(dt.timezone.utc))
        except ValueError as err:
            self._send(request, 400, f"bad query: {err}\n".encode())
            return
        body = render(lines, timestamps)
        limit = int(query["limitBytes"]) if query.get("limitBytes", "").isdigit() else None
        if query.get("follow") != "true":
            self._send(request, 200, body[:limit] if limit is not None else body)
            return
        request.send_response(200)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Transfer-Encoding", "chunked")
        request.end_headers()
        sent = len(every)
        try:
            self._chunk(request, body)
            while True:
                alive = self.running(namespace, pod)
                now = read_lines(log)
                if len(now) > sent:
                    self._chunk(request, render(now[sent:], timestamps))
                    sent = len(now)
                elif not alive:
                    break
                time.sleep(FOLLOW_POLL_S)
            request.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass

    @staticmethod
    def _chunk(request: BaseHTTPRequestHandler, data: bytes) -> None:
        if data:
            request.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            request.wfile.flush()

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        request.send_response(status)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
