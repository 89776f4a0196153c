"""Shared by the local runner's tests: a job's Plan, running the runner as a process and
reading its stream, finding leftover processes."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from helpers import REPO, free_port  # noqa: F401 - shared with the modules that import this one
from torchdag import pipeline
from torchdag.plan import Plan, make_plan

LOCAL = REPO / "examples" / "local.yaml"
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def plan_of(values_path) -> Plan:
    """The Plan of a values file, as render.py and the local runner compute it."""
    return make_plan(pipeline.validate(pipeline.load(values_path)))


def values_with(tmp_path: Path, name: str = "values.yaml", base: Path = LOCAL, **changes) -> Path:
    """A values file (examples/local.yaml unless base) with top-level keys replaced."""
    values = yaml.safe_load(base.read_text())
    values.update(changes)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values))
    return path


class Run:
    """`python -m testbed.localrun ...` in the background, its output collected by line."""

    def __init__(self, *args: str):
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self.proc = subprocess.Popen([sys.executable, "-m", "testbed.localrun", *args], cwd=REPO, env=ENV,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, predicate, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                self._queue.put(None)  # the end, for finish() to read
                break
            self.lines.append(line)
            if predicate(line):
                return line
        self.finish(5)
        pytest.fail("never printed the awaited line; output:\n" + "\n".join(self.lines[-40:]))

    def finish(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)  # the runner stops its trees on SIGTERM
            self.proc.wait(timeout=30)
            pytest.fail(f"localrun still running after {timeout} s; output:\n" + "\n".join(self.lines[-40:]))
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return rc

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def processes_with(fragment: str) -> list[int]:
    """Live processes whose command line holds fragment (leftovers of a run)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if fragment in cmdline and state != "Z":
                found.append(int(entry.name))
    return found
