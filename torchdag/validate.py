"""Validate phase: the JSON Schema first, then the rules a schema cannot express.

Each problem is one line naming the field path and what is allowed. Every rule here is
mirrored by a `fail` in chart/templates/_validate.tpl with the same wording.
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import Any, Iterator

import jsonschema

from .problems import Problem
from .values import load_schema

ACCELERATOR_BACKEND = {
    "ascend910": "hccl",
    "ascend310p": "hccl",
    "ascend310": "hccl",
    "nvidia": "nccl",
    "cpu": "gloo",
}
ASCEND = ("ascend310p", "ascend310", "ascend910")

# Environment variables torchdag sets itself; a user value would silently fight them.
RESERVED_ENV = (
    "TORCHDAG_BACKEND",
    "TORCHDAG_DEVICE",
    "TORCHDAG_PG_TIMEOUT",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "HCCL_SOCKET_IFNAME",
    "HCCL_IF_IP",
    "HCCL_CONNECT_TIMEOUT",
    "HCCL_EXEC_TIMEOUT",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
)
# Volume names and mount paths the rendered pods use already.
BUILTIN_VOLUMES = ("dshm", "ascend-driver-lib64", "ascend-driver-version", "ascend-dcmi", "ascend-npu-smi", "ascend-install-info")

ARGO_OPEN = "{{"


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
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return _Validator(schema)


def schema_problems(values: Any) -> list[Problem]:
    problems = []
    for error in _validator().iter_errors(values):
        problems.extend(_explain(error))
    return problems


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _explain(error: jsonschema.ValidationError) -> Iterator[Problem]:
    path = tuple(error.absolute_path)
    kind = error.validator
    schema = error.schema if isinstance(error.schema, dict) else {}
    allowed = schema.get("x-allowed")
    value = error.instance
    if "propertyNames" in error.schema_path:
        # jsonschema reports a bad key at its object's path with the key as the instance.
        yield Problem(path + (value,), f"key {_show(value)} is not {allowed or 'allowed here'}")
        return
    if kind == "required":
        missing = error.message.split("'")[1]
        yield Problem(path + (missing,), "is required")
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
        yield Problem(path, f"must be {_article(wanted)} {wanted}, got {_type_name(value)} {_show(value)}")
    elif kind == "enum":
        yield Problem(path, f"{_show(value)} is not one of: {', '.join(map(str, error.validator_value))}")
    elif kind == "maxLength":
        yield Problem(path, f"{_show(value)} is longer than {error.validator_value} characters")
    elif kind == "minLength":
        yield Problem(path, "must not be empty")
    elif kind == "pattern":
        yield Problem(path, f"{_show(value)} is not {allowed or 'of the form ' + error.validator_value}")
    elif kind in ("minimum", "maximum"):
        bound = "at least" if kind == "minimum" else "at most"
        extra = ""
        if "minimum" in schema and "maximum" in schema:
            extra = f" (allowed: {schema['minimum']}-{schema['maximum']})"
        yield Problem(path, f"must be {bound} {error.validator_value}, got {_show(value)}{extra}")
    elif kind == "minItems":
        yield Problem(path, f"must have at least {error.validator_value} item{'s' if error.validator_value != 1 else ''}")
    elif kind == "maxItems":
        yield Problem(path, f"must have at most {error.validator_value} items, got {len(value)}")
    elif kind in ("anyOf", "oneOf"):
        shown = "" if isinstance(value, (dict, list)) else f"{_show(value)} "
        yield Problem(path, f"{shown}is not {allowed or _first_allowed(error) or 'valid here'}")
    elif kind == "const":
        yield Problem(path, f"must be {_show(error.validator_value)}")
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


def placeholder_problems(values: Any, path: tuple = ()) -> list[Problem]:
    """Strings no Workflow can carry: `{{` (Argo substitutes it everywhere and offers no
    escape, argo#8253) and NUL (execve and environ end a string there)."""
    found = []
    if isinstance(values, str):
        if ARGO_OPEN in values:
            found.append(Problem(path, f"{_show(values)} contains '{{{{', which Argo would read as a placeholder and cannot escape; remove it"))
        if "\x00" in values:
            found.append(Problem(path, "contains a NUL character, which no process argument or environment value can carry"))
    elif isinstance(values, dict):
        for key, item in values.items():
            if isinstance(key, str) and ARGO_OPEN in key:
                found.append(Problem(path + (key,), "key contains '{{', which Argo would read as a placeholder and cannot escape; remove it"))
            found.extend(placeholder_problems(item, path + (key,)))
    elif isinstance(values, list):
        for index, item in enumerate(values):
            found.extend(placeholder_problems(item, path + (index,)))
    return found


IPV4 = re.compile(r"^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$")


def is_ipv4(text: str) -> bool:
    # The same regular expression is used by the chart (RE2 and Python agree on it).
    return bool(IPV4.fullmatch(text))


def semantic_problems(values: dict) -> list[Problem]:
    """Rules across fields. Only called on values that passed the schema."""
    problems: list[Problem] = []
    nodes = values["nodes"]

    first_by_name: dict[str, int] = {}
    first_by_address: dict[str, int] = {}
    master_index = None
    for index, node in enumerate(nodes):
        name = node["name"]
        address = node.get("address", name)
        if name in first_by_name:
            problems.append(Problem(("nodes", index, "name"), f"{name!r} duplicates nodes[{first_by_name[name]}].name; each machine is listed once"))
        elif address in first_by_address:
            problems.append(Problem(("nodes", index, "address"), f"{address!r} is also the address of nodes[{first_by_address[address]}]; each node needs its own address"))
        first_by_name.setdefault(name, index)
        first_by_address.setdefault(address, index)
        if node.get("master"):
            if master_index is None:
                master_index = index
            else:
                problems.append(Problem(("nodes", index, "master"), f"more than one master: nodes[{master_index}] is the master already; at most one node may set master: true"))

    kinds = [node.get("accelerator", "cpu") for node in nodes]
    backend = values.get("backend", "auto")
    distinct = sorted(set(kinds), key=kinds.index)
    if backend == "auto" and len(distinct) > 1:
        problems.append(Problem(("backend",), f"auto cannot pick one backend for nodes of different accelerator kinds ({', '.join(distinct)}): hccl and nccl cannot span them; set backend: gloo to train across them"))
    elif backend == "hccl":
        for index, kind in enumerate(kinds):
            if kind not in ASCEND:
                problems.append(Problem(("backend",), f"hccl needs Ascend nodes, but nodes[{index}] is {kind}; use backend: gloo to mix kinds"))
                break
    elif backend == "nccl":
        for index, kind in enumerate(kinds):
            if kind != "nvidia":
                problems.append(Problem(("backend",), f"nccl needs nvidia nodes, but nodes[{index}] is {kind}; use backend: gloo to mix kinds"))
                break

    for key in values.get("env", {}):
        if key in RESERVED_ENV:
            problems.append(Problem(("env", key), "is set by torchdag itself (from nodes[], port, timeouts and backend); remove it and use those keys"))

    seen_volumes: dict[str, int] = {}
    seen_mounts: dict[str, int] = {}
    for index, volume in enumerate(values.get("volumes", [])):
        name, mount = volume["name"], volume["mountPath"].rstrip("/") or "/"
        if name in BUILTIN_VOLUMES:
            problems.append(Problem(("volumes", index, "name"), f"{name!r} is used by torchdag itself; choose another name"))
        elif name in seen_volumes:
            problems.append(Problem(("volumes", index, "name"), f"{name!r} duplicates volumes[{seen_volumes[name]}].name"))
        seen_volumes.setdefault(name, index)
        if mount == "/dev/shm" and values.get("shmSize"):
            problems.append(Problem(("volumes", index, "mountPath"), "/dev/shm is mounted by torchdag (shmSize); set shmSize: \"\" to mount your own"))
        elif mount in seen_mounts:
            problems.append(Problem(("volumes", index, "mountPath"), f"{mount!r} is also the mountPath of volumes[{seen_mounts[mount]}]"))
        seen_mounts.setdefault(mount, index)
    return problems


def validate(values: Any) -> list[Problem]:
    """All problems of a merged values document; an empty list means it is valid."""
    problems = schema_problems(values) + placeholder_problems(values)
    if problems:
        return problems
    return semantic_problems(values)
