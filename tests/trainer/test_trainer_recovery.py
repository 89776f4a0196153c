"""Recovery paths of trainer/train.py: SIGTERM (preemption), the restart count,
node-local checkpoints, and damaged checkpoints. Real torchrun processes on
127.0.0.1 and tiny runs; the unit tests at the end need no processes."""

from __future__ import annotations

import os
import signal
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from trainer_helpers import (
    JOB_TIMEOUT,
    REPO,
    alive,
    children,
    clean_env,
    full_output_of,
    output,
    output_of,
    read_json,
    reap,
    run_nodes,
    run_ranks,
    start_nodes,
    start_ranks,
    wait_all,
)

sys.path.insert(0, str(REPO))

from trainer import checkpoint
from trainer.config import EXIT_PREEMPTED, LaunchError, expand_checkpoint_dir, parse_config, restart_from_env

pytestmark = pytest.mark.torch  # real torchrun jobs and the trainer's modules

GRACE = 30  # Kubernetes' default terminationGracePeriodSeconds and torchrun's shutdown timeout


def valid_steps(directory: Path) -> list[int]:
    return [s for s, _ in checkpoint.scan(str(directory)).valid]


# ------------------------------------------------------------- preemption

def test_sigterm_to_one_node_saves_the_agreed_step_and_the_retry_resumes(tmp_path):
    """SIGTERM to node 1's torchrun (a drained or evicted pod). Its agent
    forwards it to its worker; the worker on node 0 got nothing. Both must
    stop at the same step, rank 0 (on node 0) must save that step, and every
    process of both nodes must be gone within the grace period. --max-restarts
    1: node 0's agent must not restart its worker into a job that is gone.
    The next attempt (TORCHDAG_RESTART=1) resumes from exactly that step."""
    ck = tmp_path / "ck"
    first = tmp_path / "first"
    first.mkdir()
    args = ["--max-steps", "1000000", "--checkpoint-every", "100", "--log-every", "0",
            "--checkpoint-dir", str(ck), "--metrics-file", str(first / "m.json")]
    status = {n: first / f"status{n}" for n in range(2)}
    procs = start_nodes(first, 2, 1, args, ["--max-restarts=1", "--rdzv-conf=timeout=60"],
                        node_env=lambda n: {"TORCHDAG_STATUS_FILE": str(status[n])})
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while not checkpoint.list_checkpoints(str(ck)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), output_of(first)
            time.sleep(0.01)
        workers = [pid for p in procs for pid in children(p.pid)]
        assert len(workers) >= 2, "a node has no worker"
        os.kill(procs[1].pid, signal.SIGTERM)
        signalled = time.monotonic()
        codes = wait_all(procs, JOB_TIMEOUT)
        took = time.monotonic() - signalled
        assert alive(workers) == [], "workers outlived their torchrun"
    finally:
        reap(*procs)
    logs = output_of(first)
    assert took < GRACE, logs  # the acceptance bound (measured: about 1-2 s)
    assert codes == [1, 1], logs  # torchrun exits 1 whatever its workers' status ...
    expected = f"{EXIT_PREEMPTED}\n"
    assert [status[n].read_text() for n in range(2)] == [expected, expected], logs  # ... hence the status file
    m = read_json(first / "m.json")
    stopped = m["steps"]
    assert m["preempted"] is True and m["signalled_ranks"] == 1 and m["restart"] == 0, m
    assert 100 <= stopped < 1000000
    newest = checkpoint.scan(str(ck)).valid[0]
    assert newest[0] == stopped, (newest, m)
    assert checkpoint.load(newest[1], stopped)["step"] == stopped
    assert f"node 0: stopped at step {stopped}/1000000 (signal received elsewhere)" in output(procs[0])
    assert f"node 1: stopped at step {stopped}/1000000 (SIGTERM received here)" in output(procs[1])
    # Node 0's agent had a restart left; its worker asked it to stop instead.
    assert "asking torchrun" in output(procs[0]) and output(procs[0]).count("[trainer] training:") == 1

    retry = tmp_path / "retry"
    retry.mkdir()
    args = ["--max-steps", str(stopped + 20), "--checkpoint-every", "100", "--log-every", "0",
            "--checkpoint-dir", str(ck), "--metrics-file", str(retry / "m.json")]
    codes = run_nodes(retry, args, 2, 1, ["--rdzv-conf=timeout=60"], env=clean_env(TORCHDAG_RESTART="1"))
    assert codes == [0, 0], output_of(retry)
    m = read_json(retry / "m.json")
    assert m["resumed_from_step"] == stopped and m["steps"] == stopped + 20 and m["steps_this_run"] == 20, m
    assert m["restart"] == 1 and m["preempted"] is False
    assert "restart 1" in full_output_of(retry)


