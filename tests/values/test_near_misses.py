"""What sits beside the refused cases of tests/bad_cases.py
(each refused there by both renderers, naming the field) and must still be accepted, the same
way by both: near misses of each rule."""

from __future__ import annotations

import re

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
    # what Kubernetes takes beside what it refuses
    ("tolerations", "tolerations: [{operator: Exists}, {key: k, operator: Exists, value: ''}, {key: k, value: v}, "
                    "{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: -5}]\n"),
    ("root-without-run-as-non-root", "securityContext: {runAsNonRoot: false, runAsUser: 0}\n"),
    ("non-root", "securityContext: {runAsNonRoot: true, runAsUser: 1000}\n"),
    ("requests-equal-to-limits-spelled-otherwise", "resources: {requests: {cpu: 1100m, memory: 1536Mi}, "
                                                   "limits: {cpu: 1.1, memory: 1.5Gi}}\n"),
    ("request-below-limit-units", "resources: {requests: {cpu: 999m, memory: 1G}, limits: {cpu: '1', memory: 1Gi}}\n"),
    ("capabilities", "containerSecurity: {addCapabilities: [IPC_LOCK, SYS_PTRACE, CHECKPOINT_RESTORE]}\n"),
    ("node-selector-beside-hostname", "nodeSelector: {kubernetes.io/arch: arm64, topology.kubernetes.io/zone: a}\n"),
    ("working-dir-absolute", "workingDir: /work dir/ü\nlauncher: {type: launch, python: /usr/bin/python3.11}\n"),
    ("dots-in-host-paths", "ascend: {driverPath: /opt/a..b/.x}\n"
                           "volumes: [{name: d, mountPath: /d, hostPath: {path: /data/..x/y../.}}]\n"),
    *[(f"image-{index}", f"image: '{image}'\n") for index, image in enumerate([
        "localhost:5000/a__b/c-d:1.0_x", "[::1]:5000/x:y", "Registry.Example.COM:443/team/train", "ubuntu",
        "train:v1@sha256:" + "0" * 64, "a.b-c/d---e/f.g:" + "T" * 128])],
]


@pytest.mark.parametrize("extra", [extra for _, extra in ACCEPTED], ids=[case for case, _ in ACCEPTED])
def test_near_misses_are_accepted_alike(extra, helm, tmp_path):
    text = BASE
    for line in extra.splitlines():  # a key the extra sets replaces BASE's line
        text = re.sub(rf"^{re.escape(line.split(':')[0])}:.*\n", "", text, flags=re.MULTILINE)
    values = write(tmp_path, text + extra)
    ours = argo_document(pipeline.run(values).text)
    result = helm_template(helm, values)
    assert result.returncode == 0, result.stderr
    assert ours["spec"] == argo_document(result.stdout)["spec"]
