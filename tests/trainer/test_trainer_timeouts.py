"""docs/trainer.md's failure model where time decides: a peer that never arrives at init,
a node that never joins torchrun's rendezvous, a stop signal during slow steps, and a
grace period that runs out. Real torchrun processes on 127.0.0.1; the bounds are the
documented ones with margin for a busy 2-core machine, and each wait is longer than the
bound it checks."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from trainer_helpers import (
    JOB_TIMEOUT,
    REPO,
    TRAIN,
    children,
    clean_env,
    free_port,
    output,
    output_of,
    read_json,
    reap,
    start,
    start_nodes,
    torchrun_cmd,
    wait_all,
)

sys.path.insert(0, str(REPO))

from trainer import checkpoint

pytestmark = pytest.mark.torch  # real torchrun jobs and the trainer's modules

GRACE = 30  # Kubernetes' default terminationGracePeriodSeconds and torchrun's shutdown timeout
# ~1.6 s steps on one core, 18 MB checkpoints: the measured table's last row
SLOW = ["--hidden", "60000", "--batch-size", "1024", "--log-every", "1"]


def wait_until(predicate, procs, tmp: Path, timeout: float = JOB_TIMEOUT) -> float:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), output_of(tmp)
        time.sleep(0.01)
    return time.monotonic()


def test_a_peer_that_never_arrives_at_init_fails_after_the_pg_timeout(tmp_path):
    """Both agents rendezvous, but node 1's worker never calls init_process_group (stuck
    before it). Node 0's worker waits in the store for TORCHDAG_PG_TIMEOUT, then fails."""
    pg_timeout = 10
    sleeper = tmp_path / "stuck_before_init.py"
    sleeper.write_text("import time\ntime.sleep(600)\n")
    port = free_port()
    env = clean_env(TORCHDAG_PG_TIMEOUT=str(pg_timeout))
    waiting = start(
        torchrun_cmd(0, 2, 1, port, ["--max-steps", "3"], ["--rdzv-conf=timeout=60"]), tmp_path / "node0.log", env
    )
    stuck_cmd = [
        str(sleeper) if arg == str(TRAIN) else arg
        for arg in torchrun_cmd(1, 2, 1, port, [], ["--rdzv-conf=timeout=60"])
    ]
    stuck = start(stuck_cmd, tmp_path / "node1.log", env)
    try:
        spawned = wait_until(lambda: children(waiting.pid), [waiting, stuck], tmp_path)
        code = waiting.wait(timeout=JOB_TIMEOUT)
        took = time.monotonic() - spawned
    finally:
        reap(waiting, stuck)
    assert code == 1, output(waiting)
    log = output(waiting)
    assert f"wait timeout after {pg_timeout * 1000}ms" in log and "[trainer] rank 0 failed:" in log, log[-3000:]
    # The worker's own start (torch's import, a few seconds) comes first; then the timeout.
    assert pg_timeout <= took < pg_timeout + 25, (took, log[-3000:])


def test_a_node_that_never_joins_is_bounded_by_the_rendezvous_timeout(tmp_path):
    """Node 1 never starts: node 0's torchrun gives up after --rdzv-conf=timeout=N (the
    rendered Workflow passes timeouts.rendezvous there), not torchrun's default 900 s."""
    rendezvous = 5
    started = time.monotonic()
    alone = start(
        torchrun_cmd(0, 2, 1, free_port(), ["--max-steps", "3"], [f"--rdzv-conf=timeout={rendezvous}"]),
        tmp_path / "node0.log",
    )
    try:
        code = alone.wait(timeout=JOB_TIMEOUT)
        took = time.monotonic() - started
    finally:
        reap(alone)
    assert code == 1 and "waiting for clients. 1/2 clients joined" in output(alone), output(alone)[-3000:]
    assert rendezvous <= took < rendezvous + 30, took
    assert "[trainer]" not in output(alone)  # no worker was started


def test_sigterm_during_slow_steps_stops_after_the_current_step(tmp_path):
    """The measured table's last row: 2 nodes x 1, ~1.6 s steps, SIGTERM to node 1's
    torchrun just after a step began. The step in flight (or the next one, when the
    signal comes after that step's gradient exchange) is the last one, and it is saved."""
    ck, metrics = tmp_path / "ck", tmp_path / "m.json"
    status = {n: tmp_path / f"status{n}" for n in range(2)}
    args = SLOW + [
        "--max-steps",
        "1000",
        "--checkpoint-every",
        "1000",
        "--checkpoint-dir",
        str(ck),
        "--metrics-file",
        str(metrics),
    ]
    procs = start_nodes(
        tmp_path, 2, 1, args, ["--rdzv-conf=timeout=60"], node_env=lambda n: {"TORCHDAG_STATUS_FILE": str(status[n])}
    )
    try:
        wait_until(lambda: "[trainer] step 2/1000 " in output(procs[0]), procs, tmp_path)
        os.kill(procs[1].pid, signal.SIGTERM)
        signalled = time.monotonic()
        codes = wait_all(procs, JOB_TIMEOUT)
        took = time.monotonic() - signalled
    finally:
        reap(*procs)
    assert codes == [1, 1] and [status[n].read_text() for n in range(2)] == ["75\n", "75\n"], output_of(tmp_path)
    assert took < GRACE, (took, output_of(tmp_path))
    m = read_json(metrics)
    assert m["preempted"] and m["signalled_ranks"] == 1 and m["steps"] in (3, 4), m
    assert [step for step, _ in checkpoint.list_checkpoints(str(ck))] == [m["steps"]]


def test_a_grace_period_that_runs_out_is_a_kill(tmp_path):
    """A step longer than torchrun's --shutdown-timeout (1 s here; 30 s by default): the
    worker is SIGKILLed mid-step (-9), torchrun exits 1, and the run loses what a crash
    loses: the step is not saved, no metrics, no status file from the killed rank."""
    ck, status = tmp_path / "ck", tmp_path / "status"
    # One rank alone steps faster than the table's two: three times the batch, ~2.5 s a step.
    args = SLOW + [
        "--batch-size",
        "3072",
        "--max-steps",
        "1000",
        "--checkpoint-every",
        "1",
        "--checkpoint-dir",
        str(ck),
        "--metrics-file",
        str(tmp_path / "m.json"),
    ]
    node = start(
        torchrun_cmd(0, 1, 1, free_port(), args, ["--shutdown-timeout=1"]),
        tmp_path / "node0.log",
        clean_env(TORCHDAG_STATUS_FILE=str(status)),
    )
    try:
        wait_until(lambda: "[trainer] step 2/1000 " in output(node), [node], tmp_path)
        os.kill(node.pid, signal.SIGTERM)  # step 3 has just begun
        code = node.wait(timeout=JOB_TIMEOUT)
    finally:
        reap(node)
    log = output(node)
    assert code == 1, log[-3000:]
    assert re.search(r"Unable to shutdown process \d+ via 15, forcefully exiting via 9", log), log[-3000:]
    assert "stopped at step" not in log and not (tmp_path / "m.json").exists() and not status.exists(), log[-3000:]
    assert checkpoint.list_checkpoints(str(ck))[0][0] == 2  # step 3 was never saved
