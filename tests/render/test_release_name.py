"""What names the run: render.py's runs are named after `name` (generateName `<name>-`), the
chart's Workflow after the release. On the pod network that name also names the run's
headless Service and is every node pod's subdomain, a DNS-1035 label. So render.py holds
`name` to it (rule network-service-name) and to its run-name length (name-run-length), while
the chart checks the release name (release-name-service) and takes any `name` that is a
label value: `name` rules that only matter to render.py's run names never refuse helm users."""

from __future__ import annotations

import pytest

from chart_helpers import argo_document, helm_template
from helpers import EXAMPLES_DIR, write
from torchdag.cli import main

CPU = (EXAMPLES_DIR / "cpu.yaml").read_text(encoding="utf-8")
POD = "network: {mode: pod}\n"
RELEASE_RULE = ("on the pod network (network.mode: pod) the release name names the run's headless Service and "
                "is every node pod's subdomain, so it must be a DNS-1035 label")

# (release name, network values): the chart refuses the release name, naming it
REFUSED_RELEASES = [
    ("1job", POD),
    ("7-train", POD),
    ("my.job", POD),
    ("train.v2", "hostNetwork: false\n"),  # the older key's pod network
]


@pytest.mark.parametrize("release,network", REFUSED_RELEASES, ids=[r for r, _ in REFUSED_RELEASES])
def test_the_chart_refuses_a_release_name_no_service_can_have(release, network, helm, tmp_path):
    result = helm_template(helm, write(tmp_path, CPU + network), release=release)
    assert result.returncode != 0
    assert f"release name: '{release}': {RELEASE_RULE}" in result.stderr, result.stderr


@pytest.mark.parametrize("release", ["1job", "my.job"])
def test_the_host_network_takes_any_release_name_helm_takes(release, helm, tmp_path):
    result = helm_template(helm, write(tmp_path, CPU), release=release)
    assert result.returncode == 0, result.stderr
    assert argo_document(result.stdout)["metadata"]["name"] == release


# (name, network values, render.py's message fragment): render.py refuses, the chart renders
RENDER_PY_ONLY = [
    ("7train", POD, "'7train' starts with a digit: on the pod network each run's headless Service is named after "
                    "the Workflow"),
    ("1job", "hostNetwork: false\n", "'1job' starts with a digit"),
    ("n" * 53, "", "is 53 characters; render.py names each run after it"),
    ("n" * 63, POD, "is 63 characters; render.py names each run after it"),
]


@pytest.mark.parametrize("name,network,fragment", RENDER_PY_ONLY, ids=["pod-digit", "host-network-false-digit",
                                                                       "53-characters", "63-characters-pod"])
def test_name_rules_of_render_pys_run_names_leave_helm_users_alone(name, network, fragment, helm, tmp_path, capsys):
    values = write(tmp_path, CPU.replace("name: cpu-ddp", f"name: {name}") + network)
    assert main([str(values), "--check"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith(f"{values}: name: ") and fragment in lines[0], lines
    result = helm_template(helm, values, release="train")
    assert result.returncode == 0, result.stderr
    assert argo_document(result.stdout)["metadata"]["labels"]["torchdag.io/job"] == name


@pytest.mark.parametrize("name", ["n" * 52, "train7", "t"])
def test_names_both_take(name, helm, tmp_path):
    values = write(tmp_path, CPU.replace("name: cpu-ddp", f"name: {name}") + POD)
    assert main([str(values), "--check", "-q"]) == 0
    assert helm_template(helm, values, release="train").returncode == 0


def test_a_name_over_63_characters_is_refused_by_both(helm, tmp_path, capsys):
    values = write(tmp_path, CPU.replace("name: cpu-ddp", "name: " + "n" * 64))
    assert main([str(values), "--check"]) == 2
    assert f"{values}: name: '{'n' * 64}' is longer than 63 characters" in capsys.readouterr().err
    result = helm_template(helm, values)
    assert result.returncode != 0 and "at '/name'" in result.stderr, result.stderr
