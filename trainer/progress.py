"""Progress a job shows while it runs, and the hint a hang leaves.

- `ProgressFile`: each node's local rank 0 writes `N/M` (steps done of the total) to the
  file Argo names in `ARGO_PROGRESS_FILE` (Argo's progress mechanism, docs/progress.md of
  argo-workflows), so `argo get`, Argo's UI and `torchdag status` show it. Written at most
  once a second and at the last step, atomically (Argo may read it at any time).
- `StallReporter`: a thread in every rank that prints one line each `TORCHDAG_STALL_REPORT`
  seconds (default 60; 0 turns it off) while no step finishes:
  `[trainer] rank R (node N): no step finished for S s (step K/M): waiting`. A rank blocked
  in a collective keeps printing it; a rank that is stopped or stuck cannot, so
  `torchdag diagnose` names the silent one as the hang.

Own scripts can use both: `ProgressFile(total).update(step)` and
`StallReporter(rank, node, total)` with `.step(k)` after each step.
"""

from __future__ import annotations

import os
import sys
import threading
import time

WRITE_EVERY_S = 1.0
DEFAULT_STALL_REPORT_S = 60.0


class ProgressFile:
    def __init__(self, total: int, env=None):
        env = os.environ if env is None else env
        self.path = env.get("ARGO_PROGRESS_FILE", "").strip()
        local = env.get("LOCAL_RANK", "0").strip()
        self.writes = bool(self.path) and local in ("", "0")
        self.total = total
        self.last = 0.0

    def update(self, step: int, force: bool = False) -> None:
        if not self.writes:
            return
        now = time.monotonic()
        if not force and step < self.total and now - self.last < WRITE_EVERY_S:
            return
        self.last = now
        tmp = f"{self.path}.tmp{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                f.write(f"{step}/{self.total}\n")
            os.replace(tmp, self.path)
        except OSError as exc:  # progress is a hint: the run goes on without it
            print(f"[trainer] cannot write ARGO_PROGRESS_FILE {self.path}: {exc.strerror}; progress not shown",
                  file=sys.stderr, flush=True)
            self.writes = False


def stall_report_seconds(env=None) -> float:
    env = os.environ if env is None else env
    text = env.get("TORCHDAG_STALL_REPORT", "").strip()
    try:
        value = float(text) if text else DEFAULT_STALL_REPORT_S
    except ValueError:
        value = DEFAULT_STALL_REPORT_S
    return max(0.0, value)


class StallReporter:
    def __init__(self, rank: int, node: int | None, total: int, every: float | None = None, out=None):
        self.rank, self.node, self.total = rank, node, total
        self.every = stall_report_seconds() if every is None else every
        self.out = out or sys.stdout
        self.current = 0
        self.since = time.monotonic()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="stall-reporter", daemon=True)

    def __enter__(self) -> StallReporter:
        if self.every > 0:
            self.since = time.monotonic()
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()

    def step(self, step: int) -> None:
        self.current, self.since = step, time.monotonic()

    def _run(self) -> None:
        while not self.done.wait(self.every):
            waited = time.monotonic() - self.since
            if waited >= self.every:
                node = "?" if self.node is None else self.node
                print(f"[trainer] rank {self.rank} (node {node}): no step finished for {int(waited)} s "
                      f"(step {self.current}/{self.total}): waiting", file=self.out, flush=True)