def test_sigterm_on_the_cpu_bucket_path_stops_every_rank_with_75(tmp_path):
    """The mixed-device gradient path carries the stop flag too: SIGTERM
    straight to one of two ranks (as a local supervisor that signals whole
    process trees does); both ranks save the same step and exit 75."""
    ck = tmp_path / "ck"
    procs = start_ranks(tmp_path, ["--max-steps", "1000000", "--checkpoint-every", "100", "--log-every", "0",
                                   "--grad-sync", "cpu-buckets", "--checkpoint-dir", str(ck),
                                   "--metrics-file", str(tmp_path / "m.json")], world=2)
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while not checkpoint.list_checkpoints(str(ck)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), output_of(tmp_path)
            time.sleep(0.01)
        procs[1].send_signal(signal.SIGTERM)
        codes = wait_all(procs, GRACE)
    finally:
        reap(*procs)
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], output_of(tmp_path)
    m = read_json(tmp_path / "m.json")
    assert m["grad_sync"] == "cpu-buckets" and m["preempted"] and m["signalled_ranks"] == 1, m
    assert valid_steps(ck)[0] == m["steps"] > 100


# ------------------------------------------------- node-local checkpoints

def test_node_local_checkpoints_survive_losing_node0s_directory(tmp_path):
    """--checkpoint-storage node-local: each node's local rank 0 keeps its own
    copy ({node_rank} gives the two "nodes" on this machine different
    directories). Losing node 0's directory loses no progress: the next run
    resumes from node 1's copy, also on the mixed-device (cpu-buckets) path."""
    template = str(tmp_path / "ck-{node_rank}")
    common = ["--checkpoint-every", "10", "--log-every", "0", "--checkpoint-storage", "node-local",
              "--checkpoint-dir", template]
    first = tmp_path / "first"
    first.mkdir()
    codes = run_nodes(first, common + ["--max-steps", "40", "--metrics-file", str(first / "m.json")], 2, 1,
                      ["--rdzv-conf=timeout=60"])
    assert codes == [0, 0], output_of(first)
    assert read_json(first / "m.json")["restart"] == 0  # TORCHDAG_RESTART absent
    for n in range(2):
        assert valid_steps(tmp_path / f"ck-{n}") == [40, 30, 20], n
    assert "node 1: checkpoint" in full_output_of(first), output_of(first)

    for f in (tmp_path / "ck-0").iterdir():
        f.unlink()
    (tmp_path / "ck-0").rmdir()

    second = tmp_path / "second"
    second.mkdir()
    codes = run_nodes(second, common + ["--max-steps", "60", "--grad-sync", "cpu-buckets",
                                        "--metrics-file", str(second / "m.json")], 2, 1,
                      ["--rdzv-conf=timeout=60"], env=clean_env(TORCHDAG_RESTART="2"))
    assert codes == [0, 0], output_of(second)
    logs = full_output_of(second)
    m = read_json(second / "m.json")
    assert m["resumed_from_step"] == 40 and m["steps"] == 60 and m["grad_sync"] == "cpu-buckets", m
    assert m["restart"] == 2
    assert "ck-1/ckpt-00000040.pt (node 1) at step 40" in logs
    assert valid_steps(tmp_path / "ck-0") == [60, 50]  # node 0 writes again from there
    assert valid_steps(tmp_path / "ck-1") == [60, 50, 40]


# ------------------------------------------------------ damaged checkpoints

