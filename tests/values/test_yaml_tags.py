"""Explicit YAML tags: read as Helm's go-yaml reads them, a tagged value
not of its tag's kind refused in one line naming the field (Helm refuses the file), and the
tags Helm would drop silently refused naming the field. Never a traceback."""

from __future__ import annotations

import itertools

import pytest

from chart_helpers import argo_document, helm_template
from cli_helpers import BASE, one_line, render_py, write
from helpers import parse_values
from torchdag import pipeline
from torchdag.errors import ValuesError

WITHOUT = BASE.replace("port: 25195\n", "").replace('args: ["--type", "example"]\n', "")

# (extra lines, the field, render.py's message fragment); helm refuses each with go-yaml's own message
MISMATCHED = [
    ("port: !!int abc", "port", "!!int 'abc' is not an integer, so Helm refuses the file too"),
    ("port: !!bool maybe", "port", "!!bool 'maybe' is not a boolean"),
    ("port: !!timestamp 2024-13-45", "port", "!!timestamp '2024-13-45' is not a date"),
    ("port: !!float x", "port", "!!float 'x' is not a number"),
    ("port: !!null x", "port", "!!null 'x' is not null"),
    ("port: !!int \"4:10:00\"", "port", "!!int '4:10:00' is not an integer"),
    ("port: !!int 1e3", "port", "!!int '1e3' is not an integer"),  # go-yaml: a float, not an int
    ("port: !<tag:yaml.org,2002:int> 0x", "port", "!!int '0x' is not an integer"),
    ("args: [ok, !!bool yEs]", "args[1]", "!!bool 'yEs' is not a boolean"),  # go-yaml's words are case-exact
    ("env: {A: !!timestamp '2024-02-30'}", "env.A", "!!timestamp '2024-02-30' is not a date"),
    ("timeouts: {rendezvous: !!int 1.5}", "timeouts.rendezvous", "!!int '1.5' is not an integer"),
]

# Tags Helm drops without a word (reading the value as written): refused by render.py
DROPPED = [
    ("env: {A: !!binary aGVsbG8=}", "env.A", "the YAML tag !!binary is not accepted"),
    ("labels: {team: !custom ml}", "labels.team", "the YAML tag !custom is not accepted"),
    ("args: [!!python/name:os.system x]", "args[0]", "the YAML tag !!python/name:os.system is not accepted"),
    ("args: !!python/tuple [a, b]", "args", "the YAML tag !!python/tuple is on a list"),
    ("resources: !!set {cpu}", "resources", "the YAML tag !!set is on a mapping"),
    ("args: [!!omap [a: 1]]", "args[0]", "the YAML tag !!omap is on a list"),
    ("env: {A: !!str [x]}", "env.A", "the YAML tag !!str is on a list"),
    ("env: {A: !!map abc}", "env.A", "the YAML tag !!map is on a plain value"),
    ("args: !!seq {a: b}", "args", "the YAML tag !!seq is on a mapping"),
    ("env: {!custom A: b}", "(top level)", "column 7: a key: the YAML tag !custom is not accepted"),
]


@pytest.mark.parametrize("extra, field, fragment", MISMATCHED + DROPPED, ids=[c[0] for c in MISMATCHED + DROPPED])
def test_a_refused_tag_is_one_line_naming_the_field(extra, field, fragment, tmp_path):
    values = write(tmp_path, WITHOUT + extra + "\n")
    out = tmp_path / "out" / "workflow.yaml"
    done = render_py(str(values), "-o", str(out))
    assert done.returncode == 2 and done.stdout == "" and not out.parent.exists(), done.stderr
    line = one_line(done.stderr)
    assert line.startswith(f"{values}: {field}: ") and fragment in line, line


@pytest.mark.parametrize("extra", [c[0] for c in MISMATCHED], ids=[c[0] for c in MISMATCHED])
def test_helm_refuses_a_value_not_of_its_tags_kind(extra, helm, tmp_path):
    result = helm_template(helm, write(tmp_path, WITHOUT + extra + "\n"))
    assert result.returncode != 0 and "cannot decode" in result.stderr, result.stderr


def test_helm_drops_the_other_tags_silently(helm, tmp_path):
    """The known difference chart/README.md states: what render.py refuses, Helm reads as written."""
    values = write(tmp_path, WITHOUT + "env: {A: !!binary aGVsbG8=, B: !custom text}\n")
    env = argo_document(helm_template(helm, values).stdout)["spec"]["templates"]
    rendered = str(env)
    assert "'value': 'hello'" in rendered and "'value': 'text'" in rendered


def test_tagged_values_of_their_kind_render_as_in_helm(helm, tmp_path):
    """`!!str 5` is "5", `!!float 2` is 2.0 (a cpu of "2"), `!!int "25195"` is 25195, `!!null ~` is null,
    and a plain date, valid or not, is a string: the same spec from both renderers."""
    values = write(tmp_path, WITHOUT + 'port: !!int "25195"\nargs: [!!str 5, 2024-01-31, 2024-13-45, '
                                       '!!timestamp 2024-1-2T3:04:05Z]\n'
                                       "resources: {requests: {cpu: !!float 2, memory: !!str 1Gi}}\n"
                                       "workingDir: !!null ~\npreflight: {enabled: !!bool No}\n")
    ours = argo_document(pipeline.run(values).text)
    result = helm_template(helm, values)
    assert result.returncode == 0, result.stderr
    assert ours["spec"] == argo_document(result.stdout)["spec"]
    text = str(ours)
    assert "'5', '2024-01-31', '2024-13-45', '2024-1-2T3:04:05Z'" in text and "--master_port=25195" in text


TAGS = ["!!int", "!!float", "!!bool", "!!null", "!!str", "!!timestamp", "!!binary", "!!set", "!!omap", "!!pairs",
        "!!map", "!!seq", "!!merge", "!!value", "!custom", "!", "!!python/object:os.system", "!<tag:yaml.org,2002:int>"]
TEXTS = ["abc", "5", "0x1F", "1e3", "1e400", ".inf", "~", "''", "y", "2024-01-01", "2024-13-45",
         "2001-12-14t21:59:43.10-05:00", "<<", "=", "[1]", "{a: 1}", "aGVsbG8=", "'4:10:00'", "99999999999999999999",
         "&a 5", "[&x 1, *x]"]


def test_no_tag_on_any_value_or_key_fails_otherwise_than_in_lines():
    """Every tag on every kind of value, as a value, a key, a list item and the document: a
    ValuesError of one-line problems or values, never another exception."""
    for tag, text in itertools.product(TAGS, TEXTS):
        for document in (f"a: {tag} {text}\n", f"{tag} {text}: 1\n", f"a: [{tag} {text}]\n", f"{tag} {text}\n"):
            try:
                parse_values(document, "x")
            except ValuesError as err:
                assert all("\n" not in line for line in err.lines()), document


def test_a_refused_tag_is_named_wherever_an_alias_copies_it():
    with pytest.raises(ValuesError) as caught:
        parse_values("args: [&a !custom 1, ok, *a]\n", "x")
    assert [line.split(": ")[1] for line in caught.value.lines()] == ["args[0]", "args[2]"]
