"""Issue 18's third front-door pass: what sits beside the refused cases of tests/bad_cases.py
(each refused there by both renderers, naming the field) and must still be accepted, the same
way by both: near misses of each rule."""

from __future__ import annotations

import pytest

from chart_helpers import argo_document, helm_template
from cli_helpers import BASE, write
from torchdag import pipeline

ACCEPTED = [
    # Argo's prefix is workflows.argoproj.io/ and its subdomains, not every key that ends alike
    ("argo-lookalike-keys", "labels: {argoproj.io/team: a, myworkflows.argoproj.io/x: b}\n"
                            "annotations: {workflows.argoproj.io.example.com/y: c}\n"),
    # launcher options torchdag does not plan, their short forms, and names beside PET_
    ("unplanned-launcher-options", "launcher: {extraArgs: [--monitor-interval=1, --log-dir=/tmp/l, --no-python, "
                                   "-r, '3', --local-ranks-filter=0, --start-method=spawn, --role=trainer]}\n"
                                   "env: {PETS: '1', pet_x: v, XPET_A: z}\n"),
    ("script-named-with-a-dash", "script: ./-train.py\n"),
]


@pytest.mark.parametrize("extra", [extra for _, extra in ACCEPTED], ids=[case for case, _ in ACCEPTED])
def test_near_misses_are_accepted_alike(extra, helm, tmp_path):
    values = write(tmp_path, BASE.replace("script: /code/rl/BladeTrain.py\n", "") + extra
                   + ("" if extra.startswith("script") else "script: /code/rl/BladeTrain.py\n"))
    ours = argo_document(pipeline.build(values))
    result = helm_template(helm, values)
    assert result.returncode == 0, result.stderr
    assert ours["spec"] == argo_document(result.stdout)["spec"]
