"""Stopping and restarting trainer/train.py as docs/trainer.md describes it, beyond the
SIGTERM-to-node-1 case of tests/trainer/test_trainer_recovery.py: SIGINT and SIGHUP, a signal to
the master node, to every node at once (an Argo stop), a signal before the first step,
the stop agreement of the nccl/hccl path across two real ranks, the warning of a restart
that finds no checkpoint, and the store prefix that keeps restart attempts apart.
Real processes on 127.0.0.1."""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from trainer_helpers import (
    JOB_TIMEOUT,
    REPO,
    TRAIN,
    alive,
    children,
    clean_env,
    free_port,
    full_output_of,
    output,
    output_of,
    read_json,
    reap,
    run_ranks,
    start,
    start_nodes,
    start_ranks,
    wait_all,
)

sys.path.insert(0, str(REPO))

from trainer import checkpoint

pytestmark = pytest.mark.torch  # real torchrun jobs and the trainer's modules

PREEMPTED = 75  # EX_TEMPFAIL, docs/trainer.md "Exit status"
GRACE = 30  # Kubernetes' default terminationGracePeriodSeconds and torchrun's shutdown timeout
LONG_RUN = ["--max-steps", "1000000", "--checkpoint-every", "100", "--log-every", "0"]


def wait_for_checkpoint(ck: Path, procs, tmp: Path) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT
    while not checkpoint.list_checkpoints(str(ck)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), output_of(tmp)
        time.sleep(0.01)


def assert_stopped_together(tmp: Path, ck: Path, metrics: Path, signalled: int | None, world: int) -> int:
    """Every rank stopped after the same step, which is checkpointed; the step. signalled:
    how many ranks had the signal when they agreed (None: any number from 1 to world)."""
    m = read_json(metrics)
    assert m["preempted"] is True and m["world_size"] == world, m
    assert m["signalled_ranks"] == signalled if signalled is not None else 1 <= m["signalled_ranks"] <= world, m
    signalled = m["signalled_ranks"]
    assert m["final_loss"] is None and 100 <= m["steps"] < 1000000, m
    assert checkpoint.scan(str(ck)).valid[0][0] == m["steps"], (checkpoint.scan(str(ck)).valid, m)
    logs = full_output_of(tmp)
    assert (
        f"[trainer] preempted at step {m['steps']}/1000000 (a stop signal reached {signalled} of {world} ranks), "
        f"checkpoint {checkpoint.path_for(str(ck), m['steps'])}; exit 75"
    ) in logs, output_of(tmp)
    return m["steps"]


def wait_watching_workers(procs, before: list[int]) -> tuple[list[int], list[int]]:
    """Wait for the torchruns; their statuses, and the trainer processes that started after
    `before` was taken (a restarted worker group)."""
    deadline = time.monotonic() + JOB_TIMEOUT
    started = set()
    while any(p.poll() is None for p in procs):
        if time.monotonic() > deadline:
            reap(*procs)
            raise AssertionError("torchrun still running after the stop signal")
        for p in procs:
            started.update(pid for pid in children(p.pid) if pid not in before and is_trainer(pid))
        time.sleep(0.01)
    return [p.returncode for p in procs], sorted(started)


