"""Load phase: read cluster.yaml (torchdag/yamlread.py reads its YAML as Helm does), then
lay it over the schema's defaults the way Helm does.

render.py and the Helm chart must see the same values, so the defaults come from one
place (the `default` keywords of schema/values.schema.json, which chart/values.yaml is
generated from) and are merged with Helm's rules: maps merge key by key, lists and
scalars replace, and a user `null` removes a default. Several files (`-f`) are read and
merged in order the same way (read_all), each problem reported in the file its field's
merged value came from (blame).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from . import SCHEMA_PATH, catalog
from .errors import Problem, ValuesError
from .yamlread import (
    MAX_DEPTH,
    GraphProblem,
    OddKey,
    RefusedTag,
    full_width_fields,
    full_width_marks,
    load_documents,
    yaml_problem,
)

# The largest integer a float64 (Helm's numbers, JSON's in practice) holds with its neighbours.
MAX_SAFE_INTEGER = 2**53 - 1


def number_problems(data: Any) -> tuple[list[Problem], list[Problem]]:
    """(non-finite numbers and refused YAML tags, integers beyond 2^53) anywhere in loaded
    values, by path.

    `.inf`, `-.inf` and `.nan` have no JSON form: Helm refuses the whole file ("json:
    unsupported value: +Inf") and Kubernetes could not carry them. Integers beyond 2^53
    lose digits in Helm, which holds every number as a float64. Iterative: the data may be
    alias-expanded (bounded by MAX_VALUES)."""
    non_finite, too_big = [], []
    if not _may_hold_number_problems(data):  # naming a field costs a walk with paths: only for a file with one
        return non_finite, too_big
    stack: list[tuple[tuple, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((path + (key,), item) for key, item in value.items())
            non_finite.extend(Problem(path + (str(key),), key.message) for key in value if isinstance(key, OddKey))
        elif isinstance(value, list):
            stack.extend((path + (index,), item) for index, item in enumerate(value))
        elif isinstance(value, RefusedTag):
            non_finite.append(Problem(path, value.message))
        elif isinstance(value, float) and not math.isfinite(value):
            spelling = ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
            non_finite.append(Problem(path, f"{spelling} is not a finite number, which JSON, Helm and Kubernetes "
                                            "cannot carry; give a finite number, or quote it for the string"))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
            too_big.append(Problem(path, f"{value} is beyond 2^53 ({MAX_SAFE_INTEGER + 1}), where Helm's numbers "
                                         "(float64) lose digits; quote it as a string or give a smaller number"))
    return non_finite, too_big


def _may_hold_number_problems(data: Any) -> bool:
    """Whether number_problems has anything to name: a value or key of one of its kinds."""
    pending = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            if any(isinstance(key, OddKey) for key in value):
                return True
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, (RefusedTag, float)) or isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
            return True
    return False


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


def merge_maps(base: dict, over: dict) -> dict:
    """Helm's merge of values files (`-f a.yaml -f b.yaml`) and of one file's YAML documents
    (pkg/cli/values mergeMaps): mappings merge key by key, anything else in `over` replaces
    (a list whole, and a null stays a null, which then deletes a default)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merge_maps(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def full_width_problems(text: str) -> list[Problem]:
    """Full-width punctuation where YAML needs ASCII (yamlread.full_width_marks), each named
    with its line and column: the parser's own message about it would name the next line."""
    message = catalog.catalog()["fullWidth"]["inText"]
    return [Problem((), catalog.fill(message, {"line": line, "column": column, **full_width_fields(char)}))
            for line, column, char in full_width_marks(text)]


def _documents(text: str, source: str) -> list:
    """load_documents, each error as the ValuesError of the whole file."""
    try:
        documents = load_documents(text)
    except GraphProblem as err:
        raise ValuesError(source, [Problem((), str(err))]) from None
    except yaml.YAMLError as err:
        raise ValuesError(source, full_width_problems(text) or [Problem((), yaml_problem(err, text))]) from None
    except RecursionError:  # pragma: no cover - only PyYAML's pure-Python composer recurses
        message = f"lists and mappings are nested more than {MAX_DEPTH} levels deep; the limit is {MAX_DEPTH}"
        raise ValuesError(source, [Problem((), message)]) from None
    # YAML that parses, but not as meant: `{port： 1}` is a key "port： 1", `[a，b]` one item
    problems = full_width_problems(text)
    if problems:
        raise ValuesError(source, problems)
    return documents


def _parse(text: str, source: str) -> dict:
    """YAML text -> a mapping, or ValuesError: the line and column of a syntax fault, a file
    too deep or too alias-expanded to build (refused before building it), not a mapping.
    Several documents are merged as Helm merges them, each of them a mapping."""
    documents = _documents(text, source)
    for number, document in enumerate(documents, 1):
        if len(documents) > 1 and not isinstance(document, dict):
            raise ValuesError(source, [Problem((), f"YAML document {number} of {len(documents)} is a "
                                                   f"{_kind_name(document)}: Helm merges a values file's documents, "
                                                   "so each must be a mapping of keys to values")])
    data = functools.reduce(merge_maps, documents) if documents else None
    if data is None:
        raise ValuesError(source, [Problem((), "the file is empty; see examples/cluster.yaml")])
    if isinstance(data, RefusedTag):
        raise ValuesError(source, [Problem((), data.message)])
    if not isinstance(data, dict):
        raise ValuesError(source, [Problem((), f"must be a mapping of keys to values, got {_kind_name(data)}")])
    return data


def _kind_name(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(value), "value")


@dataclass(frozen=True)
class Loaded:
    """A values file as the load phase leaves it."""

    values: dict  # as the file says, before the defaults
    source: str  # the file's name in messages
    too_big: list[Problem]  # integers beyond 2^53: reported with the validate phase's problems
    blame: Callable[..., str] | None = None  # several files: which one a field's (path, cause) problem is reported in


def parse(text: str, source: str) -> Loaded:
    """Parse, then walk the numbers once: a non-finite one or a refused tag is refused at once
    (nothing can carry it), integers beyond 2^53 are kept for the validate phase, where a problem the
    schema finds on the same field is the better line (`port: 99999999999999999999`)."""
    data = _parse(text, source)
    non_finite, too_big = number_problems(data)
    if non_finite:
        raise ValuesError(source, non_finite)
    return Loaded(data, source, too_big)


STDIN = "-"  # the file name that reads standard input, as in Helm's `-f -`


def not_utf8(raw: bytes, err: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, by line and column (as an editor counts them), and
    what the line says when the file is GBK, as an editor on a Chinese Windows saves it."""
    line_start = raw.rfind(b"\n", 0, err.start) + 1
    line = raw.count(b"\n", 0, err.start) + 1
    column = len(raw[line_start:err.start].decode("utf-8", "replace")) + 1
    message = f"line {line}, column {column}: not UTF-8 text (byte 0x{raw[err.start]:02x}: {err.reason})"
    try:
        raw.decode("gbk")
    except UnicodeDecodeError:
        return message + "; save the file as UTF-8"
    end = raw.find(b"\n", err.start)
    shown = raw[line_start:end if end >= 0 else len(raw)].decode("gbk").strip()
    return (f"{message}: it reads as GBK (a Chinese Windows editor's encoding), where line {line} is "
            f"{shown[:60]!r}; save it as UTF-8 (iconv -f GBK -t UTF-8)")


def read(path: str | Path) -> Loaded:
    """The load phase: read and parse a values file (`-`: standard input, named `<stdin>`)."""
    stdin = str(path) == STDIN
    path = Path(path)
    source = "<stdin>" if stdin else str(path)
    try:
        raw = sys.stdin.buffer.read() if stdin else path.read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ValuesError(source, [Problem((), "no such file")]) from None
    except IsADirectoryError:
        raise ValuesError(source, [Problem((), "is a directory, not a values file")]) from None
    except UnicodeDecodeError as err:
        raise ValuesError(source, [Problem((), not_utf8(raw, err))]) from None
    except OSError as err:
        raise ValuesError(source, [Problem((), f"cannot read: {err.strerror}")]) from None
    return parse(text, source)


# --- several values files (`render.py base.yaml -f site.yaml`), merged as Helm merges its -f files

def read_all(paths: Sequence[str | Path]) -> Loaded:
    """Read every file (the first one that cannot be read or parsed is reported), then merge."""
    files = [read(path) for path in paths]
    if len(files) == 1:
        return files[0]
    merged = functools.reduce(merge_maps, (each.values for each in files))
    _, too_big = number_problems(merged)
    named = [(each.source, each.values) for each in files]
    return Loaded(merged, " + ".join(each.source for each in files), too_big,
                  lambda path, cause=None: blame(named, path, cause))


def _step(value: Any, part: Any) -> tuple[bool, Any]:
    if isinstance(value, dict) and part in value:
        return True, value[part]
    if isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
        return True, value[part]
    return False, None


def blame(files: list[tuple[str, Any]], path: tuple, cause: tuple | None = None) -> str:
    """The file a field's merged value came from, as merge_maps builds it: at each step of
    the path the last file that has the key decides, and where its value and earlier files'
    are mappings they merged, so those files stay candidates for the rest of the path. A key
    no file sets is reported in the last file that reaches its parent (the first file for a
    top-level one), unless a rule asks for it because of another field, `cause`
    (executorServiceAccountName for automountServiceAccountToken: false): then in that one's."""
    candidates, owner = list(files), files[0][0]
    for depth, part in enumerate(path):
        present = [(name, found[1]) for name, value in candidates if (found := _step(value, part))[0]]
        if not present:
            if cause and depth == 0:
                return blame(files, cause)
            break
        owner = present[-1][0]
        merged = []
        for name, value in reversed(present):  # the mappings the last one was merged with
            if not isinstance(value, dict):
                break
            merged.insert(0, (name, value))
        candidates = merged or present[-1:]
    return owner
