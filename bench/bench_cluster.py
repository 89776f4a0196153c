#!/usr/bin/env python3
"""Scale on the real controller: a rendered N-node × 8-NPU job on the local cluster, its pods
completed by the process kubelet without processes (--no-exec), through one failed attempt
and a whole-job restart.

For each N it prints the time from `kubectl create` to every training pod of the first
attempt Running (each is reported Running for 10 s, then Succeeded), the
Workflow object's size as the API server stores it (JSON, spec and status) at its largest,
whether Argo compressed `status.nodes`, how the run ended, and render.py's budget for the
same job (spec plus catalogue argoStatus per attempt): the guard must not be below what was
measured. Argo's pod creation is bounded by its Kubernetes client (workflow-controller
`--qps 20 --burst 30`, the defaults; no `resourceRateLimit`, so unlimited there).

Argo's full CRDs cap a DAG at 200 tasks (docs/values.md), so the bench replaces the
Workflow CRD with Argo's minimal one, as Argo's default install has it.

    python bench/bench_cluster.py [--nodes 256 1024] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from torchdag.catalog import catalog  # noqa: E402
from torchdag.cluster import procs  # noqa: E402
from torchdag.cluster.layout import Layout  # noqa: E402
from torchdag.cluster.up import Cluster  # noqa: E402
from torchdag.pipeline import run  # noqa: E402
from torchdag.render import check_documents, json_size, status_budget  # noqa: E402

KUBECTL = REPO / ".tools" / "bin" / "kubectl"


def kubectl(layout: Layout, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([str(KUBECTL), f"--kubeconfig={layout.kubeconfig}", *args], input=stdin,
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise SystemExit(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()}")
    return done.stdout


def minimal_workflow_crd(layout: Layout) -> None:
    module = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "github.com/argoproj/argo-workflows/v4"],
                            cwd=REPO / "tools" / "argo", capture_output=True, text=True, check=True).stdout.strip()
    crd = Path(module) / "manifests" / "base" / "crds" / "minimal" / "argoproj.io_workflows.yaml"
    kubectl(layout, "apply", "--server-side", "--force-conflicts", "-f", str(crd))


def values_file(folder: Path, n: int) -> Path:
    nodes = "".join(f"  - {{name: npu-{i:04d}, address: 198.18.{i // 250}.{i % 250 + 1}, nic: eth0, "
                    "accelerator: ascend910, devices: 8}\n" for i in range(n))
    path = folder / f"scale-{n}.yaml"
    path.write_text("name: scale\nimage: registry.example.com/train:1.0\nscript: /code/train.py\n"
                    "failurePolicy: {maxRestarts: 1, backoffSeconds: 1}\n"
                    f"workflow: {{podGC: ''}}\nnodes:\n{nodes}", encoding="utf-8")
    return path


def measure(layout: Layout, folder: Path, n: int) -> dict:
    values = values_file(folder, n)
    rendered = run(values)
    (document,) = check_documents(rendered.text)
    spec = json_size(document)
    attempts, budget = status_budget(rendered.plan)
    workflow = folder / f"scale-{n}-workflow.yaml"
    workflow.write_text(rendered.text, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "torchdag.cluster", "--dir", str(layout.root), "nodes", str(values)],
                   cwd=REPO, check=True, capture_output=True)
    start = time.monotonic()
    name = kubectl(layout, "create", "-f", str(workflow), "-o", "name").strip().split("/")[-1]
    largest, compressed, deleted, all_running, phase = 0, False, False, None, ""
    while time.monotonic() - start < 3600:
        wf = json.loads(kubectl(layout, "get", "workflow", name, "-o", "json"))
        largest = max(largest, len(json.dumps(wf, separators=(",", ":"))))
        status = wf.get("status") or {}
        compressed |= bool(status.get("compressedNodes"))
        phase = status.get("phase") or ""
        if phase in ("Succeeded", "Failed", "Error"):
            break
        pods = json.loads(kubectl(layout, "get", "pods", "-l", f"workflows.argoproj.io/workflow={name},"
                                  "torchdag.io/node-rank", "-o", "json"))["items"]
        first = [p for p in pods if f"{name}(0)." in p["metadata"]["annotations"].get(
            "workflows.argoproj.io/node-name", "")]
        running = [p for p in first if (p.get("status") or {}).get("phase") == "Running"]
        started = [p for p in first if (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")]
        if all_running is None and len(started) >= n:
            all_running = time.monotonic() - start
        if not deleted and running:
            # One failed attempt: a training pod deleted while it runs fails the DAG's first attempt.
            kubectl(layout, "delete", "pod", running[0]["metadata"]["name"], "--wait=false")
            deleted = True
        time.sleep(2)
    return {"nodes": n, "spec_bytes": spec, "per_node_bytes": round(spec / n), "attempts": attempts,
            "budget_bytes": spec + budget, "largest_bytes": largest, "compressed": compressed, "phase": phase,
            "create_to_all_started_s": round(all_running, 1) if all_running else None,
            "total_s": round(time.monotonic() - start, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--keep", help="cluster directory to use and keep (default: a temporary one, removed)")
    args = parser.parse_args()
    # A SIGTERM (a `timeout`) still takes the cluster down, through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    folder = Path(args.keep or tempfile.mkdtemp(prefix="torchdag-scale-"))
    layout = Layout.of(str(folder / "cluster"))
    cluster = Cluster(layout)
    cluster.up(say=lambda *a: None)
    try:
        minimal_workflow_crd(layout)
        cluster.kubelet(["--no-exec", "--no-exec-seconds", "10"], say=lambda *a: None)
        limit = catalog()["argoStatus"]["maxBytes"]
        for n in args.nodes:
            row = measure(layout, folder, n)
            row["within_guard"] = row["largest_bytes"] <= row["budget_bytes"]
            print(json.dumps(row), flush=True)
            print(f"{n} nodes x 8: spec {row['spec_bytes']} B ({row['per_node_bytes']} B/node); largest stored "
                  f"Workflow {row['largest_bytes']} B (compressed nodes: {row['compressed']}); guard budget "
                  f"{row['budget_bytes']} B of {limit} for {row['attempts']} attempts; all pods Running "
                  f"{row['create_to_all_running_s']} s after create; ended {row['phase']} in {row['total_s']} s",
                  flush=True)
    finally:
        procs.stop(layout, "kubelet", Path(sys.executable), grace=30)
        if not args.keep:
            cluster.down(say=lambda *a: None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
