#!/usr/bin/env python3
"""Re-record the fixtures here: a 2-node job on 127.0.0.1 (two torchrun "nodes", one
process each) with one fault injected by tests/diagnose_faults.py; each node's output with
a timestamp per line, as the API serves logs with timestamps=true.

    .venv/bin/python tests/diagnose_logs/record.py raise|kill|stop|port|nic [--port P]
"""

import argparse
import datetime
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAULTS = HERE.parent / "diagnose_faults.py"


def stamp(stream, out):
    for raw in iter(stream.readline, b""):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        out.write(f"{now} {raw.decode(errors='replace').rstrip()}\n")
        out.flush()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("fault", choices=("raise", "kill", "stop", "port", "nic"))
    p.add_argument("--port", type=int, default=29631)
    args = p.parse_args()
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
