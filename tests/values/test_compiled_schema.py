"""The compiled schema check (schema_check.surely_valid): jsonschema-rs passes a plain valid
document without walking jsonschema's iter_errors, so it must never pass one that jsonschema
refuses. Every values file the tests hold is judged by both; on a document outside the plain
kind the two can read apart, the compiled check is not asked."""

from __future__ import annotations

import jsonschema_rs
import pytest

from bad_cases import BAD_CASES, FIT_CASES
from helpers import REPO
from torchdag import schema_check
from torchdag.errors import ValuesError
from torchdag.values import coalesce, parse, schema_defaults


def merged(text: str):
    """What the validate phase checks: the file with the schema's defaults under it; None when
    the load phase already refuses it."""
    try:
        return coalesce(parse(text, "values.yaml").values, schema_defaults())
    except ValuesError:
        return None


FILES = sorted([*(REPO / "examples").glob("*.yaml"), *(REPO / "tests" / "cases").glob("*.yaml")])
TEXTS = [(case.id, case.text) for case in BAD_CASES + FIT_CASES] + [(p.name, p.read_text()) for p in FILES]
DOCUMENTS = [(name, merged(text)) for name, text in TEXTS if merged(text) is not None]


def refused_by_jsonschema(document) -> bool:
    return any(True for _ in schema_check._validator().iter_errors(document))


@pytest.mark.parametrize("name, document", DOCUMENTS, ids=[name for name, _ in DOCUMENTS])
def test_the_compiled_check_passes_what_jsonschema_passes_and_nothing_else(name, document):
    if schema_check._plain_json(document):
        assert schema_check.surely_valid(document) is not refused_by_jsonschema(document)
    else:
        assert not schema_check.surely_valid(document)


def test_most_cases_are_judged_by_both():
    """The test above compares the two on most of the corpus, refusals included."""
    documents = [document for _, document in DOCUMENTS]
    plain = [d for d in documents if schema_check._plain_json(d)]
    refused = [d for d in plain if refused_by_jsonschema(d)]
    assert len(plain) > 0.8 * len(documents) and len(refused) > 50


def base_with(**changes) -> dict:
    document = merged((REPO / "examples" / "cluster.yaml").read_text())
    document.update(changes)
    return document


def test_a_document_the_regex_dialects_read_apart_goes_the_long_way():
    """A hostPath with a '..' element before a final newline: Python's `$` matches there and
    jsonschema refuses it (host-path-backsteps); Rust's `$` is only the end, so jsonschema-rs
    alone would pass it."""
    volumes = [{"name": "data", "mountPath": "/data", "hostPath": {"path": "/data/..\n"}}]
    document = base_with(volumes=volumes)
    assert schema_check._compiled_validator().is_valid(document)
    assert refused_by_jsonschema(document)
    assert not schema_check.surely_valid(document)
    plain, _, _ = schema_check.schema_report(document)
    assert [p.path for p in plain] == [("volumes", 0, "hostPath", "path")]


@pytest.mark.parametrize("value", ["na\u00efve", "line\nbreak", "tab\there", float("nan"), 2**53, {1: "x"}, b"bytes"],
                         ids=["non-ascii", "newline", "tab", "nan", "beyond-2^53", "integer-key", "bytes"])
def test_what_is_not_plain_json(value):
    assert not schema_check._plain_json(base_with(extra=[value]))


def test_plain_json():
    assert schema_check._plain_json(base_with(extra=[True, None, -(2**53 - 1), 0.5, "printable ASCII ~", {"k": []}]))


NUMBERS = [({"const": 1}, 1.0), ({"enum": [1, 2]}, 2.0), ({"not": {"const": 1}}, 1.0),
           ({"const": {"a": [1]}}, {"a": [1.0]}), ({"enum": [True]}, 1.0), ({"type": "integer"}, 1.0),
           ({"type": "integer"}, 1e300), ({"type": "integer"}, 1.5),
           ({"maximum": 65535}, 65535.00000000001), ({"minimum": 1}, 0.9999999999999999),
           ({"maximum": 2**53 - 1}, 2.0**53), ({"const": 0}, -0.0)]


@pytest.mark.parametrize("schema, number", NUMBERS, ids=[f"{s}-{n}" for s, n in NUMBERS])
def test_both_read_numbers_alike(schema, number):
    """Why a float is plain: equal by value to an integer in `const` and `enum`, an integer
    when it has no fraction, compared exactly against a bound, in both."""
    compiled = jsonschema_rs.Draft202012Validator(schema).is_valid(number)
    assert compiled is schema_check._validator_class()(schema).is_valid(number)


def told(path) -> list[str]:
    from torchdag import pipeline

    try:
        return [pipeline.run(path).text]
    except ValuesError as err:
        return err.lines()


def test_without_jsonschema_rs_the_same_files_pass_and_the_same_problems_are_told(monkeypatch, tmp_path):
    """jsonschema-rs is the `fast` extra: where it is not installed, surely_valid passes nothing
    and jsonschema judges every file, with the same verdicts and words."""
    paths = [FILES[0]]
    for case in BAD_CASES[:20]:
        paths.append(tmp_path / f"{len(paths)}.yaml")
        paths[-1].write_text(case.text)
    with_it = [told(path) for path in paths]
    monkeypatch.setattr(schema_check, "_compiled_validator", lambda: None)
    assert [told(path) for path in paths] == with_it
    for name, document in DOCUMENTS:
        assert not schema_check.surely_valid(document), name
