"""Rule workflow-size: what Argo keeps in one object is the spec *and* the status of every
attempt (workflow/packer); both renderers refuse a job whose status would not fit beside
its spec, say what to do, and count the spec alone when node status is offloaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import REPO
from torchdag.catalog import catalog
from torchdag.pipeline import build
from torchdag.problems import ValuesError
from torchdag.render import check_documents, json_size

sys.path.insert(0, str(REPO / "bench"))
from bench_status import compressed_status

LIMIT = 1048576  # MAX_WORKFLOW_SIZE's default in Argo v4.0.5 workflow/packer, written out here


def big_values(path, n: int, extra: str = ""):
    nodes = "".join(f"  - {{name: atlas-{i:04d}, address: 10.{i // 250}.{i % 250}.1, nic: enp189s0f0, "
                    "accelerator: ascend910, devices: 8}\n" for i in range(n))
    path.write_text(f"name: big\nimage: registry.example.com/train:1.0\nscript: /code/train.py\n{extra}nodes:\n{nodes}")
    return path


def helm_template(helm, path):
    return subprocess.run([helm, "template", "t", str(REPO / "chart"), "-f", str(path)], capture_output=True,
                          text=True, timeout=300)


def test_4096_nodes_of_8_fit_only_with_the_status_offloaded(helm, tmp_path):
    """The schema's largest job: its spec alone fits in one object, but not beside the
    status Argo writes for it, unless the controller offloads node status."""
    path = big_values(tmp_path / "big.yaml", 4096, "workflow: {nodeStatusOffload: true}\n")
    (document,) = check_documents(build(path))
    spec = json_size(document)
    assert 600_000 < spec < LIMIT
    assert helm_template(helm, path).returncode == 0
    big_values(path, 4096)
    with pytest.raises(ValuesError) as refused:
        build(path)
    line = str(refused.value)
    assert f"nodes: 4096 nodes make a Workflow of {spec} bytes (JSON), and Argo's status for 1 attempt(s) adds about" \
        in line
    assert "lower failurePolicy.maxRestarts, split the job, or, if the controller offloads node status to a " \
           "database, set workflow.nodeStatusOffload" in line
    # The chart's Workflow carries Helm's labels too: a few bytes more, counted the same way.
    result = helm_template(helm, path)
    assert result.returncode != 0, result.stdout[-300:]
    assert "nodes: 4096 nodes make a Workflow of " in result.stderr and "and Argo's status for 1 attempt(s) adds "\
        "about" in result.stderr and "set workflow.nodeStatusOffload" in result.stderr


def test_every_restart_attempt_is_counted_in_both_renderers(helm, tmp_path):
    """A job that fits with no restart is refused when each restart adds its set of nodes."""
    path = big_values(tmp_path / "v.yaml", 2000)
    build(path)
    assert helm_template(helm, path).returncode == 0
    big_values(path, 2000, "failurePolicy: {maxRestarts: 2}\n")
    with pytest.raises(ValuesError, match=r"status for 3 attempt\(s\) adds about \d+ bytes \(failurePolicy"
                                          r"\.maxRestarts 2\)"):
        build(path)
    result = helm_template(helm, path)
    assert result.returncode != 0 and "status for 3 attempt(s)" in result.stderr


def test_the_status_budget_covers_the_modelled_status():
    """catalog argoStatus.perPod stays above what bench/bench_status.py's model of Argo's
    compressed node status gives for a finished, restarted job."""
    budget = catalog()["argoStatus"]
    assert budget["maxBytes"] == LIMIT
    for n, attempts in ((64, 1), (512, 2)):
        pods = n + 2  # the training pods and the gang's two
        assert compressed_status(n, attempts) <= attempts * (budget["perAttempt"] + budget["perPod"] * pods)


def test_more_dag_tasks_than_argos_full_crds_take_is_warned(tmp_path):
    """Argo v4.0.5's full CRDs cap a DAG at 200 tasks; the minimal ones do not: a warning,
    held against the real API server in tests/test_api_server_accepts.py."""
    from torchdag.pipeline import run

    for n, warned in ((200, False), (201, True)):
        rendered = run(big_values(tmp_path / "v.yaml", n))
        lines = [w for w in rendered.warnings() if "Argo's full CRDs" in w]
        assert bool(lines) == warned, lines
    assert lines == [f"{tmp_path / 'v.yaml'}: nodes: 201 nodes make a DAG of 201 tasks; a cluster that installed "
                     "Argo's full CRDs (manifests/base/crds/full) refuses more than 200 ('spec.templates[0].dag.tasks: "
                     "Too many'); Argo's default minimal CRDs take it"]
