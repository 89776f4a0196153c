"""The JSON Schema check of validation: every schema error as one Problem worded for a
person (`nodes[2].nic: 'x' is longer than 15 characters`), not jsonschema's own text."""

from __future__ import annotations

import difflib
import functools
import json
import re
from typing import Any, Iterator

import jsonschema

from .catalog import fill
from .problems import Problem
from .values import load_schema


def _pattern_to_end(validator, pattern: str, instance, schema):
    """`pattern` as ECMA-262 (and Helm's Go validator) reads it: `$` is the end of the
    string. Python's `$` also matches before a final newline, so "name\\n" would pass."""
    if isinstance(instance, str) and not re.search(_python_anchor(pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.lru_cache(maxsize=None)
def _python_anchor(pattern: str) -> re.Pattern:
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern_to_end})


@functools.lru_cache(maxsize=None)
def _validator():
    # The schema itself is checked against the metaschema by the tests (test_layout.py), not
    # on every run: that check alone took a fifth of a second.
    return _Validator(load_schema())


def schema_problems(values: Any) -> list[Problem]:
    problems = []
    for error in _validator().iter_errors(values):
        problems.extend(_explain(error, values))
    return problems


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _default_text(path: tuple) -> str:
    """What a missing key's default is, in words: `the default 29500`, `its keys' defaults`."""
    node: Any = load_schema()
    for part in path:
        node = node.get("properties", {}).get(part, {})
    return "its keys' defaults" if "properties" in node else f"the default {json.dumps(node.get('default'))}"


def _rule_message(error: jsonschema.ValidationError, missing: str | None = None) -> str | None:
    """The `x-message` of the innermost subschema on the failed keyword's way from the root
    (a rule the schema states, `x-rule`), filled with the value as `{value}` (and a missing
    key's default as `{default}`); or None."""
    node: Any = load_schema()
    message = None
    for part in [*error.schema_path, None]:
        while isinstance(node, dict) and part not in node and "$ref" in node:  # a $ref the path leaves out
            node = load_schema()["$defs"][node["$ref"].split("/")[-1]]
        if isinstance(node, dict) and "x-message" in node:
            message = node["x-message"]
        if part == "if":  # jsonschema records `then` and `else` under the `if` beside them
            continue
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break  # the end of the path, or one this walk cannot follow
    if not message:
        return None
    default = _default_text((*error.absolute_path, missing)) if missing and "{default}" in message else ""
    return fill(message, {"value": show(error.instance), "default": default})


def _rule_condition(error: jsonschema.ValidationError, document: Any) -> tuple | None:
    """For a rule of the document's own `allOf` that asks something of one key because of
    another (`if: {required: [K]}`, or an `anyOf` of such conditions: the first that holds),
    the path of K: e.g. automountServiceAccountToken for executorServiceAccountName, rbac for
    serviceAccountName. Several values files report a key no file sets in K's file."""
    node: Any = load_schema()
    for part in error.schema_path:
        if part in ("then", "else") and isinstance(node, dict):
            condition = node.get("if") or {}
            held = [branch for branch in condition.get("anyOf", [])  # with $defs, for a branch's $ref
                    if _Validator({**branch, "$defs": load_schema()["$defs"]}).is_valid(document)]
            required = (held[0] if held else condition).get("required") or []
            return (required[0],) if required else None
        if part != "allOf" and not isinstance(part, int):
            return None  # not a rule at the document's top
        node = node[part]
    return None


def _explain(error: jsonschema.ValidationError, document: Any) -> Iterator[Problem]:
    path = tuple(error.absolute_path)
    kind = error.validator
    schema = error.schema if isinstance(error.schema, dict) else {}
    allowed = schema.get("x-allowed")
    value = error.instance
    rule = _rule_message(error, error.message.split("'")[1] if kind == "required" else None)
    if "propertyNames" in error.schema_path:
        # jsonschema reports a bad key at its object's path with the key as the instance.
        yield Problem(path + (value,), rule or f"key {show(value)} is not {allowed or 'allowed here'}")
        return
    if kind == "required":
        missing = error.message.split("'")[1]
        yield Problem(path + (missing,), rule or "is required", cause=_rule_condition(error, document))
    elif rule:
        yield Problem(path, rule, cause=_rule_condition(error, document))
    elif kind == "additionalProperties":
        known = sorted(schema.get("properties", {}))
        for key in sorted(set(value) - set(known)):
            hint = difflib.get_close_matches(key, known, n=1)
            did_you_mean = f"did you mean '{hint[0]}'? " if hint else ""
            yield Problem(path + (key,), f"unknown key; {did_you_mean}allowed: {', '.join(known)}")
    elif kind == "type":
        wanted = error.validator_value
        wanted = [wanted] if isinstance(wanted, str) else wanted
        wanted = " or ".join(_SCHEMA_TYPE_WORDS.get(w, w) for w in wanted)
        yield Problem(path, f"must be {_article(wanted)} {wanted}, got {_type_name(value)} {show(value)}")
    elif kind == "enum":
        yield Problem(path, f"{show(value)} is not one of: {', '.join(map(str, error.validator_value))}")
    elif kind == "maxLength":
        yield Problem(path, f"{show(value)} is longer than {error.validator_value} characters")
    elif kind == "minLength":
        yield Problem(path, "must not be empty")
    elif kind == "pattern":
        yield Problem(path, f"{show(value)} is not {allowed or 'of the form ' + error.validator_value}")
    elif kind in ("minimum", "maximum"):
        bound = "at least" if kind == "minimum" else "at most"
        extra = ""
        if "minimum" in schema and "maximum" in schema:
            extra = f" (allowed: {schema['minimum']}-{schema['maximum']})"
        yield Problem(path, f"must be {bound} {error.validator_value}, got {show(value)}{extra}")
    elif kind == "minItems":
        yield Problem(path,
                      f"must have at least {error.validator_value} item{'s' if error.validator_value != 1 else ''}")
    elif kind == "maxItems":
        yield Problem(path, f"must have at most {error.validator_value} items, got {len(value)}")
    elif kind in ("anyOf", "oneOf"):
        shown = "" if isinstance(value, (dict, list)) else f"{show(value)} "
        yield Problem(path, f"{shown}is not {allowed or _first_allowed(error) or 'valid here'}")
    elif kind == "const":
        yield Problem(path, f"must be {show(error.validator_value)}")
    else:  # a keyword without a friendlier wording yet: jsonschema's own message is still one line
        yield Problem(path, error.message)


def _first_allowed(error: jsonschema.ValidationError) -> str | None:
    for sub in error.context or ():
        if isinstance(sub.schema, dict) and sub.schema.get("x-allowed"):
            return sub.schema["x-allowed"]
    # anyOf over a $ref: look the referenced definition up.
    for option in error.validator_value or ():
        ref = option.get("$ref", "") if isinstance(option, dict) else ""
        if ref.startswith("#/$defs/"):
            target = load_schema()["$defs"].get(ref.split("/")[-1], {})
            if target.get("x-allowed"):
                return target["x-allowed"]
    return None


_SCHEMA_TYPE_WORDS = {"array": "list", "object": "mapping"}


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _type_name(value: Any) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
        type(None): "null",
    }.get(type(value), type(value).__name__)
