"""torchdag/agents/torchdag_flight.py, the recorder record.py starts in every rank (issue 41):
where PyTorch's flight recorder is off, its own count of the Python collectives still names the
collective a rank waits in; a window's busy time is a step less the waiting; TORCHDAG_RECORD=0
records nothing. (With the flight recorder, on the local cluster: tests/e2e/test_diagnose_records_e2e.py,
and recorded logs: tests/diagnose/test_records.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, free_port

pytestmark = pytest.mark.torch
RUNNER = REPO / "torchdag" / "agents" / "record.py"
MANUAL = """
import os, signal, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
weight = torch.nn.Parameter(torch.ones(8))
optimizer = torch.optim.SGD([weight], lr=0.01)
for step in range(100000):
    if rank == 1 and step == 10:
        print("stopping", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    loss = (weight * torch.randn(8)).sum()
    optimizer.zero_grad()
    loss.backward()
    dist.all_reduce(weight.grad)  # gradients averaged by hand: a collective called from Python
    optimizer.step()
"""


def descendants(pid: int) -> list[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = [], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        out += frontier
    return out


def test_without_the_flight_recorder_its_own_count_names_the_collective(tmp_path):
    script = tmp_path / "manual.py"
    script.write_text(MANUAL)
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="0", TORCHDAG_RECORD_REPORT="2", OMP_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo")
    env.pop("TORCHDAG_RECORD", None)
    out = tmp_path / "out.log"
    with open(out, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                                 f"--master-port={free_port()}", "--master-addr=127.0.0.1", str(RUNNER), str(script)],
                                stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and "rank 0 waiting in" not in out.read_text():
                assert proc.poll() is None, out.read_text()[-3000:]
                time.sleep(0.5)
        finally:
            for pid in descendants(proc.pid) + [proc.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
    text = out.read_text()
    assert re.search(r"\[torchdag\] rank 0 of 2: recording collectives \(own recorder, gloo\)", text), text[-3000:]
    waiting = re.search(r"\[torchdag\] rank 0 waiting in all_reduce #(\d+) of the default group for (\d+) s "
                        r"\(entered \S+; sizes \[8\]; completed #(\d+)\)", text)
    assert waiting, text[-3000:]
    # the stopped rank made 10 steps: the 11th all-reduce is the one rank 0 waits in
    assert (int(waiting.group(1)), int(waiting.group(3))) == (11, 10), waiting.group(0)


def test_busy_time_is_the_step_less_the_waiting(monkeypatch):
    """Three steps of 100 ms: 30 ms of work before the gradients' all-reduce is entered, its
    wait, 10 ms of optimizer step; one synchronous collective of 20 ms inside the work."""
    sys.path.insert(0, str(REPO / "torchdag" / "agents"))
    import torchdag_flight

    recorder = torchdag_flight.Recorder({"TORCHDAG_RECORD_WINDOW": "1"})
    ms = 1_000_000
    base = int(1_000_000_000 * 1e9) + 100 * ms  # window (1e9 s, 1e9 + 1 s]
    entries = []
    for step in range(4):
        start = base + step * 100 * ms  # the previous step's end
        recorder.light_calls.append((start + 5 * ms, start + 25 * ms))  # a synchronous call: 20 ms waited
        entries.append(start + 30 * ms)  # the gradients' all-reduce entered (asynchronous: DDP's)
        recorder.steps.append((start + 90 * ms, start + 100 * ms))  # the optimizer step
    monkeypatch.setattr(recorder, "_flight_dump", lambda full: {"version": "2", "entries": [
        {"time_created_ns": e} for e in entries]})
    said = []
    monkeypatch.setattr(recorder, "say", said.append)
    recorder.window_start, recorder.window_end = 1e9 - 5, 1e9 + 1
    recorder._window(1e9 + 1.2)
    # per step: 30 ms to the all-reduce's entry, less the 20 ms waited, plus the 10 ms optimizer step
    assert said == ["window 2001-09-09T01:46:41Z 1 s: 3 steps, step 100.0 ms, busy 20.0 ms"], said


def test_recording_off():
    sys.path.insert(0, str(REPO / "torchdag" / "agents"))
    import torchdag_flight

    env = {"TORCHDAG_RECORD": "0"}
    assert torchdag_flight.install(env) is None and env == {"TORCHDAG_RECORD": "0"}


ENDING = """
import threading, time
import torch.distributed as dist
from torch.distributed import destroy_process_group  # taken after record.py started the recorder

dist.init_process_group("gloo")
deadline = time.monotonic() + 30
while time.monotonic() < deadline and "of 1: recording" not in open(OUT).read():  # the thread has ticked
    time.sleep(0.2)
recorder = [t for t in threading.enumerate() if t.name == "torchdag-recorder"]
print("recording:", [t.is_alive() for t in recorder], flush=True)
destroy_process_group()
print("after destroy:", [t.is_alive() for t in recorder], dist.is_initialized(), flush=True)
"""


def test_the_recorder_stops_before_the_process_group_is_destroyed(tmp_path):
    """Its thread calls into torch's C++ each second: it ends before the group (and, at exit,
    the interpreter) goes, never racing them (a rank aborting after its script had finished)."""
    out = tmp_path / "out.log"
    script = tmp_path / "ending.py"
    script.write_text(f"OUT = {str(out)!r}\n" + ENDING)
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    env.pop("TORCHDAG_RECORD", None)
    with open(out, "w") as sink:
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1",
                               f"--master-port={free_port()}", "--master-addr=127.0.0.1", str(RUNNER), str(script)],
                              stdout=sink, stderr=subprocess.STDOUT, env=env, timeout=120)
    text = out.read_text()
    assert done.returncode == 0, text[-3000:]
    assert "recording: [True]" in text and "after destroy: [False] False" in text, text[-3000:]
