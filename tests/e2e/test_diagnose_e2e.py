"""`torchdag diagnose`, `status` and `logs` against the local cluster (issue 28's acceptance):
faults injected into 2-node jobs on real nodes (the kubelet, containerd and runc) under Argo's
real controller (tests/diagnose_logs/diagnose_faults.py, from the test's folder mounted into
torchdag's image as a user's shared folder would be: a raise after N steps, a SIGKILL, a SIGSTOP
hang; the master port taken by another process on its host; a NIC that does not exist), a job
whose second host matches no Node, `kubectl logs` through the kubelet, and bad input. One
cluster and two hosts: the hang and the unscheduled job first, then the four faults at once."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime

import pytest
import yaml
from e2e_helpers import MAX_WORKFLOW_SIZE, grant, nodes_of, padded, rank_of
from realnodes_helpers import CPU_NODES, TORCHDAG_IMAGE

from helpers import REPO, free_port

# long: `make test-long` runs it (six minutes of cluster jobs on real nodes), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.torch, pytest.mark.e2e, pytest.mark.long]
# The faults' script, at the path where it finds trainer/ in torchdag's image (it imports it):
# the test's copy of tests/diagnose_logs/ is mounted there.
FAULTS = "/opt/torchdag/tests/diagnose_logs/diagnose_faults.py"
SCHEDULE_TIMEOUT = 60
WATCH_POLL = 5  # the watch's default --poll
# The unscheduled job's Workflow is padded to leave this many bytes under Argo's
# MAX_WORKFLOW_SIZE for what the API server and the controller add (metadata, managedFields,
# status): more than they take with the nodes packed, less than with the nodes as they are,
# so Argo stores them in status.compressedNodes, as it does a 1,000-machine job's. Measured
# here (2026-12-06): 3,551 bytes with them packed (1,485 of status, 1,453 of managedFields),
# 5,422 as they are (2,943 of nodes instead of 1,072 packed).
STATUS_ROOM = 4500


def values_for(job, hosts: list, fault: str, port: int, extra: dict | None = None) -> dict:
    """The fault's job on `hosts` (real nodes, or a name that matches no Node)."""
    nodes = []
    for i, host in enumerate(hosts):
        node = {"name": getattr(host, "name", host), "devices": 1, **({"master": True} if i == 0 else {})}
        if hasattr(host, "address"):  # the host network: the node's address and NIC are its host's
            node.update(address=host.address, nic=host.nic)
        nodes.append(node)
    return {"name": f"diag-{fault}", "namespace": job.namespace, "image": TORCHDAG_IMAGE,
            "script": FAULTS, "args": ["--type", "example", "--max-steps", "400", "--log-every", "5"],
            "port": port, "env": {"TORCHDAG_FAULT": fault, "TORCHDAG_FAULT_RANK": "1", "TORCHDAG_FAULT_STEP": "5",
                                  "TORCHDAG_STALL_REPORT": "2"},
            # the port job's rank 1 is refused until its rendezvous timeout: 20 s, not a minute of TCPStore retries
            "timeouts": {"rendezvous": 20 if fault == "port" else 60, "processGroup": 40 if fault == "stop" else 15,
                         "workflowDeadline": 600},
            "workflow": {"podGC": ""},  # the pods (and their logs) stay until the test's namespace goes
            "volumes": [{"name": "faults", "mountPath": os.path.dirname(FAULTS),
                         "hostPath": {"path": str(job.dir / "faults"), "type": "Directory"}}],
            "nodes": nodes, **(extra or {})}


