"""The process kubelet's log serving (testbed/kubelet/logs.py): each line's time kept as it
arrives through the pipe, and the kubelet API's containerLogs over TLS with the caller's
client certificate checked against the cluster's CA (the API server's, on the local cluster:
tests/e2e/test_diagnose_e2e.py asks through `kubectl logs`)."""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from testbed.kubelet.logs import LogPump, LogServer, read_lines, times_path


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A CA and a client certificate it signed (as clustercerts makes apiserver-kubelet-client)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
            str(tmp_path / "ca.key"), "-out", str(tmp_path / "ca.crt"), "-days", "1", "-subj", "/CN=test-ca")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
            str(tmp_path / "client.key"), "-out", str(tmp_path / "client.csr"), "-subj", "/CN=kube-apiserver")
    openssl("x509", "-req", "-in", str(tmp_path / "client.csr"), "-CA", str(tmp_path / "ca.crt"), "-CAkey",
            str(tmp_path / "ca.key"), "-CAcreateserial", "-out", str(tmp_path / "client.crt"), "-days", "1")
    return tmp_path


def pump(tmp_path: Path, chunks: list[bytes]) -> Path:
    log = tmp_path / "logs" / "ns" / "p" / "main.log"
    log.parent.mkdir(parents=True)
    read_end, write_end = os.pipe()
    thread = LogPump(read_end, log)
    thread.start()
    for chunk in chunks:
        os.write(write_end, chunk)
        time.sleep(0.05)
    os.close(write_end)
    thread.join(5)
    return log


def test_each_line_keeps_its_time_and_the_log_its_bytes(tmp_path):
    log = pump(tmp_path, [b"one\ntw", b"o\n", b"three"])
    assert log.read_bytes() == b"one\ntwo\nthree"
    lines = read_lines(log)
    assert [line for _, line in lines] == [b"one\n", b"two\n", b"three"]
    times = [t for t, _ in lines]
    assert len(times_path(log).read_text().split()) == 3 and times == sorted(times) and times[0] < times[2]


def test_container_logs_over_tls_with_the_callers_certificate(tmp_path, pki):
    log = pump(tmp_path, [b"first\n", b"second\n", b"third\n"])
    server = LogServer(lambda ns, pod, c: tmp_path / "logs" / ns / pod / f"{c}.log", lambda ns, pod: False,
                       str(pki / "ca.crt"), tmp_path / "kubelet-pki")
    server.start()
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "kubelet-pki" / "kubelet.crt"))
        context.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
        base = f"https://localhost:{server.port}/containerLogs/ns/p/main"

        def get(query: str) -> str:
            with urllib.request.urlopen(base + query, context=context, timeout=10) as answer:
                return answer.read().decode()
        assert get("") == "first\nsecond\nthird\n"
        assert get("?tailLines=1") == "third\n"
        stamped = get("?timestamps=true&tailLines=2").splitlines()
        assert [line.split(" ", 1)[1] for line in stamped] == ["second", "third"]
        assert stamped[0].split(" ", 1)[0] == times_path(log).read_text().split()[1]
        assert get("?follow=true") == "first\nsecond\nthird\n"  # the pod has ended: the stream ends too
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base.replace("/p/", "/other/"), context=context, timeout=10)
        assert missing.value.code == 404
        anonymous = ssl.create_default_context(cafile=str(tmp_path / "kubelet-pki" / "kubelet.crt"))
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionResetError)):
            urllib.request.urlopen(base, context=anonymous, timeout=10).read()
    finally:
        server.stop()
