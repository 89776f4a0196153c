"""Property: whatever the values file holds, render.py either renders a valid Workflow or
reports ValuesError lines — never a traceback from deeper in the pipeline."""

from __future__ import annotations

import copy

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from argo_helpers import validate_argo
from bad_cases import BASE
from torchdag.cli import build
from torchdag.problems import ValuesError
from torchdag.values import load_schema

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=12), st.sampled_from(["", "auto", "eth0", "cpu", "nvidia", "ascend910", "gloo", "16Gi", "/x"]))
anything = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=8)
TOP_KEYS = sorted(load_schema()["properties"])
NODE_KEYS = sorted(load_schema()["$defs"]["node"]["properties"])


@st.composite
def mangled_values(draw):
    values = copy.deepcopy(BASE)
    # null deletes a default (Helm's rule), so many mangled files are still valid
    plausible = st.one_of(st.none(), st.sampled_from([{}, [], "", 0, 1, True, False]), anything)
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            values[draw(st.sampled_from(TOP_KEYS))] = draw(plausible)
        else:
            node = values["nodes"][draw(st.integers(0, len(values["nodes"]) - 1))] if isinstance(values.get("nodes"), list) and values["nodes"] else None
            if isinstance(node, dict):
                node[draw(st.sampled_from(NODE_KEYS))] = draw(plausible)
    return values


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(values=mangled_values())
def test_any_values_render_or_fail_cleanly(values, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "cluster.yaml"
    path.write_text(yaml.safe_dump(values, allow_unicode=True), encoding="utf-8")
    try:
        text = build(path)
    except ValuesError as err:
        assert err.lines() and all(line.startswith(f"{path}: ") and "\n" not in line for line in err.lines())
        event("rejected")
        return
    event("rendered")
    validate_argo(yaml.safe_load(text))
