"""The words a newcomer meets: a message says what the user wrote (as YAML writes it), the type
first (no rule judges a quoted number as a number), a hint where a value or a key is close to
a known one, no follow-on error from a misspelled key, and Helm's refusal names the field."""

from __future__ import annotations

import re

import pytest

from chart_helpers import helm_template
from cli_helpers import BASE, render_py, write

ASCEND_HOST = BASE  # two ascend310p machines on the host network, every capability dropped


def _values(tmp_path, lines: str, base: str = BASE):
    text = base
    for line in lines.splitlines():  # a key the lines set replaces BASE's line (and its block)
        if re.match(r"[A-Za-z]", line):
            key = line.split(":")[0]
            text = re.sub(rf"^{re.escape(key)}:.*\n(?:[ -].*\n)*", "", text, flags=re.MULTILINE)
    return write(tmp_path, text + lines)


def _lines(tmp_path, lines: str) -> tuple[str, list[str]]:
    values = _values(tmp_path, lines)
    done = render_py(str(values))
    assert done.returncode == 2 and done.stdout == "", done.stderr
    return str(values), [line for line in done.stderr.splitlines() if not line.startswith("warning:")]


# (id, lines, the one field named, a fragment of its one line); nothing else may be said
ONE_LINE = [
    # a quoted number is a string: the rules on numbers (privileged port, HCCL's ports and step) stay silent
    ("quoted-port", "port: '29500'\n", "port", "must be an integer, got string '29500'; write 29500 without quotes"),
    ("quoted-privileged-port", "port: '80'\n", "port", "must be an integer, got string '80'"),
    ("quoted-hccl-port", "port: '60001'\n", "port", "must be an integer, got string '60001'"),
    ("quoted-process-group-timeout", "timeouts: {processGroup: '60'}\n", "timeouts.processGroup",
     "must be an integer, got string '60'"),
    ("quoted-boolean", "hostNetwork: 'true'\n", "hostNetwork", "write true without quotes"),
    ("string-in-a-path-rule", "script: 5\n", "script", "must be a string, got integer 5"),
    ("number-as-extra-arg", "launcher: {extraArgs: [7]}\n", "launcher.extraArgs[0]", "must be a string, got integer 7"),
    # what the user wrote, as YAML writes it
    ("boolean-as-yaml", "port: true\n", "port", "got boolean true"),
    ("list-as-yaml", "timeouts: {processGroup: [600]}\n", "timeouts.processGroup", "got list [600]"),
    ("mapping-as-yaml", "port: {a: 1}\n", "port", "got mapping {a: 1}"),
    ("null-as-yaml", "script: null\n", "script", "got null"),
    # did you mean: the same word in another case, a close one, a key of another section
    ("enum-case", "nodes:\n  - {name: a, accelerator: Ascend310P}\n", "nodes[0].accelerator",
     "did you mean ascend310p?"),
    ("enum-case-backend", "backend: NCCL\n", "backend", "did you mean nccl?"),
    ("enum-close", "podSecurity: basline\n", "podSecurity", "did you mean baseline?"),
    ("key-of-another-section", "gang: volcano\n", "gang", "did you mean 'scheduling.gang'?"),
    ("key-of-another-section-queue", "queue: q\n", "queue", "did you mean 'scheduling.queue'?"),
    ("key-of-the-top-in-a-node", "nodes:\n  - {name: a, port: 1}\n", "nodes[0].port", "the top-level 'port'"),
    # a misspelled key: its line alone, not the rules its default would break
    ("misspelled-accelerator", "backend: hccl\nnodes:\n  - {name: a, acelerator: ascend910}\n  - {name: b, "
                               "accelerator: ascend910}\n", "nodes[0].acelerator", "did you mean 'accelerator'?"),
    ("misspelled-network-mode", "podSecurity: baseline\nascend: {mountDriver: false}\nnetwork: {mdoe: pod}\n",
     "network.mdoe", "did you mean 'mode'?"),
    # nothing is mixed: the nodes are all of one other kind
    ("nccl-on-ascend", "backend: nccl\n", "backend", "the nodes are ascend310p; use backend: auto"),
    ("hccl-on-cpu", "backend: hccl\nnodes:\n  - {name: a}\n  - {name: b}\n", "backend", "the nodes are cpu"),
    # an interpreter in the script's path
    ("script-python", "script: python /code/train.py\n", "script", "starts with a program"),
    ("script-python3-u", "script: python3 -u /code/train.py\n", "script", "starts with a program"),
    ("script-interpreter-path", "script: /usr/bin/python3.11 /code/train.py\n", "script", "starts with a program"),
    ("script-torchrun", "script: torchrun --nproc_per_node=2 train.py\n", "script", "starts with a program"),
    ("script-bash", "script: bash run.sh\n", "script", "starts with a program"),
]


