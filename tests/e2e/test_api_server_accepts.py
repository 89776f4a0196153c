"""What torchdag accepts, Kubernetes and Argo accept (issue 18): random values files from the
chart-parity strategy that render.py accepts are sent to the local cluster's real API
server as a server-side dry run, the Workflow (Argo's full CRD schema) and every pod Argo
would create from it (Kubernetes' own validation and admission). Nothing is created.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from test_chart_parity import _QuotedDumper, values_strategy

from argo_helpers import task_pods
from torchdag import pipeline

# long: `make test-long` runs it (minutes of cluster jobs), outside make test's 25 minutes
pytestmark = [pytest.mark.go, pytest.mark.e2e, pytest.mark.long]


def ensure(cluster, kind: str, name: str, namespace: str | None = None, **extra) -> None:
    """Objects the pods name and a real cluster would have: admission refuses a pod whose
    namespace, ServiceAccount or PriorityClass does not exist, which is no fault of the values."""
    args = ["get", kind, name] + (["-n", namespace] if namespace else [])
    if cluster.kubectl(*args, check=False).returncode == 0:
        return
    body = {"apiVersion": extra.pop("apiVersion", "v1"), "kind": kind, "metadata": {"name": name}, **extra}
    if namespace:
        body["metadata"]["namespace"] = namespace
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(body))


def dry_run(cluster, obj: dict, namespace: str) -> str | None:
    done = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-o", "name", "-f", "-",
                           stdin=json.dumps(obj), check=False)
    return None if done.returncode == 0 else (done.stderr or done.stdout).strip()


# No shrinking: each example costs several round trips to the API server, and the failing
# values are printed whole.
@settings(max_examples=25, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                  HealthCheck.function_scoped_fixture])
@given(values=values_strategy())
def test_what_torchdag_accepts_the_api_server_accepts(local_cluster, values):
    given_text = yaml.dump(values, Dumper=_QuotedDumper, allow_unicode=True, width=2**20, sort_keys=False)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "values.yaml"
        path.write_text(given_text, encoding="utf-8")
        text = pipeline.run(path).text
    documents = [d for d in yaml.safe_load_all(text) if d]
    workflow = next(d for d in documents if d["kind"] in ("Workflow", "WorkflowTemplate"))
    namespace = workflow["metadata"].get("namespace") or "default"
    ensure(local_cluster, "Namespace", namespace)
    spec = workflow["spec"]
    refused = []
    for document in documents:
        problem = dry_run(local_cluster, document, namespace)
        if problem:
            refused.append(f"{document['kind']}: {problem}")
    for account in {spec.get("serviceAccountName"), spec.get("executor", {}).get("serviceAccountName")} - {None}:
        ensure(local_cluster, "ServiceAccount", account, namespace)
    if spec.get("podPriorityClassName"):
        ensure(local_cluster, "PriorityClass", spec["podPriorityClassName"], apiVersion="scheduling.k8s.io/v1",
               value=1000)
    for task, pod in task_pods(workflow).items():
        pod["metadata"]["name"] = f"dry-{task}"
        problem = dry_run(local_cluster, pod, namespace)
        if problem:
            refused.append(f"pod of {task}: {problem}")
    assert not refused, ("torchdag accepted values the API server refuses:\n" + "\n".join(refused)
                         + "\n--- values:\n" + given_text[:4000])


def test_the_full_crds_take_every_job_size_render_py_accepts(local_cluster, tmp_path):
    """The local cluster installs Argo's full CRDs, which cap a DAG at 200 tasks: render.py's
    Workflows of 198 (a task per node, the schedule watch and the helpers' ConfigMap), 200, 201, 1,024 and 4,096
    machines × 8 with a restart (loop tasks) are all taken by the API server; a flat DAG of 201 tasks is
    refused. From 1,024 machines node recovery's status needs the controller's offload (the size guard)."""
    from test_render_size import big_values

    def offload(n: int) -> str:
        return "workflow: {nodeStatusOffload: true}\n" if n >= 1024 else ""

    for n in (198, 200, 201, 1024, 4096):
        values = big_values(tmp_path / "v.yaml", n, "failurePolicy: {maxRestarts: 1}\n" + offload(n))
        document = next(d for d in yaml.safe_load_all(pipeline.run(values).text) if d)
        assert dry_run(local_cluster, document, "default") is None, n
        if n == 198:
            tasks = document["spec"]["templates"][0]["dag"]["tasks"]
            assert len(tasks) == 200 and "withItems" not in tasks[0]
            tasks.append(dict(tasks[0], name="node-198"))
            problem = dry_run(local_cluster, document, "default")
            assert "spec.templates[0].dag.tasks: Too many: 201: must have at most 200 items" in problem
