"""The rendered pods against Kubernetes' own Pod Security admission checks
(k8s.io/pod-security-admission, run offline by `.tools/bin/podsecurity`, tools/podsecurity):
pod-network jobs are admitted at the level they name, host-network jobs are refused with
Kubernetes' own message. The pods are what each DAG task becomes (tests/argo_helpers.py:
the main container; Argo's init and wait containers are the controller's configuration,
docs/network.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import network_strategy
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from test_chart_parity import _QuotedDumper, values_strategy

from argo_helpers import task_pods
from helpers import REPO
from torchdag import pipeline

pytestmark = pytest.mark.go  # a Go-built tool

CASES = REPO / "tests" / "cases"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def podsecurity() -> str:
    for candidate in (os.environ.get("PODSECURITY"), str(REPO / ".tools" / "bin" / "podsecurity")):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("podsecurity is not built: run the tests through `make test` (or `make go-tools`)")


def verdicts(tool: str, level: str, text: str) -> dict[str, dict]:
    """Each DAG task's pod as Kubernetes' admission judges it at `level`."""
    doc = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") in ("Workflow", "WorkflowTemplate"))
    pods = task_pods(doc)
    done = subprocess.run([tool], input=json.dumps({"level": level, "pods": list(pods.values())}),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    return dict(zip(pods, results))


@pytest.mark.parametrize("case, level", [("pod-network", "baseline"), ("pod-mixed-restricted", "restricted"),
                                         ("pod-mixed-restricted", "baseline")])
def test_pod_network_jobs_are_admitted_at_their_level(podsecurity, case, level):
    judged = verdicts(podsecurity, level, pipeline.run(CASES / f"{case}.yaml").text)
    assert judged and all(v["allowed"] for v in judged.values()), judged


def test_restricted_needs_the_option(podsecurity):
    """pod-network.yaml names baseline: restricted refuses it, for what podSecurity: restricted adds."""
    judged = verdicts(podsecurity, "restricted", pipeline.run(CASES / "pod-network.yaml").text)
    for verdict in judged.values():
        assert not verdict["allowed"]
        assert verdict["message"].startswith('violates PodSecurity "restricted:latest": ')
        assert "runAsNonRoot != true" in verdict["message"]


@pytest.mark.parametrize("values", EXAMPLES, ids=lambda p: p.name)
def test_host_network_jobs_are_refused_by_baseline_in_kubernetes_words(podsecurity, values):
    judged = verdicts(podsecurity, "baseline", pipeline.run(values).text)
    assert judged
    for verdict in judged.values():
        assert not verdict["allowed"]
        assert verdict["message"].startswith('violates PodSecurity "baseline:latest": host namespaces '
                                             '(hostNetwork=true)'), verdict


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=values_strategy(), level=network_strategy.POD_SECURITY.filter(lambda level: level != "none"))
def test_whatever_is_valid_at_a_level_is_admitted_at_it(podsecurity, tmp_path_factory, values, level):
    values["podSecurity"] = level
    network_strategy.fit(values)
    path = tmp_path_factory.mktemp("values") / "values.yaml"
    path.write_text(yaml.dump(values, Dumper=_QuotedDumper, allow_unicode=True, width=2**20, sort_keys=False),
                    encoding="utf-8")
    judged = verdicts(podsecurity, level, pipeline.run(path).text)
    assert all(v["allowed"] for v in judged.values()), judged