@pytest.mark.parametrize("lines, field, fragment", [c[1:] for c in ONE_LINE], ids=[c[0] for c in ONE_LINE])
def test_one_true_line(lines, field, fragment, tmp_path):
    values, said = _lines(tmp_path, lines)
    assert len(said) == 1, said
    assert said[0].startswith(f"{values}: {field}: ") and fragment in said[0], said
    assert "True" not in said[0] and "None" not in said[0], said


@pytest.mark.parametrize("field, value", [("agents", '["\\n\\n    \u00d8s"]'), ("backend", '{a: "x\\ny"}'),
                                          ("timeouts", '[1, "two\\nlines"]')])
def test_a_value_with_line_breaks_is_shown_on_the_problems_one_line(field, value, tmp_path):
    """Found by the fuzz test: YAML folds a string's line breaks over lines, and the problem's
    line broke with them; the value is shown with its breaks spelled \\n."""
    values = write(tmp_path, BASE + f"{field}: {value}\n")
    done = render_py(str(values))
    said = done.stderr.splitlines()
    # each problem on its own line (a broken one would start without the file and field)
    assert done.returncode == 2 and said and all(line.startswith(f"{values}: {field}: ") for line in said), said
    assert "\\n" in said[0] and "must be " in said[0], said


def test_a_misspelled_key_keeps_every_fields_own_problem(tmp_path):
    """Only rules across fields wait for the key to be fixed; each field's own problems are told now."""
    _, said = _lines(tmp_path, "backend: hccl\nport: 0\nnodes:\n  - {name: a, acelerator: ascend910}\n")
    assert [line.split(": ")[1] for line in said] == ["nodes[0].acelerator", "port"], said


def test_a_script_path_with_a_space_is_accepted(tmp_path):
    for script in ["/code/my train.py", "/code/python_tools/train.py", "./pythonic.py"]:
        done = render_py(str(_values(tmp_path, f"script: '{script}'\n")))
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("text", ["name: x\nnodes:\n\t- name: a\n", "name: x\nscheduling:\n  gang: none\n\tqueue: a\n",
                                  "name: x\nenv:\n\tA: b\n"])
def test_a_tab_is_named(text, tmp_path):
    done = render_py(str(write(tmp_path, text)))
    assert done.returncode == 2 and "a tab character: YAML indents with spaces only" in done.stderr, done.stderr


# Rules on keys sit on the mapping's own schema (properties, patternProperties), so Helm's error
# points at the field, never `at ''` alone: (lines, Helm's location)
HELM_NAMES = [
    ("env: {RANK: '1'}\n", "at '/env/RANK'"),
    ("env: {MASTER_ADDR: a}\n", "at '/env/MASTER_ADDR'"),
    ("env: {PET_NNODES: '2'}\n", "at '/env/PET_NNODES'"),
    ("env: {'true': a}\n", "at '/env/true'"),
    ("labels: {workflows.argoproj.io/completed: 'true'}\n", "at '/labels/workflows.argoproj.io~1completed'"),
    ("labels: {sub.workflows.argoproj.io/x: a}\n", "at '/labels/sub.workflows.argoproj.io~1x'"),
    ("labels: {torchdag.io/job: a}\n", "at '/labels/torchdag.io~1job'"),
    ("annotations: {workflows.argoproj.io/node-name: a}\n", "at '/annotations/workflows.argoproj.io~1node-name'"),
    ("nodeSelector: {kubernetes.io/hostname: a}\n", "at '/nodeSelector/kubernetes.io~1hostname'"),
    ("resourceNames: {cpu: example.com/x}\n", "at '/resourceNames/cpu'"),
    ("resourceNames: {gpu: example.com/x}\n", "at '/resourceNames/gpu'"),
]


@pytest.mark.parametrize("lines, location", HELM_NAMES, ids=[c[1] for c in HELM_NAMES])
def test_helm_names_the_field_of_a_key_rule(lines, location, helm, tmp_path):
    values = _values(tmp_path, lines)
    result = helm_template(helm, values)
    assert result.returncode != 0 and location in result.stderr, result.stderr
    assert "at '': 'allOf' failed" not in result.stderr and "at '': 'not' failed" not in result.stderr, result.stderr
    assert render_py(str(values)).returncode == 2
