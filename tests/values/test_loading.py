"""Reading a values file: what the loader refuses before building anything (alias bombs,
deep nesting, self-containing aliases), numbers (not finite, beyond 2^53, as Helm reads
them), where `-o` may write, a stdout that cannot take the output, `prog` in messages, and
`--summary`. Where Helm is involved, both tools are run on the same file.

Cases of the shape "one problem naming a field", which Helm must refuse naming the field too,
are in tests/bad_cases.py; properties over generated input in tests/render/test_render_fuzz.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
import yaml
from hypothesis import given, settings

from chart_helpers import argo_document, helm_template
from cli_helpers import BASE, REPO, one_line, render_py, write
from helpers import parse_values
from test_render_fuzz import FAST, LIMIT_S, bomb, hazards, nested, with_hazard  # the strategies, not its tests
from torchdag import cli, pipeline
from torchdag.errors import ValuesError
from torchdag.yamlread import go_number

# The limits docs/values.md promises, written out (not imported from the code under test).
DOCUMENTED_DEPTH = 100
DOCUMENTED_ALIAS_VALUES = 50_000


# 9^9 = 387,420,489 strings from 1 KB; PyYAML shares them, but every later walk copies them out.
BILLION_LAUGHS = "".join(
    f"x-{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9) if level else ', '.join(['lol'] * 9)}]\n"
    for level in range(9)
)


# --- alias bombs and deep nesting: refused before anything is built ------------------------

def test_alias_bomb_is_refused_fast_in_one_line(tmp_path):
    values = write(tmp_path, BASE + BILLION_LAUGHS)
    out = tmp_path / "out" / "workflow.yaml"
    started = time.monotonic()
    done = render_py(str(values), "-o", str(out))  # before: 5 minutes of the schema check walking copies
    assert done.returncode == 2 and done.stdout == "" and not out.parent.exists()
    assert re.fullmatch(re.escape(f"{values}: (top level): aliases expand this file's ") + r"\d+" + re.escape(
        ' values to more than 1000000 (excessive aliasing, a "billion laughs"); '
        "aliases may add at most 50000 values"), one_line(done.stderr)), done.stderr
    assert time.monotonic() - started < 10
    started = time.monotonic()
    with pytest.raises(ValuesError):
        parse_values(BASE + BILLION_LAUGHS, "x")
    assert time.monotonic() - started < 1, "the check must not expand the aliases it counts"


def test_alias_bomb_of_merge_keys_is_refused(tmp_path):
    """`<<` merges copy too (PyYAML flattens them before constructing)."""
    text = "a0: &a0 {k0: 1, k1: 2, k2: 3, k3: 4}\n" + "".join(
        f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 8)}]}}\n" for i in range(1, 8))
    with pytest.raises(ValuesError, match=r"\(top level\): aliases expand"):
        parse_values(text, "x")


def test_helm_refuses_the_alias_bomb_too(helm, tmp_path):
    result = helm_template(helm, write(tmp_path, BASE + BILLION_LAUGHS))
    assert result.returncode != 0 and "excessive aliasing" in result.stderr


def _levels(width: int, levels: int, uses: int) -> str:
    """x-0: ten strings, x-k: `width` aliases to x-(k-1), x-use: `uses` aliases to the last."""
    text = f"x-0: &l0 [{', '.join(['v'] * width)}]\n"
    text += "".join(f"x-{k}: &l{k} [{', '.join([f'*l{k - 1}'] * width)}]\n" for k in range(1, levels))
    return text + f"x-use: [{', '.join([f'*l{levels - 1}'] * uses)}]\n"


@pytest.mark.parametrize("extra, refused", [
    (_levels(10, 3, 30), True),  # ~37,900 of ~38,050 values decoded inside aliases (99.6%): too many for go-yaml
    (_levels(1000, 1, 17), False),  # 17,017 of ~18,100 (94%)
], ids=["99.6%", "94%"])
def test_go_yamls_aliasing_rule_is_followed(extra, refused, helm, tmp_path):
    """Below the 50,000-copy limit, render.py refuses what Helm's YAML reader refuses:
    more than 99% of the values it decodes coming from aliases (go-yaml v2, decode.go)."""
    values = write(tmp_path, BASE + extra)
    with pytest.raises(ValuesError) as caught:  # refused either way: the x- keys are unknown
        pipeline.validate(pipeline.load(values))
    aliasing = [line for line in caught.value.lines() if "excessive aliasing" in line]
    assert bool(aliasing) == refused, caught.value.lines()[:3]
    helm_err = helm_template(helm, values).stderr
    assert ("excessive aliasing" in helm_err) == refused, helm_err


def test_alias_copies_beyond_the_limit_are_refused_where_helm_takes_them(helm, tmp_path):
    """Known difference (chart/README.md): render.py refuses more than 50,000 values made by
    aliases even when they are only half the file; go-yaml's rule takes it. The limit is
    exact: `x-b: *a` copies the list and its N items, N + 1 values."""
    def aliased(items):
        return BASE + f"x-a: &a [{', '.join(f'v{i}' for i in range(items))}]\nx-b: *a\n"

    assert parse_values(aliased(DOCUMENTED_ALIAS_VALUES - 1), "x")["x-b"][-1] == "v49998"  # 50,000 copies
    text = aliased(DOCUMENTED_ALIAS_VALUES)  # 50,001 copies
    values = write(tmp_path, text)
    with pytest.raises(ValuesError, match="aliases may add at most 50000 values"):
        parse_values(text, str(values))
    helm_err = helm_template(helm, values).stderr
    assert "excessive aliasing" not in helm_err, helm_err
    assert re.search(r"additional properties '(x-a|x-b)', '(x-a|x-b)' not allowed", helm_err), helm_err


def test_anchors_and_merge_keys_of_a_real_file_still_work(tmp_path):
    """The limits leave ordinary anchors alone: 300 nodes sharing one resources block render
    exactly as the file with every copy written out."""
    resources = "{requests: {cpu: '4', memory: 16Gi}, limits: {cpu: '8', memory: 32Gi}}"
    head = "name: big\nimage: img:1\nscript: /t.py\n"
    shared = head + f"x-node: &node {{accelerator: cpu, resources: {resources}}}\nnodes:\n" + "".join(
        f"  - {{<<: *node, name: n{i}, nic: eth0}}\n" for i in range(300))
    written = head + "nodes:\n" + "".join(
        f"  - {{accelerator: cpu, resources: {resources}, name: n{i}, nic: eth0}}\n" for i in range(300))
    anchored = yaml.safe_load(shared)
    del anchored["x-node"]
    assert parse_values(written, "x") == anchored
    assert pipeline.run(write(tmp_path, written)).text == pipeline.run(write(tmp_path, yaml.safe_dump(anchored),
                                                                            "anchored.yaml")).text


@pytest.mark.parametrize("depth", [500, 5000])
def test_deep_nesting_is_one_line_not_a_recursion_error(depth, tmp_path):
    values = write(tmp_path, BASE + "args: " + "[" * depth + "]" * depth + "\n")
    done = render_py(str(values))
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    line = one_line(done.stderr)
    assert line.startswith(f"{values}: (top level): lists and mappings are nested more than 100 levels deep"), line


def test_depth_limit_is_exact():
    def text(depth):  # the root mapping is level 1
        return "a: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n"

    assert parse_values(text(DOCUMENTED_DEPTH), "x")
    with pytest.raises(ValuesError, match=r"nested more than 100 levels deep \(line 1\); the limit is 100"):
        parse_values(text(DOCUMENTED_DEPTH + 1), "x")
    # through aliases: 60 levels anchored, used 60 levels down
    deep = "a: &a " + "[" * 60 + "]" * 60 + "\nb: " + "[" * 60 + "*a" + "]" * 60 + "\n"
    with pytest.raises(ValuesError, match="nested more than"):
        parse_values(deep, "x")


def test_helm_refuses_deep_nesting_too(helm, tmp_path):
    result = helm_template(helm, write(tmp_path, BASE + "args: " + "[" * 500 + "]" * 500 + "\n"))
    assert result.returncode != 0 and "/args" in result.stderr  # go-yaml reads it; the schema refuses it


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(ValuesError) as caught:
        parse_values("a: &a [1, *a]\n", "x")
    assert caught.value.lines() == ["x: (top level): an alias refers to a list or mapping that contains it (line 1); "
                                    "YAML values cannot contain themselves"]


# --- numbers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    ("25195", 25195), ("1e3", 1000.0), ("1.5e3", 1500.0), ("+.5", 0.5), ("-.5", -0.5), (".5e3", 500.0), ("0o17", 15),
    ("017", 15), ("0x1F", 31), ("0b101", 5), ("-0b101", -5), ("1_000", 1000), ("09", 9.0), ("1.", 1.0), ("-0", 0),
    ("1e400", "1e400"), ("-1e400", "-1e400"), ("1:30", "1:30"), ("1:30.5", "1:30.5"), ("0x", "0x"), ("._5", "._5"),
    ("99999999999999999999", 99999999999999999999),
])
def test_numbers_are_read_as_go_yaml_reads_them(text, want):
    """go-yaml v2's resolve(): Go's strconv syntax, no YAML 1.1 base 60, and a float out of
    float64's range is a string (integers stay exact: refused later beyond 2^53)."""
    got = go_number(text)
    assert got == want and type(got) is type(want)
    assert parse_values(f"a: {text}\n", "x") == {"a": want}


