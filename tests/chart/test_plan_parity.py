"""The chart's typed Plan (chart/templates/plan.yaml, torchdag.typedPlan in _plan_model.tpl)
equals `torchdag plan FILE --json` (torchdag/plan_model.py) field for field, JSON type
included (1 is not true, "" is not null, a missing key is not null), on every values file the
chart's parity tests cover and on every case of the feature matrix: the renderers agree on the
decisions, not only on the text they print. One helm run per file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from feature_matrix import CASES, outcome, values_file

from chart_helpers import PLAN_TEMPLATE, VALUES_FILES, chart_plan, helm_template, plan_json
from torchdag import pipeline
from torchdag.plan import make_plan


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("matrix"))


def differences(chart, python, path: str = "") -> list[str]:
    """Where two parsed JSON values differ, by path, with the JSON types compared too
    (Python's == takes True for 1 and 1.0 for 1)."""
    if type(chart) is not type(python):
        return [f"{path or '.'}: chart {json.dumps(chart)[:80]} ({type(chart).__name__}), "
                f"python {json.dumps(python)[:80]} ({type(python).__name__})"]
    if isinstance(chart, dict):
        out = [f"{path}.{key}: only in {'the chart' if key in chart else 'python'}"
               for key in sorted(set(chart) ^ set(python))]
        for key in sorted(set(chart) & set(python)):
            out += differences(chart[key], python[key], f"{path}.{key}")
        return out
    if isinstance(chart, list):
        if len(chart) != len(python):
            return [f"{path}: {len(chart)} items in the chart, {len(python)} in python"]
        return [line for at, (ours, theirs) in enumerate(zip(chart, python))
                for line in differences(ours, theirs, f"{path}[{at}]")]
    return [] if chart == python else [f"{path}: chart {json.dumps(chart)[:80]}, python {json.dumps(python)[:80]}"]


def assert_same_plan(helm: str, values: Path) -> None:
    result = chart_plan(helm, values)
    assert result.returncode == 0, f"helm template failed for {values}:\n{result.stderr}"
    # `torchdag plan --json`'s object (cli.plan_main), short of rendering the Workflow the file's other tests render
    python = json.loads(json.dumps(make_plan(pipeline.validate(pipeline.load(values))).typed.to_json()))
    found = differences(plan_json(result.stdout), python)
    assert not found, f"{values.name}: {len(found)} fields differ:\n" + "\n".join(found[:40])


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_charts_plan_is_torchdag_plan_json(helm, values):
    assert_same_plan(helm, values)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_charts_plan_is_torchdag_plan_json_across_the_feature_matrix(helm, case, folder):
    done, path = outcome(case, folder), values_file(case, folder)
    if done.text is not None:
        assert_same_plan(helm, path)
        return
    result = chart_plan(helm, path)  # no plan of a refused file either: the debug template validates first
    assert result.returncode != 0 and result.stdout == ""
    for field, message in done.refused:
        assert f"{field}: {message}" in result.stderr, result.stderr


# What the files above leave at one side of a null: nodes without a NIC or address, the
# timeouts and the Workflow's ttl unset (no deadline: Argo's cap bounds the waits), a set_env.sh
# turned off, the accelerator's resource renamed, no token automounted, a namespace, a working
# directory; the pod network by the older key, a gang queue left empty, runAsNonRoot false and
# no supplemental groups.
EDGES = {
    "nulls": """
name: edge-nulls
image: img:1
script: /w/train.py
workingDir: /w
namespace: team
nodeSelector: {pool: train}
tolerations: [{key: dedicated, operator: Equal, value: train, effect: NoSchedule}]
resourceNames: {ascend910: example.com/npu}
ascend: {setEnvScript: ""}
timeouts: {workflowDeadline: null, rendezvous: null, processGroup: null}
failurePolicy: {maxRestarts: 3, backoffSeconds: 700}
automountServiceAccountToken: false
executorServiceAccountName: argo-executor
imagePullSecrets: [registry-a, registry-b]
annotations: {example.com/owner: team-a}
workflow: {ttlSecondsAfterFinished: null, podGC: OnPodCompletion}
nodes:
  - {name: a, address: 10.0.0.1, accelerator: ascend910, devices: 2, labels: {team: x}}
  - {name: b, accelerator: ascend910, devices: 2}
""",
    "older-pod-key": """
name: edge-pod
image: img:1
script: /w/train.py
hostNetwork: false
podSecurity: baseline
securityContext: {runAsNonRoot: false, supplementalGroups: []}
scheduling: {gang: volcano, queue: "", schedulerName: my-volcano}
nodes:
  - {name: a, accelerator: cpu, resources: {requests: {cpu: 2}}}
  - {name: b, accelerator: cpu, nic: net1, master: true}
""",
}


@pytest.mark.parametrize("name", EDGES)
def test_the_charts_plan_is_torchdag_plan_json_at_the_nulls(helm, name, tmp_path):
    path = tmp_path / f"{name}.yaml"
    path.write_text(EDGES[name].lstrip(), encoding="utf-8")
    assert_same_plan(helm, path)


def test_the_plan_is_printed_only_when_asked_for(helm, repo):
    """Without its API version the debug template prints nothing: `helm template` prints, and
    `helm install` applies, only the real resources."""
    result = helm_template(helm, repo / "examples" / "cluster.yaml")
    assert result.returncode == 0, result.stderr
    assert PLAN_TEMPLATE not in result.stdout
    assert helm_template(helm, repo / "examples" / "cluster.yaml", "--show-only", PLAN_TEMPLATE).returncode != 0
