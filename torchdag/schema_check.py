"""The JSON Schema check of validation: every schema error as one Problem worded for a
person (`nodes[2].nic: 'x' is longer than 15 characters`), not jsonschema's own text."""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from typing import TYPE_CHECKING, Any, Iterator

import yaml

from .catalog import fill
from .errors import Problem
from .values import load_schema

if TYPE_CHECKING:
    import jsonschema


def _pattern_to_end(validator, pattern: str, instance, schema):
    """`pattern` as ECMA-262 (and Helm's Go validator) reads it: `$` is the end of the
    string. Python's `$` also matches before a final newline, so "name\\n" would pass."""
    if isinstance(instance, str) and not re.search(_python_anchor(pattern), instance):
        yield _jsonschema().ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.lru_cache(maxsize=None)
def _python_anchor(pattern: str) -> re.Pattern:
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _jsonschema():
    """jsonschema, imported when first needed: it words the problems of a document that
    surely_valid does not pass, and takes a tenth of a second to import."""
    import jsonschema

    return jsonschema


@functools.lru_cache(maxsize=None)
def _validator_class():
    jsonschema = _jsonschema()
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern_to_end})


@functools.lru_cache(maxsize=None)
def _validator():
    # The schema itself is checked against the metaschema by the tests (test_layout.py), not
    # on every run: that check alone took a fifth of a second.
    return _validator_class()(load_schema())


@functools.lru_cache(maxsize=None)
def _compiled_validator():
    """jsonschema-rs's validator, or None where it is not installed (the `fast` extra: a host
    without its wheel, such as an aarch64 one older than glibc 2.28, renders without it)."""
    try:
        import jsonschema_rs
    except ImportError:
        return None
    # The regex crate's engine (linear time, no backtracking limit to give up at): the schema's
    # patterns are RE2's kind anyway, for Helm's Go validator.
    return jsonschema_rs.Draft202012Validator(load_schema(), pattern_options=jsonschema_rs.RegexOptions())


def surely_valid(values: Any) -> bool:
    """True only if the schema passes `values`, judged by jsonschema-rs's compiled validator: at
    4,096 nodes a hundredth of the time iter_errors takes (which still words every problem).
    It judges only documents that the two cannot read apart: strings and keys of printable
    ASCII (no newline, before which Python's `$` also matches; no character that `\\s`, `\\d`,
    `\\w` or case folding read differently in Python's and Rust's regex dialects, nor one a
    length counts differently), integers within 2^53 (none that Rust rounds), finite floats
    (both compare numbers by value: 1.0 is `const: 1` and an integer), booleans and null.
    Anything else goes the long way."""
    compiled = _compiled_validator()
    return compiled is not None and _plain_json(values) and compiled.is_valid(values)


def _plain_json(document: Any) -> bool:
    pending = [document]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            if not all(type(key) is str and key.isascii() and key.isprintable() for key in item):
                return False
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is str:
            if not (item.isascii() and item.isprintable()):
                return False
        elif kind is int:
            if abs(item) > _LARGEST_EXACT_INTEGER:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif item is not None and kind is not bool:
            return False
    return True


_LARGEST_EXACT_INTEGER = 2**53 - 1


def schema_problems(values: Any) -> list[Problem]:
    plain, conditional, _ = schema_report(values)
    return plain + conditional


def schema_report(values: Any) -> tuple[list[Problem], list[Problem], bool]:
    """The schema's problems in two parts: those of one field, and those of rules across fields
    (a subschema under `if`: they judge a combination); and whether a key is unknown, which
    makes the combination unknown too: a misspelled key's default stands in for what was meant."""
    plain: list[Problem] = []
    conditional: list[Problem] = []
    unknown = False
    if surely_valid(values):
        return plain, conditional, unknown
    for error in _validator().iter_errors(values):
        unknown = unknown or error.validator == "additionalProperties" and isinstance(error.validator_value, bool)
        (conditional if _is_conditional(error) else plain).extend(_explain(error, values))
    return plain, conditional, unknown


def _is_conditional(error: jsonschema.ValidationError) -> bool:
    """A rule that holds only given other fields: the error comes from a `then` or an `else`
    that reaches into fields of the object its `if` read (not an `if` on the value itself,
    such as address-ipv4)."""
    path = list(error.schema_path)
    branch = max((i for i, part in enumerate(path) if part in ("then", "else")), default=None)
    return branch is not None and any(part in _DESCENTS for part in path[branch:])


