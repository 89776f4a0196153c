"""Property: hostile strings in script, args and env reach the training process byte-exact
and never change the Workflow's structure — through YAML, Kubernetes' $(VAR) expansion,
the bash wrapper that sources CANN's set_env.sh on Ascend nodes (run for real) and
torchrun's own ${local_rank} substitution of the script's arguments (torch's code)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argo_helpers import container_process, task_pods, validate_argo
from sync_chart import reserved_env
from torchdag import pipeline

NASTY = ["'", '"', ": ", " #", "#", "\n", "\r\n", "\t", "$(HOME)", "$$(HOME)", "$HOME", "$", "$(", ";", "`id`", "\\",
         "- ", "{", "}", "[", "]", "&anchor", "*alias", "!tag", "%", "@", "|", ">", "---", "...", "ünï", "训练", "✓",
         "\u2028", "\ufeff", "\u00a0", "\x1b[31m", "<>&&", "null", "true", "~", "0x10", "1e3", " leading", "trailing "]

# What validation refuses is left out here ('{{', NUL, DEL, C1 controls, U+FFFE/U+FFFF: see
# tests/bad_cases.py); everything else must arrive byte-exact.
REFUSED = re.compile("[\x00\x7f-\x9f\ufffe\uffff]")
hostile_text = st.lists(st.one_of(st.sampled_from(NASTY),
                                  st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                                          max_size=8)),
                        max_size=6).map("".join).filter(lambda s: "{{" not in s and not REFUSED.search(s))
# PET_* names are torchrun's option defaults, refused (tests/bad_cases.py).
env_names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True).filter(
    lambda n: n not in reserved_env() and not n.startswith("PET_"))

class _QuotedDumper(yaml.SafeDumper):
    """Every string double-quoted: a plain `1e3` or `n` would read back as a number or a
    boolean (as Helm reads it), which is not the string the test drew."""


_QuotedDumper.add_representer(str, lambda dumper,
                              data: dumper.represent_scalar("tag:yaml.org,2002:str", data, style='"'))

ARGV_DUMPER = "import json, sys; sys.stdout.write(json.dumps(sys.argv[1:]))"


@st.composite
def hostile_values(draw):
    accelerator = draw(st.sampled_from(["cpu", "ascend910", "nvidia"]))
    return {
        "name": "hostile",
        "image": "registry.example.com/img:1",
        # A script starting with '-' is refused: torchrun would read it as its own option.
        "script": draw(hostile_text.filter(lambda s: s and not s.startswith("-"))),
        "args": draw(st.lists(hostile_text, max_size=5)),
        "env": draw(st.dictionaries(env_names, hostile_text, max_size=4)),
        "nodes": [{"name": "node-a", "nic": "eth0", "accelerator": accelerator},
                  {"name": "node-b", "nic": "eth1", "accelerator": accelerator}],
    }


@pytest.mark.torch  # torchrun's own substitution of the script's arguments (torch's code)
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(values=hostile_values())
def test_hostile_strings_arrive_byte_exact(values, tmp_path_factory):
    from torch.distributed.elastic.utils.api import macros  # what torchrun applies to script args

    folder = tmp_path_factory.mktemp("hostile")
    set_env = folder / "set_env.sh"
    set_env.write_text("export CANN_LOADED=1\n")
    if values["nodes"][0]["accelerator"] == "ascend910":
        values["ascend"] = {"setEnvScript": str(set_env)}
    path = folder / "cluster.yaml"
    path.write_text(yaml.dump(values, Dumper=_QuotedDumper, allow_unicode=False), encoding="utf-8")

    doc = yaml.safe_load(pipeline.run(path).text)
    validate_argo(doc)
    pods = task_pods(doc)
    assert list(pods) == ["node-0", "node-1", "schedule-watch"]  # structure unchanged, whatever the strings
    for pod in (pod for name, pod in pods.items() if name != "schedule-watch"):
        container = pod["spec"]["containers"][0]
        argv, env = container_process(container)
        for name, value in values["env"].items():
            assert env[name] == value
        launcher_at = argv.index("torchrun")
        script_and_args = argv[-1 - len(values["args"]):]
        # What torchrun hands each worker process (LOCAL_RANK 0 here).
        assert macros.substitute(script_and_args, "0") == [values["script"], *values["args"]]
        if argv[0] == "/bin/bash":
            # Run the real wrapper with torchrun swapped for an argv dumper.
            real = argv[:launcher_at] + [sys.executable, "-c", ARGV_DUMPER] + argv[launcher_at + 1:]
            out = subprocess.run(real, capture_output=True, check=True).stdout
            assert json.loads(out) == argv[launcher_at + 1:]


def test_wrapper_fails_clearly_without_set_env(tmp_path):
    values = {"name": "a", "image": "i", "script": "/t.py",
              "ascend": {"setEnvScript": str(tmp_path / "missing.sh")},
              "nodes": [{"name": "n", "accelerator": "ascend910"}]}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(values))
    argv, _ = container_process(task_pods(yaml.safe_load(pipeline.run(path).text))["node-0"]["spec"]["containers"][0])
    result = subprocess.run(argv, capture_output=True, text=True)
    assert result.returncode == 127
    # on stdout: a pod's log has both streams, and the wrapper stays free of `>&2` (see catalog.yaml)
    assert f"cannot read {tmp_path / 'missing.sh'} (ascend.setEnvScript)" in result.stdout
