#!/usr/bin/env python3
"""What a real node costs against the process kubelet (docs/nodes.md): on a local cluster of
its own, the same rendered 2-node CPU job (torchdag's trainer, 20 steps, host network) run
`--runs` times on real nodes (the kubelet, containerd and runc; torchdag's image) and then on
the process kubelet (Node objects, the trainer from this checkout). Printed as one JSON row
per kind: the time to start its nodes (real: images ensured, the store copied, containerd and
the kubelet up to Ready; process: the Nodes registered), each run's time from `kubectl create`
to every training pod Running and to Succeeded, and the machine's load average meanwhile.

    python bench/bench_nodes.py [--runs 3] [--keep DIR]

Numbers, not pass/fail (`make bench`): the 2-core machine is shared, and the load average
says how much.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed.cluster.layout import Layout  # noqa: E402
from testbed.cluster.up import Cluster  # noqa: E402
from testbed.images.recipes import TORCHDAG_IMAGE  # noqa: E402
from testbed.node.nodes import NodeSpec, RealNodes  # noqa: E402

KUBECTL = REPO / ".tools" / "bin" / "kubectl"


def kubectl(layout: Layout, *args: str) -> str:
    done = subprocess.run([str(KUBECTL), f"--kubeconfig={layout.kubeconfig}", *args], capture_output=True, text=True,
                          timeout=120)
    if done.returncode:
        raise RuntimeError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()}")
    return done.stdout


def values(folder: Path, hosts: list[tuple[str, str, str]], run: int) -> Path:
    body = {"name": f"bench-{run}", "image": TORCHDAG_IMAGE, "script": "/opt/torchdag/trainer/train.py",
            "args": ["--type", "example", "--max-steps", "20", "--log-every", "10"], "port": 29600 + run,
            "workflow": {"podGC": ""},
            "nodes": [{"name": name, "address": address, "nic": nic, "devices": 1,
                       **({"master": True} if i == 0 else {})} for i, (name, address, nic) in enumerate(hosts)]}
    path = folder / f"values-{run}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def run_job(layout: Layout, folder: Path, hosts, run: int) -> dict:
    rendered = folder / f"workflow-{run}.yaml"
    subprocess.run([sys.executable, str(REPO / "render.py"), str(values(folder, hosts, run)), "-o", str(rendered)],
                   check=True, capture_output=True)
    started = time.monotonic()
    name = kubectl(layout, "create", "-f", str(rendered), "-o", "name").strip().split("/")[-1]
    running = None
    while True:
        wf = json.loads(kubectl(layout, "get", "workflow", name, "-o", "json"))
        pods = json.loads(kubectl(layout, "get", "pods", "-l", f"workflows.argoproj.io/workflow={name}",
                                  "-o", "json"))["items"]
        training = [p for p in pods if "torchdag.io/node-rank" in p["metadata"].get("labels", {})]
        if running is None and len(training) == len(hosts) and all(
                p["status"].get("phase") in ("Running", "Succeeded") for p in training):
            running = time.monotonic() - started
        phase = (wf.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Error"):
            return {"phase": phase, "create_to_running_s": round(running or 0, 1),
                    "create_to_end_s": round(time.monotonic() - started, 1)}
        if time.monotonic() - started > 900:
            return {"phase": "timed out", "create_to_running_s": running, "create_to_end_s": None}
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", help="the cluster's folder (default: a temporary one, removed)")
    args = parser.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench-nodes-"))
    layout = Layout.of(str(folder / "cluster"))
    cluster = Cluster(layout)
    rows = []
    try:
        cluster.up(say=lambda line: print(line, file=sys.stderr))
        load = []
        started = time.monotonic()
        real = RealNodes(layout, say=lambda line: print(line, file=sys.stderr))
        infos = real.start([NodeSpec("bench-a"), NodeSpec("bench-b")])
        real_start = time.monotonic() - started
        hosts = [(i.name, i.address, i.nic) for i in infos]
        runs = []
        for run in range(args.runs):
            runs.append(run_job(layout, folder, hosts, run))
            load.append(os.getloadavg()[0])
        rows.append({"nodes": "real (kubelet, containerd, runc)", "start_nodes_s": round(real_start, 1),
                     "runs": runs, "load_avg_1m": [round(v, 1) for v in load]})
        for info in infos:
            real.stop(info.name)
            kubectl(layout, "delete", "node", info.name, "--wait=false")

        process_hosts = [("bench-p-a", "198.18.0.1", "lo"), ("bench-p-b", "198.18.0.2", "lo")]
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "testbed.cluster", "--dir", str(layout.root), "register",
                        str(values(folder, process_hosts, 99))], check=True, capture_output=True, cwd=REPO)
        kubelet = subprocess.Popen([sys.executable, "-m", "testbed.kubelet", "--kubeconfig", str(layout.kubeconfig),
                                    "--nodes", "bench-p-a,bench-p-b", "--state-dir", str(folder / "kubelet")],
                                   cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        process_start = time.monotonic() - started
        load, runs = [], []
        try:
            for run in range(args.runs):
                runs.append(run_job(layout, folder, process_hosts, 10 + run))
                load.append(os.getloadavg()[0])
        finally:
            os.killpg(kubelet.pid, signal.SIGTERM)
            kubelet.wait(30)
        rows.append({"nodes": "process kubelet", "start_nodes_s": round(process_start, 1), "runs": runs,
                     "load_avg_1m": [round(v, 1) for v in load]})
    finally:
        cluster.down(say=lambda line: print(line, file=sys.stderr))
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