def submit(job, values: dict, size: int | None = None) -> str:
    """Render and create; `size`: the Workflow padded to that many bytes of JSON (e2e_helpers.padded)."""
    path = job.dir / f"{values['name']}.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    grant(job.cluster, job.namespace, path)  # the Roles the docs tell the user to apply
    out = job.dir / f"{values['name']}-workflow.yaml"
    done = subprocess.run([sys.executable, str(REPO / "render.py"), str(path), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if size:
        workflow = next(d for d in yaml.safe_load_all(out.read_text()) if d)
        out = job.dir / f"{values['name']}-padded.json"
        out.write_text(json.dumps(padded(workflow, size)))
    return job.cluster.kubectl("create", "-f", str(out), "-o", "name").stdout.strip().split("/")[-1]


def torchdag(job, *args: str, namespace: str | None = None,
             kubeconfig: str | None = None) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "torchdag", *args, "-n", namespace or job.namespace,
                           "--kubeconfig", kubeconfig or str(job.cluster.kubeconfig)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    return done, time.monotonic() - started


def diagnosis(job, name: str) -> dict:
    # How long diagnose takes is a figure, not a check (it once took 29 s on 2 cores at load 15):
    # the 60-s timeout only catches a hang.
    done, _ = torchdag(job, "diagnose", name, "--json")
    assert done.returncode in (0, 1, 2), done.stderr
    return dict(json.loads(done.stdout), exit=done.returncode)


def test_diagnose_status_and_logs_name_the_failed_rank_its_cause_and_fix(job):
    a, b = job.use(*CPU_NODES[:2])
    (job.dir / "faults").mkdir()
    shutil.copy(REPO / "tests" / "diagnose_logs" / "diagnose_faults.py", job.dir / "faults")
    taken_port = free_port()
    holder = socket.socket()
    # Another process on the master's host holds the port, bound, not listening: the master's
    # bind fails (EADDRINUSE) and rank 1's connects are refused until its rendezvous timeout (a
    # listening holder would accept rank 1 and hold it past every timeout). The nodes share
    # this machine's network namespace: the host network's ports are this machine's.
    holder.bind(("0.0.0.0", taken_port))
    # The hang first, with only the unscheduled job beside it: diagnose's 10 s holds on a loaded
    # machine only while four other jobs are not starting torch at the same moment.
    names = {"stop": submit(job, values_for(job, [a, b], "stop", free_port()))}
    started = time.monotonic()
    names["unscheduled"] = submit(job, values_for(job, [a, "no-such-host"], "none", free_port(), {
        "scheduling": {"timeout": SCHEDULE_TIMEOUT},
        "timeouts": {"rendezvous": 600, "processGroup": 15, "workflowDeadline": 600}}),
        size=MAX_WORKFLOW_SIZE - STATUS_ROOM)
    try:
        # the hang: named while rank 0 waits in a collective, and again after its timeout
        stop = names["stop"]

        def waiting():  # rank 0 blocked after step 5 (rank 1 stopped before step 6) for over 6 s
            pods = {rank_of(p): p for p in job.pods(stop)}
            return 0 in pods and job.log(pods[0]).count("(step 5/400): waiting") >= 5

        job.cluster.wait_for("rank 0 waiting for the stopped rank", waiting, timeout=240, every=1)
        live = diagnosis(job, stop)
        first = live["first"] or {}
        assert (live["exit"], first.get("signature"), first.get("rank"), first.get("host")) == \
            (1, "hang", 1, b.name), json.dumps(live, indent=1)
        job.cluster.wait_for("rank 0's collective timeout", lambda: job.pods(stop) and "Timed out waiting" in
                             job.log({r: p for r, p in ((rank_of(p), p) for p in job.pods(stop))}[0]),
                             timeout=120, every=1)
        after = diagnosis(job, stop)
        first = after["first"] or {}
        assert (after["exit"], first.get("signature"), first.get("rank")) == (1, "hang", 1), json.dumps(after, indent=1)

        names.update({fault: submit(job, values_for(job, [a, b], fault, free_port()))
                      for fault in ("raise", "kill", "nic")})
        names["port"] = submit(job, values_for(job, [a, b], "port", taken_port))
        expected = {"raise": (1, b.name, "python-exception", "injected failure at step 5"),
                    "kill": (1, b.name, "worker-killed", "SIGKILL"),
                    "nic": (1, b.name, "missing-nic", "ens9"),
                    "port": (0, a.name, "address-in-use", "EADDRINUSE")}
        for fault in expected:  # all ended first: diagnose timed while the other faults still ran took 14.6 s
            wf = job.wait_finished(names[fault], timeout=240)
            assert wf["status"]["phase"] == "Failed", job.explain(names[fault])
        for fault, (rank, host, signature, words) in expected.items():
            result = diagnosis(job, names[fault])
            first = result["first"]
            assert (result["exit"], first["rank"], first["host"], first["signature"]) == (1, rank, host, signature), \
                json.dumps(result, indent=1)
            assert words in first["cause"] + " ".join(first["evidence"]) and first["fix"], first

        # kubectl logs through the node's kubelet; status; logs --rank 1
        raised = names["raise"]
        pod0 = next(p for p in job.pods(raised) if rank_of(p) == 0)
        kubectl = job.cluster.kubectl("logs", "-n", job.namespace, pod0["metadata"]["name"], "-c", "main")
        assert "[trainer] step 5/400" in kubectl.stdout, kubectl.stdout[-3000:]
        status, _ = torchdag(job, "status", raised)
        assert status.returncode == 0, status.stderr
        rows = status.stdout.splitlines()
        assert rows[0].startswith(f"workflow {raised}: Failed") and rows[1].split()[:2] == ["RANK", "HOST"]
        ranks = {row.split()[0]: row for row in rows[2:]}
        assert f" {a.name} " in ranks["0"] and "Failed (exit 1" in ranks["0"] and "/400" in ranks["0"], status.stdout
        assert f" {b.name} " in ranks["1"] and "Failed (exit 1" in ranks["1"] and "/400" in ranks["1"], status.stdout
        logs, _ = torchdag(job, "logs", raised, "--rank", "1")
        lines = logs.stdout.splitlines()
        assert logs.returncode == 0 and lines and all(line.startswith(f"[rank 1 {b.name}] ") for line in lines)
        assert f"[rank 1 {b.name}] RuntimeError: injected failure at step 5" in lines

        # a host that matches no Node: stopped within the timeout and one watch interval
        wf = job.wait_finished(names["unscheduled"], timeout=SCHEDULE_TIMEOUT + 120)
        took = time.monotonic() - started
        watch = next(n for n in nodes_of(wf).values() if n.get("displayName") == "schedule-watch")
        # The watch counts from its own start and ends once it has stopped the job; Argo then
        # takes what the pods take to stop (real containers: 89 s to the Workflow's end once).
        watched = (datetime.fromisoformat(watch["finishedAt"].replace("Z", "+00:00"))
                   - datetime.fromisoformat(watch["startedAt"].replace("Z", "+00:00"))).total_seconds()
        assert wf["status"]["phase"] == "Failed" and watched < SCHEDULE_TIMEOUT + WATCH_POLL + 20, (
            watched, took, wf["status"])
        print(f"the unscheduled job: its watch stopped it {watched:.0f} s after it started; "
              f"the Workflow ended {took:.0f} s after it was created")
        result = diagnosis(job, names["unscheduled"])
        assert result["exit"] == 1
        assert (result["first"]["rank"], result["first"]["host"]) == (1, "no-such-host"), json.dumps(result, indent=1)
        assert result["first"]["signature"] in ("no-such-host", "never-scheduled"), result["first"]
        # Its nodes are packed (status.compressedNodes), and rank 1's pod is gone (Argo deleted it
        # Pending when the watch stopped the job): status reads rank 1 from the packed nodes
        assert wf["status"].get("compressedNodes") and not wf["status"].get("nodes"), sorted(wf["status"])
        status, _ = torchdag(job, "status", names["unscheduled"])
        ranks = {row.split()[0]: row for row in status.stdout.splitlines()[2:]}
        assert status.returncode == 0 and {"0", "1"} <= set(ranks) and " no-such-host " in ranks["1"], status
    finally:
        holder.close()
        job.cluster.kubectl("patch", "workflow", names.get("stop", "none"), "-n", job.namespace, "--type", "merge",
                            "-p", '{"spec":{"shutdown":"Terminate"}}', check=False)

    # bad input: one line and exit 2, never a traceback: an unknown Workflow; a namespace the
    # caller may not read (a ServiceAccount of the test's namespace asking about `default`)
    job.cluster.kubectl("create", "serviceaccount", "viewer", "-n", job.namespace)
    token = job.cluster.kubectl("create", "token", "viewer", "-n", job.namespace).stdout.strip()
    admin = yaml.safe_load(job.cluster.kubeconfig.read_text())
    viewer = dict(admin, users=[{"name": "viewer", "user": {"token": token}}],
                  contexts=[{"name": "viewer", "context": {"cluster": admin["clusters"][0]["name"], "user": "viewer"}}],
                  **{"current-context": "viewer"})
    viewer_config = job.dir / "viewer.kubeconfig"
    viewer_config.write_text(yaml.safe_dump(viewer))
    for args, namespace, config, words in (
            (["diagnose", "no-such-workflow"], None, None, "no Workflow and no job 'no-such-workflow'"),
            (["status", raised], "default", str(viewer_config), "forbidden: cannot read workflows.argoproj.io in "
                                                                "namespace 'default'")):
        done, _ = torchdag(job, *args, namespace=namespace, kubeconfig=config)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done
        assert words in done.stderr, done.stderr

    # a NAME as a user means it: the job's name is its newest Workflow (said on stderr); @latest;
    # an empty one is refused before any request
    done, _ = torchdag(job, "diagnose", "diag-raise", "--json")
    assert json.loads(done.stdout)["workflow"] == raised, done.stderr
    assert done.stderr == f"torchdag diagnose: job diag-raise: its newest Workflow is {raised}\n"
    done, _ = torchdag(job, "status", "@latest")
    assert done.returncode == 0 and done.stderr.startswith("torchdag status: @latest is "), done.stderr
    assert done.stderr.split()[4].rstrip(",") in names.values(), done.stderr
    done, _ = torchdag(job, "diagnose", "")
    assert done.returncode == 2 and "argument NAME: is empty" in done.stderr

    # kubeconfigs as kubectl reads them: KUBECONFIG=a:b whose current context b defines; an exec
    # credential plugin (here it prints the viewer's token: the API server's 403 for the
    # namespace default shows the token was the plugin's); a plugin that is not installed
    elsewhere = job.dir / "a.kubeconfig"
    elsewhere.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": admin["current-context"],
        "clusters": [{"name": "unreachable", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "nobody", "user": {"token": "x"}}],
        "contexts": [{"name": "elsewhere", "context": {"cluster": "unreachable", "user": "nobody"}}]}))
    merged = subprocess.run([sys.executable, "-m", "torchdag", "status", raised, "-n", job.namespace], cwd=REPO,
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "KUBECONFIG": f"{elsewhere}:{job.cluster.kubeconfig}"})
    assert merged.returncode == 0 and merged.stdout.startswith(f"workflow {raised}: Failed"), merged.stderr
    plugin = job.dir / "viewer-token"
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": token}}
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    for command, words in ((str(plugin), "forbidden: cannot read workflows.argoproj.io in namespace 'default'"),
                           ("kubelogin-not-installed", "its exec command 'kubelogin-not-installed' is not installed")):
        execs = job.dir / "exec.kubeconfig"
        execs.write_text(yaml.safe_dump(dict(viewer, users=[{"name": "viewer", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": command}}}])))
        done, _ = torchdag(job, "status", raised, namespace="default", kubeconfig=str(execs))
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and words in done.stderr, done.stderr
