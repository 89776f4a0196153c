"""What bench_cluster.py's runs share: kubectl against the local cluster, the values file of an
N-machine job, the guard's verdict on it, and how a Workflow's size and its training pods read
(Argo's packed status, offloaded node status)."""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_status import go_gzip_size, hashed_hosts  # noqa: E402

from testbed.cluster import postgres  # noqa: E402
from testbed.cluster.layout import Layout  # noqa: E402
from torchdag.errors import ValuesError  # noqa: E402
from torchdag.pipeline import load, validate  # noqa: E402
from torchdag.plan import make_plan  # noqa: E402
from torchdag.render import render  # noqa: E402

KUBECTL = REPO / ".tools" / "bin" / "kubectl"


def kubectl(layout: Layout, *args: str, stdin: str | None = None, check: bool = True) -> str:
    for _ in range(5):  # a read the loaded API server timed out is asked again
        done = subprocess.run([str(KUBECTL), f"--kubeconfig={layout.kubeconfig}", *args], input=stdin,
                              capture_output=True, text=True, timeout=600)
        if not (done.returncode and args[0] == "get" and ("Timeout" in done.stderr or "timed out" in done.stderr
                                                         or "unable to return a response" in done.stderr)):
            break
        time.sleep(5)
    if done.returncode and check:
        raise SystemExit(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()}")
    return done.stdout


def minimal_workflow_crd(layout: Layout) -> None:
    """The variant: Argo's minimal Workflow CRD (no schema, no 200-item caps) in place of the full one."""
    module = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "github.com/argoproj/argo-workflows/v4"],
                            cwd=REPO / "tools" / "argo", capture_output=True, text=True, check=True).stdout.strip()
    crd = Path(module) / "manifests" / "base" / "crds" / "minimal" / "argoproj.io_workflows.yaml"
    kubectl(layout, "apply", "--server-side", "--force-conflicts", "-f", str(crd))


def host_names(n: int, length: int) -> list[str]:
    """n Kubernetes host names: npu-0000... (length 0), or names of exactly `length` characters drawn
    as a hash draws them (bench_status.hashed_hosts): long hashed cloud host names, the hardest for gzip."""
    return hashed_hosts(n, length) if length else [f"npu-{i:04d}" for i in range(n)]


def values_file(folder: Path, n: int, recovery: str = "job", max_restarts: int = 1, elastic: int = 0,
                host_length: int = 0, offload: bool = False) -> Path:
    hosts = host_names(n, host_length)
    nodes = "".join(f"  - {{name: {hosts[i]}, address: 198.18.{i // 250}.{i % 250 + 1}, nic: eth0, "
                    "accelerator: ascend910, devices: 8}\n" for i in range(n))
    path = folder / f"scale-{n}.yaml"
    # The helpers come with the image: under --no-exec the helpers' ConfigMap task would be a pod
    # held Running --hold seconds like any other, and every node waits for it.
    path.write_text("name: scale\nimage: registry.example.com/train:1.0\nscript: /code/train.py\n"
                    f"failurePolicy: {{maxRestarts: {max_restarts}, backoffSeconds: 1, recovery: {recovery}}}\n"
                    + (f"elastic: {{minNodes: {elastic}, rejoinSeconds: 60}}\n" if elastic else "")
                    + "agents: {fromWorkflow: false}\n"
                    f"workflow: {{podGC: '', nodeStatusOffload: {str(offload).lower()}}}\nnodes:\n{nodes}",
                    encoding="utf-8")
    return path


def status_nodes(status: dict) -> dict:
    """status.nodes, gunzipped from compressedNodes when Argo packed them."""
    if status.get("compressedNodes"):
        return json.loads(gzip.decompress(base64.b64decode(status["compressedNodes"])))
    return status.get("nodes") or {}


def packed_size(wf: dict) -> int:
    """The Workflow's JSON size with status.nodes as Argo packs them (workflow/packer:
    JSON, gzip at Go's default level, base64 in status.compressedNodes): what Argo holds
    against its 1 MiB limit once the plain form is over it. Argo measures the object its
    informer holds, managedFields included (read with --show-managed-fields): while the nodes
    are plain they list every node's fields; packed, one `f:compressedNodes`, as counted here."""
    status = dict(wf.get("status") or {})
    if status.get("nodes"):  # packed as Go's gzip packs it (bench_status.go_gzip_size): its length is what counts
        text = json.dumps(status.pop("nodes"), separators=(",", ":")).encode()
        status["compressedNodes"] = "x" * go_gzip_size(text)
    meta = dict(wf.get("metadata") or {})
    if meta.get("managedFields"):
        meta["managedFields"] = json.loads(json.dumps(meta["managedFields"]))
        for entry in meta["managedFields"]:
            owned = (entry.get("fieldsV1") or {}).get("f:status") or {}
            if owned.pop("f:nodes", None) is not None:
                owned["f:compressedNodes"] = {}
    return len(json.dumps(dict(wf, metadata=meta, status=status), separators=(",", ":")))