_DESCENTS = {"properties", "items", "prefixItems", "patternProperties", "additionalProperties", "contains"}


def show(value: Any) -> str:
    """A value as the user wrote it: strings quoted ('x'), everything else as YAML writes it
    (true, null, [600], {a: 1}), never Python's spelling (True, None)."""
    text = repr(value) if isinstance(value, str) else _yaml_flow(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _yaml_flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=True).strip()
    text = text[:-len("\n...")].strip() if text.endswith("\n...") else text
    # a string's line breaks, which YAML folds over lines: JSON spells them \n, and is YAML too
    return json.dumps(value, ensure_ascii=False, default=str) if "\n" in text else text


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
                    if _validator_class()({**branch, "$defs": load_schema()["$defs"]}).is_valid(document)]
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
            hint = _did_you_mean_key(key, known, path)
            yield Problem(path + (key,), f"unknown key; {hint}allowed: {', '.join(known)}")
    elif kind == "type":
        wanted = error.validator_value
        wanted = [wanted] if isinstance(wanted, str) else wanted
        unquote = _unquote_hint(value, wanted)
        wanted = " or ".join(_SCHEMA_TYPE_WORDS.get(w, w) for w in wanted)
        got = "null" if value is None else f"{_type_name(value)} {show(value)}"
        yield Problem(path, f"must be {_article(wanted)} {wanted}, got {got}{unquote}")
    elif kind == "enum":
        options = error.validator_value
        yield Problem(path, f"{show(value)} is not one of: {', '.join(_yaml_flow(o) for o in options)}"
                            f"{_did_you_mean_value(value, options)}")
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


def _did_you_mean_value(value: Any, options: list) -> str:
    """`Ascend310P` -> ascend310p: the same word in another case first, else a close one."""
    if not isinstance(value, str):
        return ""
    words = [option for option in options if isinstance(option, str)]
    same = [word for word in words if word.lower() == value.lower()]
    hint = same or difflib.get_close_matches(value.lower(), words, n=1)
    return f"; did you mean {hint[0]}?" if hint else ""


def _did_you_mean_key(key: str, known: list[str], path: tuple) -> str:
    """A close key at this level, else the same key where the schema has it (`gang` at the top
    is scheduling.gang)."""
    hint = difflib.get_close_matches(key, known, n=1)
    if hint:
        return f"did you mean '{hint[0]}'? "
    here = "".join("[]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")
    elsewhere = [where for where in _key_paths().get(key.lower(), []) if where.rpartition(".")[0] != here]
    if elsewhere:
        named = [f"'{where}'" if "." in where else f"the top-level '{where}'" for where in elsewhere[:2]]
        return f"did you mean {' or '.join(named)}? (a key of another section) "
    return ""


@functools.lru_cache(maxsize=None)
def _key_paths() -> dict[str, list[str]]:
    """Every key of the schema -> where it is allowed (`gang` -> [`scheduling.gang`]); a
    node's keys are `nodes[].key`."""
    found: dict[str, list[str]] = {}

    def walk(node: Any, where: str, depth: int) -> None:
        while isinstance(node, dict) and "$ref" in node and "properties" not in node:
            node = load_schema()["$defs"][node["$ref"].split("/")[-1]]
        if not isinstance(node, dict) or depth > 3:
            return
        for key, sub in node.get("properties", {}).items():
            path = f"{where}.{key}" if where else key
            found.setdefault(key.lower(), []).append(path)
            walk(sub, path, depth + 1)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{where}[]", depth + 1)

    walk(load_schema(), "", 0)
    return found


def _unquote_hint(value: Any, wanted: list[str]) -> str:
    """A quoted number or boolean: say what to write instead."""
    if not isinstance(value, str):
        return ""
    if {"integer", "number"} & set(wanted):
        try:
            number = float(value)
        except ValueError:
            return ""
        if math.isfinite(number) and ("number" in wanted or number.is_integer()):
            return f"; write {value.strip()} without quotes"
    if "boolean" in wanted and value.strip() in ("true", "false"):
        return f"; write {value.strip()} without quotes"
    return ""


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