def is_trainer(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return str(TRAIN).encode() in f.read()
    except OSError:
        return False


# ------------------------------------------------------------------- signals


@pytest.mark.parametrize("sig,rank", [(signal.SIGINT, 0), (signal.SIGHUP, 1)], ids=["SIGINT-rank0", "SIGHUP-rank1"])
def test_sigint_and_sighup_stop_every_rank_with_75(tmp_path, sig, rank):
    """Ctrl-C (SIGINT) and a lost terminal (SIGHUP) are stop signals like SIGTERM, straight
    to one worker: both ranks save the agreed step and exit 75, each node's local rank 0
    writes 75 to TORCHDAG_STATUS_FILE."""
    ck, metrics, status = tmp_path / "ck", tmp_path / "m.json", tmp_path / "status"
    procs = start_ranks(
        tmp_path,
        LONG_RUN + ["--checkpoint-dir", str(ck), "--metrics-file", str(metrics)],
        world=2,
        env=clean_env(TORCHDAG_STATUS_FILE=str(status)),
    )
    try:
        wait_for_checkpoint(ck, procs, tmp_path)
        procs[rank].send_signal(sig)
        codes = wait_all(procs, JOB_TIMEOUT)
    finally:
        reap(*procs)
    assert codes == [PREEMPTED, PREEMPTED], output_of(tmp_path)
    step = assert_stopped_together(tmp_path, ck, metrics, signalled=1, world=2)
    here = f"{sig.name} received here" if rank == 0 else "signal received elsewhere"
    assert f"[trainer] node 0: stopped at step {step}/1000000 ({here}); checkpoint saved; exit 75" in output(procs[0])
    assert status.read_text() == "75\n"


def test_sigint_to_the_master_nodes_torchrun(tmp_path):
    """Ctrl-C on node 0, the master (its agent holds the rendezvous store): both nodes stop
    at the same step, rank 0 saves it, and node 1 -- no signal, a restart left -- stops its
    agent instead of restarting into a job that is gone."""
    ck, metrics = tmp_path / "ck", tmp_path / "m.json"
    status = {n: tmp_path / f"status{n}" for n in range(2)}
    procs = start_nodes(
        tmp_path,
        2,
        1,
        LONG_RUN + ["--checkpoint-dir", str(ck), "--metrics-file", str(metrics)],
        ["--max-restarts=1", "--rdzv-conf=timeout=60"],
        node_env=lambda n: {"TORCHDAG_STATUS_FILE": str(status[n])},
    )
    try:
        wait_for_checkpoint(ck, procs, tmp_path)
        workers = [pid for p in procs for pid in children(p.pid)]
        os.kill(procs[0].pid, signal.SIGINT)
        signalled = time.monotonic()
        codes, restarted = wait_watching_workers(procs, workers)
        took = time.monotonic() - signalled
        assert alive(workers) == [], "workers outlived their torchrun"
    finally:
        reap(*procs)
    assert took < GRACE, output_of(tmp_path)
    assert codes == [1, 1] and [status[n].read_text() for n in range(2)] == ["75\n", "75\n"], output_of(tmp_path)
    step = assert_stopped_together(tmp_path, ck, metrics, signalled=1, world=2)
    assert f"node 0: stopped at step {step}/1000000 (SIGINT received here)" in output(procs[0])
    assert f"node 1: stopped at step {step}/1000000 (signal received elsewhere)" in output(procs[1])
    assert "asking torchrun" in output(procs[1]) and restarted == [], output_of(tmp_path)
    assert "asking torchrun" not in output(procs[0])  # its agent was signalled itself


def test_sigterm_to_every_node_at_once_is_an_argo_stop(tmp_path):
    """`argo stop` or a deadline: every pod gets SIGTERM together. All ranks stop after the
    same step, it is saved once, every process is gone within the grace period, nobody
    restarts anything."""
    ck, metrics = tmp_path / "ck", tmp_path / "m.json"
    status = {n: tmp_path / f"status{n}" for n in range(2)}
    procs = start_nodes(
        tmp_path,
        2,
        2,
        LONG_RUN + ["--checkpoint-dir", str(ck), "--metrics-file", str(metrics)],
        ["--max-restarts=1", "--rdzv-conf=timeout=60"],
        node_env=lambda n: {"TORCHDAG_STATUS_FILE": str(status[n])},
    )
    try:
        wait_for_checkpoint(ck, procs, tmp_path)
        workers = [pid for p in procs for pid in children(p.pid)]
        for p in procs:
            os.kill(p.pid, signal.SIGTERM)
        signalled = time.monotonic()
        codes, restarted = wait_watching_workers(procs, workers)
        took = time.monotonic() - signalled
        assert alive(workers) == [], "workers outlived their torchrun"
    finally:
        reap(*procs)
    assert took < GRACE, output_of(tmp_path)
    assert codes == [1, 1] and [status[n].read_text() for n in range(2)] == ["75\n", "75\n"], output_of(tmp_path)
    # The agents forward the signal within milliseconds of each other, but a step is shorter:
    # the ranks may agree before every one of them has it. None restarts.
    step = assert_stopped_together(tmp_path, ck, metrics, signalled=None, world=4)
    for n in range(2):
        assert f"node {n}: stopped at step {step}/1000000 (" in output(procs[n])
    assert restarted == [], output_of(tmp_path)
    assert full_output_of(tmp_path).count(f"checkpoint {checkpoint.path_for(str(ck), step)}\n") == 1


# A rank held just before its training loop -- past init_process_group, resume and DDP,
# before the stop handlers are installed -- until the test says go.
HELD_BEFORE_THE_LOOP = """
import os, runpy, sys, time
sys.path.insert(0, {root!r})
from trainer import preemption
enter = preemption.StopRequest.__enter__
def held(self):
    open(os.environ["HELD_FILE"], "w").close()
    while not os.path.exists(os.environ["GO_FILE"]):
        time.sleep(0.01)
    return enter(self)
preemption.StopRequest.__enter__ = held
sys.argv = [{train!r}, *sys.argv[1:]]
runpy.run_path({train!r}, run_name="__main__")
"""


def test_a_stop_signal_before_the_first_step_has_its_default_action(tmp_path):
    """docs/trainer.md, failure model: before the first step nothing of this run is there to
    save, so SIGTERM kills the rank (-15) and its peer fails as on a crash (1); no checkpoint,
    no metrics, no status written by the killed rank."""
    ck, go = tmp_path / "ck", tmp_path / "go"
    port = free_port()
    procs = []
    try:
        for rank in range(2):
            env = clean_env(
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE="2",
                LOCAL_WORLD_SIZE="2",
                GROUP_RANK="0",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                TORCHDAG_PG_TIMEOUT="60",
                HELD_FILE=str(tmp_path / f"held{rank}"),
                GO_FILE=str(go),
                TORCHDAG_STATUS_FILE=str(tmp_path / f"status{rank}"),
            )
            command = [
                sys.executable,
                "-c",
                HELD_BEFORE_THE_LOOP.format(root=str(REPO), train=str(TRAIN)),
                "--max-steps",
                "50",
                "--checkpoint-dir",
                str(ck),
                "--metrics-file",
                str(tmp_path / "m.json"),
            ]
            procs.append(start(command, tmp_path / f"rank{rank}.log", env))
        deadline = time.monotonic() + JOB_TIMEOUT
        while not all((tmp_path / f"held{rank}").exists() for rank in range(2)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), output_of(tmp_path)
            time.sleep(0.01)
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=JOB_TIMEOUT) == -signal.SIGTERM, output_of(tmp_path)
        go.touch()
        codes = wait_all(procs, JOB_TIMEOUT)
    finally:
        reap(*procs)
    assert codes == [1, -signal.SIGTERM], output_of(tmp_path)
    assert "[trainer] rank 0 failed:" in output(procs[0]), output_of(tmp_path)
    assert checkpoint.list_checkpoints(str(ck)) == [] and not (tmp_path / "m.json").exists()
    assert (tmp_path / "status0").read_text() == "1\n" and not (tmp_path / "status1").exists()