def test_equals_sign_is_a_string():
    assert parse_values("a: =\n", "x") == {"a": "="}  # was PyYAML's `!!value`, which it cannot construct


def test_number_spellings_render_as_helm_renders_them(helm, tmp_path):
    spellings = ["1e3", "0o17", "017", "0x1F", "+.5", ".5", "1.", "1_000", "0b101", "1e400", "25e-1", "09"]
    nodes = "".join(f"  - {{name: n{i}, resources: {{requests: {{cpu: {s}}}}}}}\n" for i, s in enumerate(spellings))
    values = write(tmp_path, f"name: a\nimage: i:1\nscript: /t.py\nnodes:\n{nodes}")
    cpu = re.compile(r'"cpu": ("[^"]*")')
    ours = sorted(cpu.findall(pipeline.run(values).text))
    result = helm_template(helm, values)
    assert result.returncode == 0, result.stderr
    assert ours == sorted(cpu.findall(result.stdout)) and '"1e400"' in ours and '"15"' in ours


NON_FINITE = [
    ("resources: {requests: {cpu: .inf}}", "resources.requests.cpu", ".inf"),
    ("resources: {limits: {memory: -.inf}}", "resources.limits.memory", "-.inf"),
    ("imagePullSecrets: [.nan]", "imagePullSecrets[0]", ".nan"),
    ("env: {FOO: +.Inf}", "env.FOO", ".inf"),
    ("timeouts: {rendezvous: .NaN}", "timeouts.rendezvous", ".nan"),
]