def test_damaged_newest_checkpoint_neither_wins_nor_takes_the_slot(tmp_path):
    """A truncated newest checkpoint (step 40) ahead of a good one (30): the
    run resumes from 30, and with --keep-checkpoints 1 its new checkpoint
    (35) is kept -- the damaged file does not count as the one to keep."""
    ck = tmp_path / "ck"
    a = tmp_path / "a"
    a.mkdir()
    base = ["--checkpoint-every", "10", "--log-every", "0", "--checkpoint-dir", str(ck)]
    assert run_ranks(a, base + ["--max-steps", "40", "--keep-checkpoints", "2"]) == [0], output_of(a)
    assert valid_steps(ck) == [40, 30]
    newest = Path(checkpoint.path_for(str(ck), 40))
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    stray = ck / ".ckpt-00000050.x1y2.tmp"
    stray.write_bytes(b"interrupted save")

    b = tmp_path / "b"
    b.mkdir()
    codes = run_ranks(b, ["--max-steps", "35", "--checkpoint-every", "5", "--keep-checkpoints", "1",
                          "--log-every", "0", "--checkpoint-dir", str(ck), "--metrics-file", str(b / "m.json")])
    assert codes == [0], output_of(b)
    logs = full_output_of(b)
    assert read_json(b / "m.json")["resumed_from_step"] == 30
    assert f"warning: skipping unreadable checkpoint {newest}" in logs
    assert not stray.exists() and f"removed {stray}" in logs
    s = checkpoint.scan(str(ck))
    assert [st for st, _ in s.valid] == [35]  # the good one kept; 30 pruned
    assert [p for p, _ in s.bad] == [str(newest)]  # newer than any good one: left for a later save to replace


