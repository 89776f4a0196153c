"""Load phase: read cluster.yaml, then lay it over the schema's defaults the way Helm does.

render.py and the Helm chart must see the same values, so the defaults come from one
place (the `default` keywords of schema/values.schema.json, which chart/values.yaml is
generated from) and are merged with Helm's rules: maps merge key by key, lists and
scalars replace, and a user `null` removes a default.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

import yaml

from . import SCHEMA_PATH
from .problems import Problem, ValuesError

try:  # libyaml makes loading a 1,000-node file several times faster
    _BaseLoader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _BaseLoader = yaml.SafeLoader


class _StrictLoader(_BaseLoader):
    """Safe loader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is not a string; quote it", key_node.start_mark
            )
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# Read plain scalars the way Helm does (go-yaml v2), so both tools see the same values:
# `y`/`n` are booleans there, and `1e3` or `1.5e3` are numbers (PyYAML keeps them strings).
_StrictLoader.bool_values = {**yaml.constructor.SafeConstructor.bool_values, "y": True, "n": False}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)$"),
    list("-+.0123456789"),
)


@functools.lru_cache(maxsize=None)
def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def schema_defaults(schema: dict | None = None) -> dict:
    """The values a user gets without writing them: the schema's `default`s, nested.

    An object property whose default is `{}` gets its own properties' defaults filled in,
    which is exactly the shape of chart/values.yaml.
    """
    schema = schema if schema is not None else load_schema()
    return _defaults_of(schema)


def _defaults_of(schema: dict) -> dict:
    out: dict = {}
    for key, prop in schema.get("properties", {}).items():
        if "default" not in prop:
            continue
        value = copy.deepcopy(prop["default"])
        if isinstance(value, dict) and "properties" in prop:
            value = {**_defaults_of(prop), **value}
        out[key] = value
    return out


def fill_absent(values: dict, schema: dict | None = None) -> dict:
    """Valid values with every key present, so the plan never guesses what a missing key
    means: one whose absence means "off" (`x-null`) as None, one with an empty default
    ("", [], {}: a user null deleted it) as that empty value."""
    schema = schema if schema is not None else load_schema()
    out = dict(values)
    for key, prop in schema.get("properties", {}).items():
        if "properties" in prop and isinstance(out.get(key), dict):
            out[key] = fill_absent(out[key], prop)
        elif "x-null" in prop:
            out.setdefault(key, None)
        elif "default" in prop and prop["default"] in ("", [], {}):
            out.setdefault(key, copy.deepcopy(prop["default"]))
    return out


def coalesce(user: Any, defaults: Any) -> Any:
    """Helm's merge of user values over chart defaults (chartutil.CoalesceTables)."""
    if not isinstance(user, dict) or not isinstance(defaults, dict):
        return copy.deepcopy(user)
    merged = {}
    for key, default_value in defaults.items():
        if key not in user:
            merged[key] = copy.deepcopy(default_value)
        elif user[key] is None:
            continue  # a user null deletes the default
        else:
            merged[key] = coalesce(user[key], default_value)
    for key, value in user.items():
        if key not in defaults:
            merged[key] = copy.deepcopy(value)
    return merged


def parse_values(text: str, source: str) -> Any:
    """YAML text -> Python data, or ValuesError with the line and column of the fault."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a safe loader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise ValuesError(source, [Problem((), f"not valid YAML at {where}: {err.problem or err.context}")]) from None
    except yaml.YAMLError as err:
        raise ValuesError(source, [Problem((), f"not valid YAML: {err}")]) from None
    if data is None:
        raise ValuesError(source, [Problem((), "the file is empty; see examples/cluster.yaml")])
    if not isinstance(data, dict):
        raise ValuesError(source, [Problem((), f"must be a mapping of keys to values, got {type(data).__name__}")])
    return data


def load_values(path: str | Path) -> tuple[dict, str]:
    """Read a values file. Returns (user values, the name used in error messages)."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValuesError(source, [Problem((), "no such file")]) from None
    except IsADirectoryError:
        raise ValuesError(source, [Problem((), "is a directory, not a values file")]) from None
    except UnicodeDecodeError as err:
        raise ValuesError(source, [Problem((), f"not UTF-8 text ({err.reason} at byte {err.start})")]) from None
    except OSError as err:
        raise ValuesError(source, [Problem((), f"cannot read: {err.strerror}")]) from None
    return parse_values(text, source), source