@pytest.mark.parametrize("extra, field, spelling", NON_FINITE, ids=[field for _, field, _ in NON_FINITE])
def test_non_finite_numbers_are_refused_naming_the_field(extra, field, spelling, tmp_path, capsys):
    values = write(tmp_path, BASE + extra + "\n")
    out = tmp_path / "workflow.yaml"
    assert cli.main([str(values), "-o", str(out)]) == 2 and not out.exists()
    assert one_line(capsys.readouterr().err) == (
        f"{values}: {field}: {spelling} is not a finite number, which JSON, Helm and Kubernetes cannot carry; "
        "give a finite number, or quote it for the string")


@pytest.mark.parametrize("extra", [extra for extra, _, _ in NON_FINITE[:2]] + ["port: .nan"])
def test_helm_refuses_non_finite_numbers_too(extra, helm, tmp_path):
    result = helm_template(helm, write(tmp_path, BASE.replace("port: 25195\n", "") + extra + "\n"))
    assert result.returncode != 0 and "json: unsupported value" in result.stderr, result.stderr


def test_integer_beyond_2_53_in_a_quantity(helm, tmp_path, capsys):
    """Known difference (chart/README.md): Helm reads numbers as float64 and renders
    99999999999999999999 as 100000000000000000000; render.py refuses it, naming the field."""
    values = write(tmp_path, BASE + "resources: {requests: {cpu: 99999999999999999999}}\n")
    assert cli.main([str(values)]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"{values}: resources.requests.cpu: 99999999999999999999 is beyond 2^53 (9007199254740992), "
        "where Helm's numbers (float64) lose digits; quote it as a string or give a smaller number")
    result = helm_template(helm, values)
    assert result.returncode == 0 and '"cpu": "100000000000000000000"' in result.stdout, result.stderr
    quoted = write(tmp_path, BASE + "resources: {requests: {cpu: '99999999999999999999'}}\n", "quoted.yaml")
    assert '"cpu": "99999999999999999999"' in pipeline.run(quoted).text


def test_run_as_user_1e3_is_1000_in_both(helm, tmp_path):
    values = write(tmp_path, BASE + "securityContext: {runAsUser: 1e3}\n")
    ours = argo_document(pipeline.run(values).text)
    theirs = argo_document(helm_template(helm, values).stdout)
    assert ours["spec"]["securityContext"] == theirs["spec"]["securityContext"]
    assert ours["spec"]["securityContext"]["runAsUser"] == 1000


# --- a real process: the fuzz test's hostile files through `python render.py` ------------------

@settings(FAST, max_examples=3)
@given(hazard=hazards)
def test_render_py_process_never_hangs_or_tracebacks(hazard, tmp_path_factory):
    """A few generated files through a real `python render.py` (timeout=10 s)."""
    source = tmp_path_factory.mktemp("process") / "cluster.yaml"
    kind, path = hazard[0], hazard[1]
    if kind == "bomb":
        prefix, alias, _ = bomb(*hazard[2:])
        source.write_text(with_hazard(path, alias, prefix), encoding="utf-8")
    elif kind == "deep":
        source.write_text(with_hazard(path, nested(hazard[2], hazard[3])), encoding="utf-8")
    else:
        source.write_text(with_hazard(path, re.sub(r"\s", "", str(hazard[2]))), encoding="utf-8")
    done = subprocess.run([sys.executable, str(REPO / "render.py"), str(source)], capture_output=True, text=True,
                          timeout=LIMIT_S)
    assert done.returncode in (0, 2), done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