def test_no_readable_checkpoint_is_an_error_unless_told_to_start_over(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    checkpoint.save(str(ck), 20, {"step": 20, "w": torch.zeros(1000)}, keep=3)
    full = Path(checkpoint.path_for(str(ck), 20))
    full.write_bytes(full.read_bytes()[:-100])  # truncated
    Path(checkpoint.path_for(str(ck), 10)).write_bytes(b"")  # empty
    args = ["--max-steps", "5", "--log-every", "0", "--checkpoint-dir", str(ck)]

    a = tmp_path / "a"
    a.mkdir()
    status = a / "status"
    codes = run_ranks(a, args, world=2, env=clean_env(TORCHDAG_STATUS_FILE=str(status)))
    log = full_output_of(a)
    assert codes == [2, 2], log
    errors = [ln for ln in log.splitlines() if ln.startswith("[trainer] error:")]
    assert len(errors) == 1, log  # one line, from local rank 0
    assert "checkpoints exist but none is readable" in errors[0] and "--ignore-bad-checkpoints" in errors[0]
    assert str(full) in errors[0] and checkpoint.path_for(str(ck), 10) in errors[0]
    assert status.read_text() == "2\n"
    assert "starting at step 0" not in log

    b = tmp_path / "b"
    b.mkdir()
    assert run_ranks(b, args + ["--ignore-bad-checkpoints", "--metrics-file", str(b / "m.json")]) == [0], \
        output_of(b)
    m = read_json(b / "m.json")
    assert m["resumed_from_step"] is None and m["steps"] == 5
    assert "--ignore-bad-checkpoints: no readable checkpoint" in full_output_of(b)


# ------------------------------------------------------------ unit tests

def test_check_detects_truncation_and_load_detects_flipped_bits(tmp_path):
    d = str(tmp_path)
    path = checkpoint.save(d, 7, {"step": 7, "w": torch.arange(4096.0)}, keep=3)
    assert checkpoint.check(path) is None and checkpoint.load(path, 7)["step"] == 7
    with pytest.raises(checkpoint.Unreadable, match="records step 7"):
        checkpoint.load(path, 8)

    data = bytearray(Path(path).read_bytes())
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + 1000] ^= 0xFF  # torch.load alone would return the wrong value silently
    flipped = tmp_path / "flipped.pt"
    flipped.write_bytes(bytes(data))
    assert checkpoint.check(str(flipped)) is None  # the cheap check cannot see it ...
    with pytest.raises(checkpoint.Unreadable, match="CRC"):
        checkpoint.load(str(flipped))  # ... the full one does

    for cut in (len(data) - 1, len(data) // 2, 10, 0):
        short = tmp_path / f"ckpt-{cut:08d}.pt"
        short.write_bytes(bytes(data[:cut]))
        assert checkpoint.check(str(short)) is not None, cut


def test_prune_counts_only_readable_checkpoints(tmp_path):
    d = str(tmp_path)
    for step in (10, 20, 30):
        checkpoint.save(d, step, {"step": step}, keep=5)
    Path(checkpoint.path_for(d, 40)).write_bytes(b"torn")  # newer but bad
    Path(checkpoint.path_for(d, 5)).write_bytes(b"torn")  # older and bad
    deleted = checkpoint.prune(d, keep=2)
    assert sorted(deleted) == [checkpoint.path_for(d, 5), checkpoint.path_for(d, 10)]
    s = checkpoint.scan(d)
    assert [st for st, _ in s.valid] == [30, 20] and [p for p, _ in s.bad] == [checkpoint.path_for(d, 40)]


def test_restart_count_and_node_rank_directory():
    assert restart_from_env({}) == 0 and restart_from_env({"TORCHDAG_RESTART": " 3 "}) == 3
    for bad in ("-1", "one"):
        with pytest.raises(LaunchError, match="TORCHDAG_RESTART"):
            restart_from_env({"TORCHDAG_RESTART": bad})
    assert expand_checkpoint_dir("/ck/{node_rank}/x", {"GROUP_RANK": "2"}) == "/ck/2/x"
    assert expand_checkpoint_dir("/ck", {}) == "/ck"
    with pytest.raises(LaunchError, match="GROUP_RANK is not set"):
        expand_checkpoint_dir("/ck-{node_rank}", {})
    cfg = parse_config(["--checkpoint-storage", "node-local", "--ignore-bad-checkpoints"],
                       env={"TORCHDAG_RESTART": "4"})
    assert cfg.checkpoint_storage == "node-local" and cfg.ignore_bad_checkpoints and cfg.restart == 4
    assert parse_config([], env={}).checkpoint_storage == "shared"


def test_stop_flag_carrier_leaves_the_loss_and_gradients_alone():
    """The carried flag must not change training: same loss value, same
    gradients; its own gradient is 1 exactly when this rank was signalled."""
    from trainer.model import SimpleNet
    from trainer.preemption import StopAgreement, StopFlagCarrier, StopRequest

    x, y = torch.randn(8, 10), torch.randn(8, 10)
    grads = []
    for signalled in (False, True):
        torch.manual_seed(0)
        model = SimpleNet(6)
        request = StopRequest()
        request.signum = signal.SIGTERM if signalled else 0
        carrier = StopFlagCarrier(model, torch.device("cpu"))
        agreement = StopAgreement(request, None, world_size=1, carrier=carrier)
        loss = torch.nn.functional.mse_loss(carrier(x), y)
        total = agreement.loss(loss)
        assert torch.equal(total, loss)
        total.backward()
        assert agreement.result() == (1 if signalled else 0)
        assert carrier.stop_flag.grad is None  # cleared for the next step
        grads.append([p.grad.clone() for p in model.parameters()])
    torch.manual_seed(0)
    plain = SimpleNet(6)
    torch.nn.functional.mse_loss(plain(x), y).backward()
    for got in grads:
        assert all(torch.equal(a, p.grad) for a, p in zip(got, plain.parameters()))


def test_stop_agreement_without_carrier_uses_its_own_gloo_all_reduce(tmp_path):
    """The nccl/hccl path (no carrier): a small all-reduce over a separate
    gloo group, as the trainer makes it. One rank in this process; the
    cross-rank behaviour is that of the all-reduce itself."""
    import torch.distributed as dist

    from trainer.preemption import StopAgreement, StopRequest

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        group = dist.new_group(backend="gloo")
        request = StopRequest()
        agreement = StopAgreement(request, group, world_size=1)
        loss = torch.tensor(0.5, requires_grad=True)
        assert agreement.loss(loss) is loss
        for signum, expected in ((0, 0), (signal.SIGTERM, 1)):
            request.signum = signum
            agreement.start()
            assert agreement.result() == expected
    finally:
        dist.destroy_process_group()
