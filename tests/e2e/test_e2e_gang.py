"""The gang watch under the real controller (issue 17, point 3): a gang that cannot be placed
(a host with fewer NPUs than its task asks) ends the Workflow Failed soon after
`scheduling.timeout`, the watch naming the pod and the real scheduler's reason, and leaves
no pod of it Pending or Running. The hosts are real Ascend 310P nodes whose device plugin
offers 4 and 2 NPUs. The scheduler name `volcano` is served by the stand-in kube-scheduler
profile of the local cluster (docs/e2e.md): it places pods one by one, which is what the
watch must catch."""

from __future__ import annotations

import re
import time

import pytest

# long: real nodes (their kubelets and containerds run beside every later test of the worker);
# `make test-long` runs it, outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.e2e, pytest.mark.long]
GANG_TIMEOUT = 30


def test_an_unplaceable_gang_fails_the_workflow_naming_the_pod_and_the_reason(job):
    job.use("a310p-4", "a310p-2")  # the second host has 2 NPUs where its task asks for 4
    nodes = [{"accelerator": "ascend310p", "devices": 4, "master": True}, {"accelerator": "ascend310p", "devices": 4}]
    # No CANN here: no driver files to mount from the host, no set_env.sh; the first node's
    # torchrun waits at its rendezvous for the second, which is never placed.
    gang = (f"scheduling: {{gang: volcano, timeout: {GANG_TIMEOUT}}}\nbackend: gloo\n"
            "ascend: {mountDriver: false, setEnvScript: ''}\n")
    values = job.values(nodes, ["--type", "example", "--max-steps", "100000"], extra=gang)
    started = time.monotonic()
    name = job.submit(job.render(values))
    wf = job.wait_finished(name, timeout=GANG_TIMEOUT + 150)
    took = time.monotonic() - started
    assert wf["status"]["phase"] == "Failed", job.explain(name)
    assert took < GANG_TIMEOUT + 150
    watch = next(n for n in wf["status"]["nodes"].values() if n["displayName"] == "gang-watch")
    # Argo's words for the watch's exit (docs/gang.md): its termination message, or the
    # shutdown's when the controller acted on the stop before it saw the watch's pod end.
    reason = f"gang not placed within {GANG_TIMEOUT} s: 1/2 pods scheduled; node-rank 1 on host a310p-2 (pod "
    message = watch.get("message", "")
    assert message.startswith(f"main: Error (exit code 1): {reason}") or \
        message == "workflow shutdown with strategy:  Terminate", message
    watch_pod = next(p for p in job.pods(name) if p["metadata"]["labels"].get("torchdag.io/role") == "gang-watch")
    log = job.log(watch_pod)
    assert reason in log, log
    # Argo deleted the unplaced (Pending) pod when it stopped the job: the log names it.
    assert re.search(rf"node-rank 1 on host a310p-2 \(pod {re.escape(name)}-\S+\): Unschedulable: ", log), log
    assert "Insufficient huawei.com/Ascend310P" in log, log
    assert f"stopped workflow {name}: gang not placed within {GANG_TIMEOUT} s; podgroups {name} deleted" in log, log
    assert job.cluster.kubectl("get", "podgroups.scheduling.volcano.sh", name, "-n", job.namespace,
                               check=False).returncode != 0, "the PodGroup outlived the stopped job"

    def settled():
        pods = job.pods(name)
        return all(p["status"].get("phase") not in ("Pending", "Running") for p in pods) or None

    job.cluster.wait_for("no pod of the gang Pending or Running", settled, timeout=60)
