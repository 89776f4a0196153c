"""Issue 41's "20 of 20 runs": a user's script (tests/third_party/faulty_user.py) raises on rank 1
after 30 steps under the Workflow's record.py, while every other rank dies of the lost peer,
most often in the same second. Real torchrun processes on 127.0.0.1, one per node (2 nodes x 2
processes), each node's output stamped line by line as a kubelet's CRI log stamps it; diagnose
reads the logs as it reads the pods'. Prints in how many runs it named rank 1, its node and its
exception with the frame that raised (a stress target, not a test: about 20-40 s a run here).
The e2e tier runs the same case once on the local cluster (tests/e2e/test_diagnose_records_e2e.py)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from torchdag.diagnose import core  # noqa: E402

HOSTS = ("host-a", "host-b", "host-c", "host-d")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stamped(stream, out: list[str]) -> None:
    for line in iter(stream.readline, ""):
        out.append(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%dT%H:%M:%S.%f}Z {line.rstrip()}")


def one_run(nodes: int, nproc: int, timeout: float) -> tuple[dict, list[dict], dict[str, str]]:
    port = free_port()
    env = {**os.environ, "FAULT": "raise", "FAULT_RANK": "1", "FAULT_STEP": "30", "OMP_NUM_THREADS": "1",
           "TORCHDAG_PG_TIMEOUT": "60"}
    procs, logs, readers = [], [], []
    for node in range(nodes):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(node),
               "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1", "--master-port", str(port),
               str(REPO / "torchdag" / "agents" / "record.py"), str(REPO / "tests" / "third_party" / "faulty_user.py")]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=stamped, args=(proc.stdout, lines), daemon=True)
        reader.start()
        procs.append(proc), logs.append(lines), readers.append(reader)
    pods = []
    for node, proc in enumerate(procs):
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        readers[node].join(10)
        finished = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        pods.append({"metadata": {"name": f"job-node-{node}", "labels": {core.RANK_LABEL: str(node)},
                                  "creationTimestamp": finished},
                     "spec": {"nodeName": HOSTS[node]},
                     "status": {"phase": "Failed", "containerStatuses": [
                         {"name": "main", "state": {"terminated": {"exitCode": code, "reason": "Error",
                                                                   "finishedAt": finished}}}]}})
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed"}}
    return workflow, pods, {f"job-node-{n}": "\n".join(lines) + "\n" for n, lines in enumerate(logs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=180, help="seconds a run may take")
    ap.add_argument("--keep", type=Path, help="a folder for the logs of runs that named another rank")
    args = ap.parse_args()
    host = HOSTS[1 // args.nproc]
    named, same_second, took = 0, 0, []
    for run in range(args.runs):
        began = time.monotonic()
        workflow, pods, texts = one_run(args.nodes, args.nproc, args.timeout)
        result = core.diagnose(workflow, core.build_views(workflow, pods, [], texts))
        took.append(time.monotonic() - began)
        first = result.first
        ok = (first is not None and first.process_rank == 1 and first.pod.host == host
              and first.signature == "python-exception"
              and first.evidence[-1].startswith("ValueError: bad batch at step 30 on rank 1")
              and any("in check_batch" in line for line in first.evidence))
        lost = [f.time for f in result.others if f.signature == "peer-lost" and f.time]
        tie = bool(first and first.time and lost and min(lost).replace(microsecond=0) == first.time.replace(
            microsecond=0))
        named += ok
        same_second += tie
        line = next((text for text in core.report_lines("job", result) if text.startswith("first failure")),
                    "(nothing named)")
        print(f"run {run + 1:>2}: {'ok ' if ok else 'BAD'} {took[-1]:5.1f} s  "
              f"{'lost peer in the same second' if tie else 'lost peer later':<29} {line}", flush=True)
        if not ok and args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for name, text in texts.items():
                (args.keep / f"run{run + 1}-{name}.log").write_text(text)
    print(f"diagnose named rank 1 ({host}), its exception and frame in {named} of {args.runs} runs "
          f"({same_second} with a lost peer in the same second; {sum(took) / len(took):.0f} s a run)")
    return 0 if named == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
