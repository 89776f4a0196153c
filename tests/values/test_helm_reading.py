"""render.py and Helm read a values file the same way. For each way a
file can be written (keys YAML reads as booleans or numbers, a plain `<<`, several YAML
documents, explicit tags, directives, plain scalars of every kind) both give the same
verdict, and where both accept, the same Workflow spec. A refusal is one line naming the
field (render.py) and an error from helm."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plain_yaml import PlainDumper
from test_chart_parity import assert_same_workflow, values_strategy  # the comparison and the strategy, not their tests

from chart_helpers import helm_template
from cli_helpers import BASE
from helpers import parse_values
from torchdag import pipeline
from torchdag.cli import main
from torchdag.errors import ValuesError

MINIMAL = "name: t\nimage: i\nscript: /t.py\nnodes: [{name: a}]\n"


def render_py_verdict(path: Path, capsys) -> tuple[int, list[str]]:
    status = main([str(path), "--check"])
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning:")]
    return status, lines


# --- keys YAML reads as something else than text ------------------------------------------------

@pytest.mark.parametrize("extra, field, helm_key", [
    ("env: {Y: '1'}\n", "env.Y", "true"),
    ("env: {NO: '1'}\n", "env.NO", "false"),
    ("env: {on: '1'}\n", "env.on", "true"),
    ("labels: {n: x}\n", "labels.n", "false"),
    ("labels: {010: x}\n", "labels['010']", "8"),
    ("nodeSelector: {1.5: x}\n", "nodeSelector['1.5']", "1.5"),
    ("annotations: {1e3: x}\n", "annotations['1e3']", "1000"),
    ("labels: {1_0: x}\n", "labels['1_0']", "10"),
    ("env: {'true': '1'}\n", "env.true", "true"),  # quoted: what Helm makes of `Y` is refused too
    ("labels: {'1': x}\n", "labels['1']", "1"),
])
def test_keys_that_are_booleans_or_numbers_to_yaml_are_refused_by_both(helm, extra, field, helm_key, tmp_path,
                                                                      capsys):
    path = tmp_path / "values.yaml"
    path.write_text(MINIMAL + extra, encoding="utf-8")
    status, lines = render_py_verdict(path, capsys)
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"{path}: {field}: "), lines
    result = helm_template(helm, path)
    # the rule sits on the mapping's own schema (patternProperties): Helm names the key's field
    assert result.returncode != 0 and f"at '/{re.split(r'[.[]', field)[0]}/{helm_key}'" in result.stderr, result.stderr


def test_a_null_key_is_refused_by_both(helm, tmp_path, capsys):
    path = tmp_path / "values.yaml"
    path.write_text(MINIMAL + "env: {~: x}\n", encoding="utf-8")
    status, lines = render_py_verdict(path, capsys)
    assert status == 2 and lines == [f"{path}: env['~']: an empty or null key is not a string, and Helm refuses it; "
                                     "write the key, or remove the line"]
    assert helm_template(helm, path).returncode != 0


def test_the_key_messages_say_what_helm_would_read():
    from torchdag.errors import ValuesError

    with pytest.raises(ValuesError) as caught:
        parse_values("env: {Y: a, 010: b, 0x1F: c}\n", "v")
    assert caught.value.lines() == [
        "v: env['010']: the key 010 is not a string but the number 8 to Helm's YAML reader, which would name it '8'; "
        "keys are names: choose one that starts with a letter",
        "v: env['0x1F']: the key 0x1F is not a string but the number 31 to Helm's YAML reader, which would name it "
        "'31'; keys are names: choose one that starts with a letter",
        "v: env.Y: the key Y is not a string but the boolean true to Helm's YAML reader (y, yes, on / n, no, off), "
        "which would name it 'true'; quote it ('Y') for the text, or choose another key",
    ]


# --- what both accept, read alike ---------------------------------------------------------------

ACCEPTED = {
    "merge-word-as-value": BASE + "env: {HEREDOC: <<}\nlauncher: {extraArgs: [<<]}\n",
    "merge-word-in-args": BASE.replace('args: ["--type", "example"]', "args: [<<, --type, <<]"),
    "dates-as-text": BASE + "env: {SINCE: 2024-01-31, AT: 2024-01-31T10:00:00Z}\n",
    "underscored-numbers": BASE.replace("port: 25195", "port: 2_5_195") + "env: {ODD: 1_2x, HEX: 0x_g}\n",
    "second-document-overrides": BASE + "---\nport: 29400\nenv: {A: b}\n",
    "documents-merge-deeply": BASE + "timeouts: {rendezvous: 60, processGroup: 900}\n---\ntimeouts: {rendezvous: 30}\n",
    "documents-replace-lists": BASE + "---\nargs: [--only, this]\n",
    "documents-empty-ones": "---\n" + BASE + "---\n---\n...\n",
    "document-null-deletes": BASE + "env: {A: b}\n---\nenv: null\n",
    "explicit-start-and-end": "---\n" + BASE + "...\n",
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_both_accept_and_render_the_same_spec(helm, name, tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text(ACCEPTED[name], encoding="utf-8")
    assert_same_workflow(helm, path)


def test_documents_are_merged_as_helm_merges_them():
    assert parse_values("a: {p: 1, q: 2}\nl: [1, 2]\n---\na: {q: 3}\nl: [3]\n---\n", "v") == {
        "a": {"p": 1, "q": 3}, "l": [3]}
    assert parse_values("a: {p: 1}\n---\na: 5\n", "v") == {"a": 5}
    assert parse_values("a: 5\n---\na: {p: 1}\n", "v") == {"a": {"p": 1}}


# --- what both refuse -------------------------------------------------------------------------

REFUSED = {
    "int-tag-on-a-clock": (BASE.replace("port: 25195", 'port: !!int "4:10:00"'), "port",
                           "!!int '4:10:00' is not an integer"),
    "yaml-directive-1.1": ("%YAML 1.1\n---\n" + BASE, "(top level)", "a %YAML directive (line 1)"),
    "yaml-directive-1.2": ("%YAML 1.2\n---\n" + BASE, "(top level)", "a %YAML directive (line 1)"),
    "tag-directive": ("%TAG !e! tag:example.com,2000:\n---\n" + BASE, "(top level)", "a %TAG directive"),
    "separator-with-content": (BASE + "--- {port: 1}\n", "(top level)", "line 18: '---' is followed by '{port: 1}'"),
    "separator-of-four-dashes": (BASE + "----\nport: 1\n", "(top level)", "line 18: '---' is followed by '-'"),
    "separator-inside-a-quoted-string": (BASE + 'env: {A: "x\n---\ny"}\n', "(top level)", "not valid YAML at line"),
    "separator-inside-a-flow-list": (BASE.replace('args: ["--type", "example"]', 'args: ["--type",\n---\n"x"]'),
                                     "(top level)", "not valid YAML at line"),
    "second-document-a-list": (BASE + "---\n- port: 1\n", "(top level)", "YAML document 2 of 2 is a list"),
    "second-document-a-string": (BASE + "---\nport\n", "(top level)", "YAML document 2 of 2 is a string"),
    "merge-key-of-a-scalar": (BASE + "<<: 5\n", "(top level)", "not valid YAML"),
    "plain-y-as-a-string-value": (BASE.replace("name: bladetrain", "name: y"), "name", "must be a string"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_both_refuse_in_one_line(helm, name, tmp_path, capsys):
    text, field, fragment = REFUSED[name]
    path = tmp_path / "values.yaml"
    path.write_text(text, encoding="utf-8")
    status, lines = render_py_verdict(path, capsys)
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{path}: {field}: ") and fragment in lines[0], lines
    assert helm_template(helm, path).returncode != 0


@pytest.mark.parametrize("text, fragment", [
    (BASE + "...\nport: 1\n", "line 19, column 1: did not find expected <document start> (a document after '...'"),
    (BASE + "...\n%YAML 1.1\n---\nport: 2000\n", "a %YAML directive (line 19)"),
])
def test_render_py_refuses_what_helm_would_skip(helm, text, fragment, tmp_path, capsys):
    """Helm reads only the first YAML document between two `---` lines: a later one (after
    `...`, with or without a directive) it drops without a word. render.py refuses the file,
    saying why (chart/README.md, known differences)."""
    path = tmp_path / "values.yaml"
    path.write_text(text, encoding="utf-8")
    status, lines = render_py_verdict(path, capsys)
    assert status == 2 and len(lines) == 1 and fragment in lines[0], lines
    result = helm_template(helm, path)
    assert result.returncode == 0, result.stderr


def test_aliases_share_one_budget_across_documents():
    """Documents cannot dodge the alias limit by each staying under it."""
    from torchdag.errors import ValuesError

    document = "a: &a [" + ", ".join(["x"] * 100) + "]\nb: [" + ", ".join(["*a"] * 100) + "]\n"
    parse_values(document, "v")  # 10,000 copies: fine alone
    with pytest.raises(ValuesError, match="aliases may add at most 50000 values"):
        parse_values("---\n".join([document] * 6), "v")


# --- property: plain scalars and keys, as people write them ---------------------------------------


@pytest.mark.parametrize("shard", [0, pytest.param(1, marks=pytest.mark.scale)])  # make test-fast: the first 40
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=values_strategy(), words=st.lists(st.sampled_from(
    ["y", "N", "yes", "off", "1e3", "010", "0x1F", "1_000", "2024-01-31", "1:30", "<<", "~", ".5", "+1", "0b11",
     "0o17", "1.", "08", "=", "true", "Null"]), max_size=4))
def test_plain_files_get_the_same_verdict_and_spec(helm, shard, values, words):
    """The parity strategy's values, every string plain, plus some words YAML reads as other
    things, as env values, label keys and args: the same verdict from both, the same spec when
    both accept."""
    values = dict(values)
    if words:
        values["args"] = list(values.get("args") or []) + words
        values["labels"] = {**(values.get("labels") or {}), **{word: "x" for word in words}}
    text = yaml.dump(values, Dumper=PlainDumper, allow_unicode=True, width=2**20, sort_keys=False)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "values.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            pipeline.validate(pipeline.load(path))
            refused = None
        except ValuesError as err:  # anything else is a bug, and fails the test
            refused = err
        result = helm_template(helm, path)
        assert (refused is None) == (result.returncode == 0), f"render.py: {refused}\nhelm: {result.stderr}\n{text}"
        if refused is None:
            assert_same_workflow(helm, path)