AGREEMENT = """
import datetime, json, os, signal, sys
sys.path.insert(0, {root!r})
import torch.distributed as dist
from trainer.preemption import StopAgreement, StopRequest
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", init_method="file://" + os.environ["STORE_FILE"], rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=60))
group = dist.new_group(backend="gloo")  # the trainer's CPU group under nccl/hccl
counts = []
with StopRequest() as request:
    agreement = StopAgreement(request, group, world_size=2)  # no carrier: the nccl/hccl path
    for step, signalled in enumerate([(), (1,), (0, 1), ()]):
        if rank in signalled:
            os.kill(os.getpid(), signal.SIGTERM)  # a real signal: the handler only records it
        agreement.start()
        counts.append(agreement.result())
print("COUNTS " + json.dumps(counts) + " " + signal.Signals(request.signum).name)
dist.destroy_process_group()
print("DEFAULT HANDLER BACK " + str(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL))
"""


def test_stop_agreement_of_the_nccl_path_across_two_ranks(tmp_path):
    """Two real ranks, one gloo all-reduce per step over a separate group: both learn the
    same count, after the step in which a rank got its signal, and a signal once recorded
    stays; outside the loop the default action is back."""
    procs = []
    try:
        for rank in range(2):
            env = clean_env(RANK=str(rank), STORE_FILE=str(tmp_path / "store"))
            procs.append(
                start([sys.executable, "-c", AGREEMENT.format(root=str(REPO))], tmp_path / f"rank{rank}.log", env)
            )
        assert wait_all(procs, JOB_TIMEOUT) == [0, 0], output_of(tmp_path)
    finally:
        reap(*procs)
    for proc in procs:
        lines = output(proc).splitlines()
        assert "COUNTS [0, 1, 2, 2] SIGTERM" in lines, output(proc)
        assert "DEFAULT HANDLER BACK True" in lines, output(proc)


