"""The process kubelet applies a pod's securityContext to the processes it starts, as a
container runtime does, so the Ascend device permission model is tested for real: the
device files are HwHiAiUser's (1000:1000), mode 0660, and a root process with every
capability dropped opens them only through the device group (ascend.deviceGroup) or a kept
CAP_DAC_OVERRIDE (Project-HAMi/ascend-device-plugin#139)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from required import missing
from test_kubelet_pods import make_kubelet, pod, run  # the kubelet stand-ins, not their tests

from helpers import REPO, write
from testbed.kubelet.security import can_apply, setpriv_words

OPEN = ("import sys\ntry:\n    open(sys.argv[1], 'rb').close()\nexcept OSError as err:\n"
        "    print('errno', err.errno)\n    raise SystemExit(1)\nprint('opened', sys.argv[1])\n")
ASCEND = """
name: npu
image: registry.example.com/ascend-pytorch:1
script: /workspace/train.py
nodes:
- {name: npu-a, accelerator: ascend910, devices: 8}
"""


@pytest.fixture
def as_root():
    if not can_apply():
        missing("applying a securityContext needs root and setpriv (util-linux)")


@pytest.fixture
def device_file(tmp_path, as_root):
    """A stand-in for /dev/davinci0: HwHiAiUser's, mode 0660."""
    path = tmp_path / "davinci0"
    path.write_bytes(b"")
    os.chown(path, 1000, 1000)
    os.chmod(path, 0o660)
    return path


def rendered_contexts(tmp_path, extra: str = "") -> tuple[dict, dict]:
    """(pod, container) securityContext of the Ascend node's template, as render.py writes them."""
    values = write(tmp_path, ASCEND + extra, "npu.yaml")
    done = subprocess.run([sys.executable, str(REPO / "render.py"), str(values)], capture_output=True,
                          text=True, check=True)
    workflow = [d for d in yaml.safe_load_all(done.stdout) if d][-1]
    template = next(t for t in workflow["spec"]["templates"] if "container" in t and t["name"].startswith("ascend"))
    return template.get("securityContext") or {}, template["container"]["securityContext"]


def open_in_pod(tmp_path, pod_context: dict, container_context: dict, target) -> tuple[int, str]:
    kubelet, api = make_kubelet(tmp_path / "kubelet")
    main = {"name": "main", "image": "ascend-pytorch", "command": [sys.executable, "-c", OPEN, str(target)],
            "securityContext": container_context}
    p = pod(main)
    p["spec"]["securityContext"] = pod_context
    run(kubelet, p)
    term = api.statuses[-1]["containerStatuses"][0]["state"]["terminated"]
    return term["exitCode"], (tmp_path / "kubelet" / "logs" / "team" / "p1" / "main.log").read_text()


def test_the_rendered_ascend_pod_opens_the_device_as_root_with_every_capability_dropped(tmp_path, device_file):
    pod_context, container_context = rendered_contexts(tmp_path)
    assert pod_context == {"supplementalGroups": [1000]}
    assert container_context["capabilities"] == {"drop": ["ALL"]}
    assert "runAsUser" not in pod_context  # the image's user: root
    code, log = open_in_pod(tmp_path, pod_context, container_context, device_file)
    assert (code, log) == (0, f"opened {device_file}\n")


def test_without_the_group_root_with_no_capability_cannot(tmp_path, device_file):
    _, container_context = rendered_contexts(tmp_path)
    code, log = open_in_pod(tmp_path, {}, container_context, device_file)
    assert (code, log) == (1, "errno 13\n")  # EACCES, as `dcmi module initialize failed. ret is -8005` hides


def test_device_group_null_leaves_the_workflow_context_and_cap_dac_override_opens_instead(tmp_path, device_file):
    pod_context, container_context = rendered_contexts(
        tmp_path, "ascend: {deviceGroup: null}\ncontainerSecurity: {addCapabilities: [DAC_OVERRIDE]}\n")
    assert pod_context == {} and container_context["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}
    code, log = open_in_pod(tmp_path, pod_context, container_context, device_file)
    assert (code, log) == (0, f"opened {device_file}\n")


def test_run_as_user_and_groups_reach_the_process(tmp_path, as_root):
    words = setpriv_words({"runAsUser": 1000, "runAsGroup": 2000, "supplementalGroups": [1000, 3000],
                           "fsGroup": 4000}, {"capabilities": {"drop": ["ALL"]}, "allowPrivilegeEscalation": False})
    out = subprocess.run(words + ["sh", "-c", "id -u; id -g; id -G; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status"],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:3] == ["1000", "2000", "2000 1000 3000 4000"]
    assert sorted(line.split() for line in out[3:5]) == [["CapEff:", "0000000000000000"], ["NoNewPrivs:", "1"]]


def test_preflight_names_a_device_file_it_cannot_open(tmp_path, device_file):
    """preflight's one line for -8005's cause, from a process with the kubelet's dropped capabilities."""
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from torchdag.agents import preflight; "
            f"print(preflight.check_device_access([{str(device_file)!r}]))")
    words = setpriv_words({}, {"capabilities": {"drop": ["ALL"]}})
    out = subprocess.run(words + [sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"preflight: error: {device_file} exists but cannot be opened by uid 0 "
                          "(owner 1000:1000, mode 660;")
    assert "set ascend.deviceGroup: 1000 (supplementalGroups) or keep CAP_DAC_OVERRIDE" in out
    grouped = setpriv_words({"supplementalGroups": [1000]}, {"capabilities": {"drop": ["ALL"]}})
    assert subprocess.run(grouped + [sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout == "None\n"
