"""Process helpers shared by the trainer tests: real torchrun "nodes" on 127.0.0.1."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import REPO, free_port

TRAIN = REPO / "trainer" / "train.py"
PREFLIGHT = REPO / "torchdag" / "agents" / "preflight.py"




def clean_env(**extra: str) -> dict[str, str]:
    """Environment for a child: one thread per process (2 cores), unbuffered
    output, and none of the launcher/torchdag variables of the outer shell."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCHDAG_", "GLOO_", "NCCL_", "HCCL_"))
           and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                         "MASTER_PORT", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def torchrun_cmd(node_rank: int, nnodes: int, nproc: int, port: int, train_args: list[str],
                 launcher_args: list[str] = (), legacy: bool = False) -> list[str]:
    if legacy:
        # torch.distributed.launch: underscore flags, passes --local-rank=N.
        return [sys.executable, "-m", "torch.distributed.launch", f"--nnodes={nnodes}",
                f"--node_rank={node_rank}", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
                f"--master_port={port}", *launcher_args, str(TRAIN), *train_args]
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--node-rank={node_rank}",
            f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", f"--master-port={port}",
            *launcher_args, str(TRAIN), *train_args]


def start(cmd: list[str], log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None):
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env or clean_env(),
                            cwd=cwd, start_new_session=True)
    proc.log_path = log_path  # type: ignore[attr-defined]
    log.close()
    return proc


def children(pid: int) -> list[int]:
    """All descendants of pid, from /proc (torchrun puts its workers in
    sessions of their own, so a process-group kill would miss them)."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may contain spaces; fields after ')' are fixed.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parent_of[int(entry)] = ppid
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent_of.items() if pp == p]
        found.extend(kids)
        frontier.extend(kids)
    return found


def signal_node(proc, sig: int) -> list[int]:
    """Send sig to a torchrun agent and every process under it (a whole "node")."""
    pids = [proc.pid, *children(proc.pid)]
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return pids


def kill_node(proc) -> None:
    signal_node(proc, signal.SIGKILL)
    proc.wait(timeout=30)


def reap(*procs) -> None:
    """Leave nothing behind, whatever the test's outcome."""
    for p in procs:
        if p is not None and p.poll() is None:
            signal_node(p, signal.SIGCONT)
            signal_node(p, signal.SIGKILL)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


def output(proc) -> str:
    return Path(proc.log_path).read_text(errors="replace")


def wait_all(procs, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            reap(*procs)
            raise AssertionError(
                f"timed out after {timeout}s; logs:\n" + "\n".join(output(q)[-3000:] for q in procs)) from None
    return codes


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


JOB_TIMEOUT = 120  # a wedged job fails the test instead of hanging CI


def output_of(tmp: Path) -> str:
    """The tail of every *.log under tmp (what a failing assertion shows)."""
    return "\n".join(Path(p).read_text(errors="replace")[-4000:] for p in sorted(glob.glob(str(tmp / "*.log"))))


def full_output_of(tmp: Path) -> str:
    """Every *.log under tmp in full: what `in` assertions search. The tails
    are not enough: a non-master agent often ends with a long store traceback
    when the master's agent exits first, pushing earlier lines out."""
    return "\n".join(Path(p).read_text(errors="replace") for p in sorted(glob.glob(str(tmp / "*.log"))))


def start_nodes(tmp: Path, nnodes: int, nproc: int, train_args: list[str], launcher_args=(), legacy=False,
                env=None, node_env=None) -> list:
    """nnodes torchrun agents on one free port, logs in tmp/node<N>.log.
    node_env(n) -> dict adds per-node variables to env (or clean_env())."""
    port = free_port()
    procs = []
    try:
        for n in range(nnodes):
            e = dict(env or clean_env())
            if node_env is not None:
                e.update(node_env(n))
            procs.append(start(torchrun_cmd(n, nnodes, nproc, port, train_args, launcher_args, legacy),
                               tmp / f"node{n}.log", e))
    except BaseException:
        reap(*procs)
        raise
    return procs


def run_nodes(tmp: Path, train_args: list[str], nnodes: int = 2, nproc: int = 2, launcher_args=(), legacy=False,
              env=None, node_env=None) -> list[int]:
    """Start nnodes torchrun agents and wait for all of them; their exit statuses."""
    procs = start_nodes(tmp, nnodes, nproc, train_args, launcher_args, legacy, env, node_env)
    try:
        return wait_all(procs, JOB_TIMEOUT)
    finally:
        reap(*procs)


def alive(pids) -> list[int]:
    """The pids that still exist and are not zombies."""
    left = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.append(pid)
    return left


def start_ranks(tmp: Path, train_args: list[str], world: int = 1, env=None) -> list:
    """One "node" of `world` trainer processes started directly with the
    launcher's variables set (no torchrun agent: half the processes, and the
    ranks' own exit statuses); logs in tmp/rank<R>.log."""
    port = free_port()
    procs = []
    try:
        for r in range(world):
            e = dict(env or clean_env())
            e.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                     GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(start([sys.executable, str(TRAIN), *train_args], tmp / f"rank{r}.log", e))
    except BaseException:
        reap(*procs)
        raise
    return procs


def run_ranks(tmp: Path, train_args: list[str], world: int = 1, env=None) -> list[int]:
    """start_ranks and wait for them; their exit statuses."""
    procs = start_ranks(tmp, train_args, world, env)
    try:
        return wait_all(procs, JOB_TIMEOUT)
    finally:
        reap(*procs)


def run_direct(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TRAIN), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