# ------------------------------------------------------------------ restarts


def test_a_restart_that_finds_no_checkpoint_warns(tmp_path):
    """TORCHDAG_RESTART > 0 and an empty checkpoint directory: a lost or unmounted volume
    looks the same as no progress, so rank 0 says so; on the first attempt it does not."""
    empty = tmp_path / "ck"
    empty.mkdir()
    first, retry = tmp_path / "first", tmp_path / "retry"
    first.mkdir()
    retry.mkdir()
    args = ["--max-steps", "3", "--log-every", "0", "--checkpoint-every", "0"]
    assert run_ranks(retry, args + ["--checkpoint-dir", str(empty)], env=clean_env(TORCHDAG_RESTART="2")) == [0]
    logs = full_output_of(retry)
    assert f"[trainer] no checkpoint in {empty}; starting at step 0" in logs, logs
    assert (
        "[trainer] warning: this is restart 2 of the job and no checkpoint was found: either no attempt got as far "
        "as one, or the checkpoint directory is not the one they used (a lost or unmounted volume looks the same)"
    ) in logs.splitlines(), logs
    assert "restart 2" in next(line for line in logs.splitlines() if line.startswith("[trainer] training:"))

    assert run_ranks(
        first, args + ["--checkpoint-dir", str(tmp_path / "ck0")], env=clean_env(TORCHDAG_RESTART="0")
    ) == [0]
    logs = full_output_of(first)
    assert "starting at step 0" in logs and "warning" not in logs, logs


def rank_env(rank: int, port: int, attempt: int) -> dict:
    """What torchrun's agent gives a worker when it shares its store with them."""
    return clean_env(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        GROUP_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHDAG_PG_TIMEOUT="20",
        TORCHELASTIC_USE_AGENT_STORE="True",
        TORCHELASTIC_RESTART_COUNT=str(attempt),
    )


def train(command_args, tmp: Path, name: str, env: dict):
    return start([sys.executable, str(TRAIN), *command_args], tmp / f"{name}.log", env)


def test_each_restart_attempt_has_a_store_prefix_of_its_own(tmp_path):
    """torchrun keeps one store across worker restarts (the test holds it here, as the
    node-rank-0 agent does). Attempt 0 leaves its ranks' addresses in it; in attempt 1,
    rank 1 starts well before rank 0. Under torchdag/attempt_<N> it waits for the new
    rank 0; without the prefix it would read attempt 0's address of a rank that is gone
    ("connectFullMesh failed ... Connection refused")."""
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=60), wait_for_workers=False)
    args = ["--max-steps", "3", "--log-every", "0"]
    procs = []
    try:
        procs = [train(args, tmp_path, f"attempt0-rank{rank}", rank_env(rank, store.port, 0)) for rank in range(2)]
        assert wait_all(procs, JOB_TIMEOUT) == [0, 0], output_of(tmp_path)
        left = store.num_keys()
        assert left > 0  # attempt 0's keys stay in the store, as in torchrun's

        late = train(args, tmp_path, "attempt1-rank1", rank_env(1, store.port, 1))
        procs = [late]
        deadline = time.monotonic() + JOB_TIMEOUT
        while store.num_keys() == left and late.poll() is None:  # rank 1 has reached the store
            assert time.monotonic() < deadline, output_of(tmp_path)
            time.sleep(0.05)
        time.sleep(1)  # and had time to read whatever it was going to read there
        procs = [train(args, tmp_path, "attempt1-rank0", rank_env(0, store.port, 1)), late]
        codes = wait_all(procs, JOB_TIMEOUT)
    finally:
        reap(*procs)
    assert codes == [0, 0], output_of(tmp_path)
    assert "connectFullMesh" not in full_output_of(tmp_path)
