"""Kubernetes' `$(VAR)` expansion as Kubernetes itself does it, against torchdag's port.

What a container receives is judged in test_render.py, test_chart.py and the local runner
by `testbed.runtime.expand`. Here that port is held against the Go code in
k8s.io/kubernetes (third_party/forked/golang/expansion, run by `.tools/bin/kubeexpand` in
the kubelet's order) on a generated corpus and on every container torchdag renders.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argo_helpers import task_pods
from chart_helpers import VALUES_FILES, render_py_workflow
from testbed.runtime import kube_command, kube_container_env

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.go  # the Go-built tools under .tools/bin


@pytest.fixture(scope="module")
def kubeexpand() -> str:
    for candidate in (os.environ.get("KUBEEXPAND"), str(REPO / ".tools" / "bin" / "kubeexpand")):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("kubeexpand is not built: run the tests through `make test` (or `make go-tools`), "
                "which builds it with Go")


def kubernetes_expands(kubeexpand: str, containers: list[dict]) -> list[dict]:
    result = subprocess.run([kubeexpand], input=json.dumps(containers), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def ours(container: dict) -> dict:
    """The port, in the kubelet's order: env first, then command and args against it."""
    env = kube_container_env(map(tuple, container["env"]))
    whole = dict(env)  # a later duplicate name wins
    return {"env": [list(pair) for pair in env], "command": kube_command(container["command"], whole),
            "args": kube_command(container["args"], whole)}


# Text dense in what expansion reacts to: `$`, `(`, `)`, names that are defined, and
# characters outside ASCII (Go works on bytes and runes, Python on characters).
NAMES = ["A", "B", "HOME", "X_1", "", "a b", "é"]
piece = st.one_of(st.sampled_from(["$", "$$", "(", ")", "$(", "$()", "$$(", "é", "训", "😀", "\n", " "]),
                  st.sampled_from(NAMES).map(lambda n: f"$({n})"), st.text(max_size=3))
text = st.lists(piece, max_size=8).map("".join)
container = st.fixed_dictionaries({
    "env": st.lists(st.tuples(st.sampled_from(NAMES[:4] + ["C"]), text).map(list), max_size=5),
    "command": st.lists(text, max_size=3),
    "args": st.lists(text, max_size=4),
})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                   HealthCheck.function_scoped_fixture])
@given(corpus=st.lists(container, min_size=40, max_size=40))
def test_port_equals_kubernetes_on_generated_containers(kubeexpand, corpus):
    assert [ours(c) for c in corpus] == kubernetes_expands(kubeexpand, corpus)


def test_port_equals_kubernetes_on_every_rendered_container(kubeexpand):
    """Every main container of every example and case, after Argo's substitution."""
    corpus = []
    for values in VALUES_FILES:
        for pod in task_pods(render_py_workflow(values)).values():
            main = pod["spec"]["containers"][0]
            corpus.append({"env": [[e["name"], e["value"]] for e in main.get("env", []) if "value" in e],
                           "command": main.get("command", []), "args": main.get("args", [])})
    assert len(corpus) >= len(VALUES_FILES)
    assert [ours(c) for c in corpus] == kubernetes_expands(kubeexpand, corpus)


def test_known_differences_from_older_releases_are_gone(kubeexpand):
    """Hand-written expectations (not derived from either implementation)."""
    cases = [{"env": [["A", "x"], ["B", "$(A)-$$(A)-$(C)"], ["C", "c"]],
              "command": ["$(B)", "$é"], "args": ["$(A", "$(C)"]}]
    expected = [{"env": [["A", "x"], ["B", "x-$(A)-$(C)"], ["C", "c"]],
                 "command": ["x-$(A)-$(C)", "$é"], "args": ["$(A", "c"]}]
    assert kubernetes_expands(kubeexpand, cases) == expected
    assert [ours(c) for c in cases] == expected
