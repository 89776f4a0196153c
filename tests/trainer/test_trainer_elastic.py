"""Node recovery with real torchrun agents on 127.0.0.1, as failurePolicy.recovery node
renders them: a c10d rendezvous hosted by the first node's agent (is_host), the process
group's store made anew each round (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), --max-restarts.
After the first checkpoint a node's pod is deleted (SIGTERM) and started again (what its
task's retry does): it rejoins and the survivors' agents restart their workers; a node is
killed and not started again: with --nnodes=2:3 the other two go on alone. Every rank
resumes from the newest checkpoint."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from helpers import free_port
from trainer_helpers import (
    JOB_TIMEOUT,
    REPO,
    TRAIN,
    clean_env,
    full_output_of,
    kill_node,
    output_of,
    read_json,
    reap,
    start,
    wait_all,
)

sys.path.insert(0, str(REPO))

from trainer import checkpoint

pytestmark = pytest.mark.torch

STEPS, EVERY = 1000, 200


def _agent(tmp, name, port, nnodes, is_host, train_args, last_call=30):
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=elastic-test",
           f"--rdzv-conf=join_timeout=60,last_call_timeout={last_call},is_host={str(is_host).lower()}",
           "--max-restarts=2", "--monitor-interval=0.5", str(TRAIN), *train_args]
    env = clean_env(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", PET_LOCAL_ADDR="127.0.0.1", TORCHDAG_RECOVERY="node")
    return start(cmd, tmp / f"{name}.log", env=env)


def _start_three(tmp, nnodes, last_call=30):
    port = free_port()
    args = ["--max-steps", str(STEPS), "--checkpoint-every", str(EVERY), "--log-every", "0", "--hidden", "200",
            "--checkpoint-dir", str(tmp / "ck"), "--metrics-file", str(tmp / "metrics.json")]
    procs = [_agent(tmp, f"node{n}", port, nnodes, n == 0, args, last_call) for n in range(3)]
    deadline = time.monotonic() + JOB_TIMEOUT
    while not checkpoint.list_checkpoints(str(tmp / "ck")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), output_of(tmp)
        time.sleep(0.01)
    return port, args, procs


def test_a_node_whose_pod_is_deleted_rejoins_and_the_others_keep_their_agents(tmp_path):
    """A pod's deletion is SIGTERM to its torchrun: every rank stops at the agreed step and
    saves it; the signalled node leaves (75), the others exit 1 so that their agents restart
    their workers into the next round, which the node's retry joins."""
    port, args, procs = _start_three(tmp_path, "3:3")
    try:
        os.kill(procs[1].pid, signal.SIGTERM)
        killed = time.monotonic()
        procs[1].wait(timeout=JOB_TIMEOUT)
        # Its task's retry: the same node started again, a client of the first node's store.
        procs[1] = _agent(tmp_path, "node1-retry", port, "3:3", False, args)
        codes = wait_all([procs[0], procs[2], procs[1]], JOB_TIMEOUT)
    finally:
        reap(*procs)
    logs = full_output_of(tmp_path)
    assert codes == [0, 0, 0], output_of(tmp_path)
    metrics = read_json(tmp_path / "metrics.json")
    assert metrics["steps"] == STEPS and metrics["world_size"] == 3
    assert metrics["resumed_from_step"] >= EVERY, metrics
    # The survivors restarted their workers into the new round; the retried node started at 0.
    assert sorted(metrics["worker_restarts"]) == [0, 1, 1], metrics
    assert "worker restart 1, resumed from step" in logs
    assert logs.count("a peer node is leaving (a stop signal elsewhere)") == 2, output_of(tmp_path)
    assert time.monotonic() - killed < JOB_TIMEOUT


def test_with_min_nodes_two_of_three_go_on_without_the_lost_one(tmp_path):
    _, _, procs = _start_three(tmp_path, "2:3", last_call=3)
    try:
        kill_node(procs[2])
        codes = wait_all(procs[:2], JOB_TIMEOUT)
    finally:
        reap(*procs)
    assert codes == [0, 0], output_of(tmp_path)
    metrics = read_json(tmp_path / "metrics.json")
    assert metrics["steps"] == STEPS and metrics["world_size"] == 2, metrics
    assert metrics["resumed_from_step"] >= EVERY, metrics
    assert metrics["global_batch_size"] == 2 * metrics["batch_size"]
