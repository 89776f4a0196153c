#!/usr/bin/env python3
"""Re-record the fixtures here: a 2-node job on 127.0.0.1 (two torchrun "nodes", one
process each) with one fault injected by diagnose_faults.py (here); each node's output with
a timestamp per line, as the API serves logs with timestamps=true.

    .venv/bin/python tests/diagnose_logs/record.py raise|kill|stop|port|nic [--port P]

The user-* faults run a user's own script (tests/third_party/faulty_user.py) under the
Workflow's runner (torchdag/agents/record.py, which records every rank's collectives), as
`nodes` torchrun "nodes" of `nproc` processes: user-raise (rank 1 raises; 2 x 2), user-raise4
(4 x 1), user-stop (rank 3 SIGSTOPs itself; kept past the process group's timeout), user-loop
(rank 2 spins in Python), user-slow (node 1's processes under a CPU quota of 100m, through
the process kubelet's cgroup code; 3 x 1; windows of 10 s) and user-even (the same job
unthrottled).
"""

import argparse
import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # testbed.kubelet.cgroups
HERE = Path(__file__).resolve().parent
FAULTS = HERE / "diagnose_faults.py"
REPO = HERE.parents[1]
USER = HERE.parent / "third_party" / "faulty_user.py"
RUNNER = REPO / "torchdag" / "agents" / "record.py"
# fault: (nodes, processes per node, env, seconds kept, the node throttled)
USER_FAULTS = {
    "user-raise": (2, 2, {"FAULT": "raise", "FAULT_RANK": "1", "FAULT_STEP": "30"}, 40, None),
    "user-raise4": (4, 1, {"FAULT": "raise", "FAULT_RANK": "1", "FAULT_STEP": "30"}, 40, None),
    "user-stop": (2, 2, {"FAULT": "stop", "FAULT_RANK": "3", "FAULT_STEP": "30", "TORCHDAG_PG_TIMEOUT": "40"}, 90,
                  None),
    "user-loop": (2, 2, {"FAULT": "loop", "FAULT_RANK": "2", "FAULT_STEP": "30"}, 45, None),
    "user-slow": (3, 1, {"STEPS": "100000", "WORK": "800", "TORCHDAG_RECORD_WINDOW": "10"}, 100, 1),
    "user-even": (3, 1, {"STEPS": "100000", "WORK": "800", "TORCHDAG_RECORD_WINDOW": "10"}, 100, None),
}


def stamp(stream, out):
    for raw in iter(stream.readline, b""):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            out.write(f"{now} {raw.decode(errors='replace').rstrip()}\n")
            out.flush()
        except ValueError:  # closed: the run is over
            return


def descendants(pid: int) -> list[int]:
    """Every process below pid (torchrun's workers run in sessions of their own)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        out += children
        frontier = children
    return out


def record_user(fault: str, port: int) -> int:
    from testbed.kubelet.cgroups import CpuCgroup

    nodes, nproc, extra, keep, throttled = USER_FAULTS[fault]
    procs, threads, files, cgroup = [], [], [], None
    for node in range(nodes):
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", TORCHDAG_BACKEND="gloo", **extra)
        env.pop("TORCHDAG_RECORD", None)
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}", f"--node_rank={node}",
               f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1", f"--master_port={port}", "--max_restarts=0",
               "--rdzv_conf=timeout=30", str(RUNNER), str(USER)]
        if node == throttled:
            notes: list[str] = []
            cgroup = CpuCgroup.for_container(f"fixture{os.getpid()}", "main", "100m", notes)
            print(*notes)
            cmd = cgroup.wrap(cmd) if cgroup else cmd
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(REPO))
        out = open(HERE / f"{fault}-node{node}.log", "w")
        files.append(out)
        thread = threading.Thread(target=stamp, args=(proc.stdout, out), daemon=True)
        thread.start()
        procs.append(proc)
        threads.append(thread)
    deadline = time.monotonic() + keep
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    for proc in procs:
        for pid in descendants(proc.pid) + [proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
    for thread in threads:
        thread.join(2)
    for f in files:
        f.close()
    if cgroup is not None:
        cgroup.remove()
    print([p.returncode for p in procs])
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("fault", choices=("raise", "kill", "stop", "port", "nic", *USER_FAULTS))
    p.add_argument("--port", type=int, default=29631)
    args = p.parse_args()
    if args.fault in USER_FAULTS:
        return record_user(args.fault, args.port)
    held = None
    if args.fault == "port":  # something else listens on the master port
        held = socket.socket()
        held.bind(("127.0.0.1", args.port))
        held.listen()
    procs, threads, files = [], [], []
    for node in (0, 1):
        env = dict(os.environ, TORCHDAG_PG_TIMEOUT="8", TORCHDAG_STALL_REPORT="2", GLOO_SOCKET_IFNAME="lo",
                   TORCHDAG_FAULT={"raise": "raise", "kill": "kill", "stop": "stop"}.get(args.fault, ""),
                   TORCHDAG_FAULT_RANK="1", TORCHDAG_FAULT_STEP="5", OMP_NUM_THREADS="1")
        if args.fault == "nic" and node == 1:
            env["GLOO_SOCKET_IFNAME"] = "ens9"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node}",
               "--nproc_per_node=1", "--master_addr=127.0.0.1", f"--master_port={args.port}", "--max_restarts=0",
               "--rdzv_conf=timeout=20", str(FAULTS), "--max-steps", "400", "--log-every", "5"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        out = open(HERE / f"{args.fault}-node{node}.log", "w")
        files.append(out)
        thread = threading.Thread(target=stamp, args=(proc.stdout, out), daemon=True)
        thread.start()
        procs.append(proc)
        threads.append(thread)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    for thread in threads:
        thread.join(2)
    for f in files:
        f.close()
    if held:
        held.close()
    print([p.returncode for p in procs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