def guard(values: Path) -> tuple[str, object, str]:
    """render.py's verdict on the job, its plan and the Workflow's text: the text as render.py
    writes it when the guard lets it through, and the same text past the guard when not."""
    loaded = load(values)
    plan = make_plan(validate(loaded))
    try:
        return "fits", plan, render(plan, loaded.source)
    except ValuesError:
        return "refused", plan, render(plan, loaded.source, check_size=False)


def training_pods(layout: Layout, name: str) -> dict[str, tuple[str, str]]:
    """Each training pod's uid: (name, phase)."""
    text = kubectl(layout, "get", "pods", "-l", f"workflows.argoproj.io/workflow={name},torchdag.io/node-rank", "-o",
                   "jsonpath={range .items[*]}{.metadata.uid} {.metadata.name} {.status.phase}{\"\\n\"}{end}")
    return {uid: (pod, phase) for uid, pod, phase in (line.split() for line in text.splitlines() if line.strip())}


def ranked_training_pods(layout: Layout, name: str) -> dict[str, tuple[str, str, str]]:
    """Each training pod's uid: (name, phase, node rank)."""
    text = kubectl(layout, "get", "pods", "-l", f"workflows.argoproj.io/workflow={name},torchdag.io/node-rank", "-o",
                   "jsonpath={range .items[*]}{.metadata.uid} {.metadata.name} {.status.phase} "
                   "{.metadata.labels.torchdag\\.io/node-rank}{\"\\n\"}{end}")
    return {uid: (pod, phase, rank) for uid, pod, phase, rank in
            (line.split() for line in text.splitlines() if len(line.split()) == 4)}


def first_attempt_pods(layout: Layout, name: str) -> list[str]:
    """Pods of the DAG's first attempt (Argo's node names `NAME(0).…`): the training pods and
    the scheduling watch, which a real job's watch ends once every pod is placed but a
    --no-exec one holds Running, and the attempt (so the restart) waits for it."""
    text = kubectl(layout, "get", "pods", "-l", f"workflows.argoproj.io/workflow={name}", "-o",
                   "jsonpath={range .items[*]}{.metadata.name} "
                   "{.metadata.annotations.workflows\\.argoproj\\.io/node-name}{\"\\n\"}{end}")
    return [line.split()[0] for line in text.splitlines()
            if len(line.split()) == 2 and line.split()[1].startswith(f"{name}(0)")]


def running_in_status(wf: dict) -> int:
    """Training pods Argo's status holds as Running (pod nodes with a node-rank input): the
    status catches up with the pods a few seconds late, at 1,024 pods a minute."""
    return sum(1 for node in status_nodes(wf.get("status") or {}).values()
               if node.get("type") == "Pod" and node.get("phase") == "Running"
               and any(p.get("name") == "node-rank" for p in (node.get("inputs") or {}).get("parameters") or []))


def offloaded_nodes(layout: Layout, wf: dict) -> dict:
    """The node status Argo offloaded to the cluster's PostgreSQL (status.offloadNodeStatusVersion):
    the table's `nodes` for the Workflow's uid and that version."""
    version = (wf.get("status") or {}).get("offloadNodeStatusVersion")
    if not version:
        return {}
    port = json.loads(layout.state.read_text())["ports"]["postgres"]
    query = (f"select nodes from {postgres.TABLE} where uid = '{wf['metadata']['uid']}' "
             f"and version = '{version}'")
    done = subprocess.run([str(postgres.PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", postgres.ROLE,
                           "-d", postgres.DATABASE, "-At", "-c", query], capture_output=True, text=True, timeout=120,
                          env={"PGPASSWORD": postgres.password(layout), "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else {}


def held_size(layout: Layout, wf: dict, offloaded: dict | None = None) -> tuple[int, dict]:
    """What Argo would hold of the Workflow without a database (its JSON, status.nodes packed
    as workflow/packer packs them), and the nodes: read back from the database when offloaded
    (or `offloaded`, the nodes read back a moment ago: megabytes a read at thousands of machines)."""
    status = wf.get("status") or {}
    nodes = status_nodes(status) or (offloaded if offloaded is not None else offloaded_nodes(layout, wf))
    if status.get("offloadNodeStatusVersion") and nodes:
        status = {k: v for k, v in status.items() if k != "offloadNodeStatusVersion"}
        wf = dict(wf, status=dict(status, nodes=nodes))
    return packed_size(wf), nodes
