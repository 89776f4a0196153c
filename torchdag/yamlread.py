"""Reading a values file's YAML the way Helm reads it (go-yaml v2), within bounds.

render.py and the Helm chart must see the same values: plain scalars resolve as go-yaml
resolves them (`y`/`n` booleans, Go's numbers, no base 60), duplicate keys and non-string
keys are refused, and the composed document is measured before anything is built (depth,
alias expansion, Helm's "excessive aliasing" rule), so a kilobyte "billion laughs" is
refused in milliseconds. torchdag/values.py builds the values on top of this.

A file is split into documents where Helm splits it (helm_chunks, load_documents): Helm 4
cuts it at every line that starts with `---` (apimachinery's YAMLReader), reads the first
YAML document of each piece with go-yaml, and merges the pieces in order (values.merge_maps);
a directive, which Helm refuses, is refused here too.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

import yaml

try:  # libyaml makes loading a 1,000-node file several times faster
    _BaseLoader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _BaseLoader = yaml.SafeLoader

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_STR_TAG = "tag:yaml.org,2002:str"
_NUMBER_TAG = "tag:torchdag.io,2024:number"  # a plain scalar that may be a number: go_number() decides

# Limits on what one values file may make the loader build (a real one is a few thousand
# values, at most ten levels deep). Checked on the composed node graph, before any Python
# object is built, so a kilobyte "billion laughs" is refused in milliseconds.
MAX_DEPTH = 100  # lists and mappings inside each other
MAX_VALUES = 1_000_000  # scalars, lists and mappings, every alias counted as a full copy
MAX_ALIAS_COPIES = 50_000  # of those, values that aliases copy (1,000 nodes sharing one resources block: ~7,000)


class _StrictLoader(_BaseLoader):
    """Safe loader that refuses duplicate keys (PyYAML silently keeps the last one) and
    resolves plain scalars the way Helm does (go-yaml v2), so both tools see the same values."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # Most nodes are strings (every key is): a string scalar is its own text, which
        # _construct_tagged returns too, without PyYAML's memo and recursion bookkeeping.
        if node.tag == _STR_TAG and isinstance(node, yaml.ScalarNode):
            return node.value
        return super().construct_object(node, deep)


class OddKey(str):
    """A mapping key that is not a string to go-yaml (`Y`, `no`, `010`, `1.5`, `~`): kept as its
    text, with what Helm would make of it, so that the walk over the loaded data
    (values.number_problems) refuses it naming its field."""

    message: str


def _helm_key(key: Any) -> str | None:
    """The key sigs.k8s.io/yaml (Helm's YAML to JSON) makes of a non-string key, or None
    where it refuses the file (a null key, a list or mapping)."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float) and key.is_integer() and abs(key) < 1e21:
        return str(int(key))
    return str(key) if isinstance(key, (int, float)) else None


def _odd_key(key: Any, text: str) -> OddKey:
    odd = OddKey(text)
    helm = _helm_key(key)
    if key is None:
        odd.message = "an empty or null key is not a string, and Helm refuses it; write the key, or remove the line"
    elif helm is None:
        odd.message = "a list or mapping as a key is not a string, and Helm refuses it; keys are names"
    elif isinstance(key, bool):
        odd.message = (f"the key {text} is not a string but the boolean {helm} to Helm's YAML reader (y, yes, on / "
                       f"n, no, off), which would name it '{helm}'; quote it ('{text}') for the text, or choose "
                       "another key")
    else:
        odd.message = (f"the key {text} is not a string but the number {key!r} to Helm's YAML reader, which would "
                       f"name it '{helm}'; keys are names: choose one that starts with a letter")
    return odd


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    if not isinstance(node, yaml.MappingNode):  # `!!map abc`
        return _unknown_tag(loader, node)
    loader.flatten_mapping(node)
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, RefusedTag):
            raise yaml.constructor.ConstructorError(None, None, f"a key: {key.message}", key_node.start_mark)
        if not isinstance(key, str):
            key = _odd_key(key, key_node.value if isinstance(key_node, yaml.ScalarNode) else "?")
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, lambda loader, node: (
    loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode) else _unknown_tag(loader, node)))

# Read plain scalars the way Helm does (go-yaml v2's resolve()), so both tools see the same
# values: `y`/`n` are booleans there; numbers are what Go's strconv parses (`1e3`, `+.5`,
# `0o17`, `017`, `0x1F`, `1_000`), never YAML 1.1's base 60 (`1:30` stays a string), and a
# float too large for float64 (`1e400`) stays the string it is. `=` is a string, not
# PyYAML's unconstructible `!!value`.
# PyYAML's timestamps go too: go-yaml hands a plain date to Helm as its text.
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG, _TIMESTAMP_TAG,
                                                                     "tag:yaml.org,2002:value")]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.bool_values = {**yaml.constructor.SafeConstructor.bool_values, "y": True, "n": False}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))
_StrictLoader.add_implicit_resolver(
    _FLOAT_TAG, re.compile(r"^(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+.")
)
# go-yaml drops every `_` of a plain scalar that starts with a digit or a sign before it tries
# Go's number syntax (`0_x1` is 1, `1e_3` is 1000): any such word may be a number; go_number decides.
_StrictLoader.add_implicit_resolver(
    _NUMBER_TAG, re.compile(r"^(?:[-+0-9][-+0-9a-zA-Z_.]*|\.[0-9]+(?:[eE][-+]?[0-9]+)?)$"), list("-+.0123456789"))

_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")
_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}


def _go_int(plain: str) -> int | None:
    """strconv.ParseInt(plain, 0, 64) without its range limit: 0x, 0o, 0b and a leading 0
    (octal) prefixes, an optional sign. Out-of-range integers stay exact here (go-yaml would
    make them float64s); the validate phase refuses those beyond 2^53 that nothing else does."""
    sign, digits = 1, plain
    if digits[:1] in ("+", "-"):
        sign, digits = (-1 if digits[0] == "-" else 1), digits[1:]
    if not digits:
        return None
    base = 10
    if digits[0] == "0":
        prefix = digits[1:2].lower()
        if len(digits) >= 3 and prefix in ("b", "o", "x"):
            base, digits = {"b": 2, "o": 8, "x": 16}[prefix], digits[2:]
        else:
            base, digits = 8, digits[1:]
            if not digits:
                return 0
    if not all(char in _DIGITS[base] for char in digits):
        return None
    return sign * int(digits, base)


def go_number(text: str) -> int | float | str:
    """A plain scalar as go-yaml v2 resolves it: an int, a float, or the text itself."""
    if text.startswith("."):
        candidate = text if _DOT_FLOAT.fullmatch(text) else None
    else:
        plain = text.replace("_", "")
        number = _go_int(plain)
        if number is not None:
            return number
        candidate = plain if _GO_FLOAT.fullmatch(plain) else None
    if candidate is None:
        return text
    value = float(candidate)
    return text if math.isinf(value) else value  # Go: out of float64's range, so not a number


_StrictLoader.add_constructor(_NUMBER_TAG, lambda loader, node: go_number(loader.construct_scalar(node)))


# --- explicit tags (`!!int 5`), as go-yaml v2's resolve() reads them --------------------------

_TAG_PREFIX = "tag:yaml.org,2002:"
# What each tag go-yaml resolves must find when the text is read as a plain scalar.
_TAG_KINDS = {"int": "an integer", "float": "a number", "bool": "a boolean (true or false)", "null": "null",
              "timestamp": "a date such as 2024-01-31 or 2024-01-31T10:00:00Z"}
_GO_TIMESTAMP = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:(?:[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,]\d{1,9})?"
                           r"(?:Z|[+-](\d\d):(\d\d)))|(?: (\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,]\d{1,9})?))?")


class RefusedTag:
    """A value whose explicit tag torchdag refuses, kept in place of the value so that the
    walk over the loaded data (values.number_problems) names its field."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message

    def __repr__(self) -> str:
        return "a tagged value"


def _short(tag: str) -> str:
    shown = "!!" + tag[len(_TAG_PREFIX):] if tag.startswith(_TAG_PREFIX) else tag
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _go_timestamp(text: str) -> bool:
    """go-yaml's parseTimestamp: time.Parse with its four layouts (ranges checked as Go does)."""
    match = _GO_TIMESTAMP.fullmatch(text)
    if not match:
        return False
    year, month, day = (int(part) for part in match.group(1, 2, 3))
    clock = [int(part) for part in (match.group(4, 5, 6) if match[4] else match.group(9, 10, 11)) if part]
    zone = [int(part) for part in match.group(7, 8) if part]
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    return (not clock or (clock[0] < 24 and clock[1] < 60 and clock[2] < 60)) and (
        not zone or (zone[0] <= 24 and zone[1] <= 60))


_PLAIN_CONSTRUCTORS = {_FLOAT_TAG: yaml.constructor.SafeConstructor.construct_yaml_float,
                       "tag:yaml.org,2002:bool": yaml.constructor.SafeConstructor.construct_yaml_bool,
                       "tag:yaml.org,2002:null": yaml.constructor.SafeConstructor.construct_yaml_null}


def _plain_kind(loader: _StrictLoader, text: str) -> tuple[str, Any]:
    """(kind, value) of text read as a plain scalar, as go-yaml resolves it."""
    tag = loader.resolve(yaml.ScalarNode, text, (True, False))
    if tag == _NUMBER_TAG:
        value = go_number(text)
    elif tag in _PLAIN_CONSTRUCTORS:
        value = _PLAIN_CONSTRUCTORS[tag](loader, yaml.ScalarNode(tag, text))
    elif _GO_TIMESTAMP.match(text) and _go_timestamp(text):
        return "timestamp", text
    else:
        return ("merge" if tag == _MERGE_TAG else "str"), text
    kind = {bool: "bool", type(None): "null", int: "int", float: "float", str: "str"}[type(value)]
    return kind, value


def _construct_tagged(loader: _StrictLoader, node: yaml.Node) -> Any:
    """A scalar under one of the tags go-yaml resolves (plain ones resolve here too): the value
    when its text, read plainly, is of that kind; else a RefusedTag (Helm refuses the file)."""
    want = node.tag[len(_TAG_PREFIX):]
    if not isinstance(node, yaml.ScalarNode):
        return _unknown_tag(loader, node)
    if want == "str":
        return node.value
    kind, value = _plain_kind(loader, node.value)
    if kind == want or (want == "float" and kind == "int"):
        return float(value) if want == "float" else value
    return RefusedTag(f"{_short(node.tag)} {node.value!r} is not {_TAG_KINDS[want]}, so Helm refuses the file too; "
                      "remove the tag, or correct the value")


def _unknown_tag(loader: _StrictLoader, node: yaml.Node) -> RefusedTag:
    """Any other tag (`!!binary`, `!!set`, `!!python/...`, `!custom`), or a tag on the wrong kind
    of node (`!!map abc`): Helm would drop it silently (or decode base64), which is never what
    the writer meant."""
    if node.tag in (_TAG_PREFIX + "map", _TAG_PREFIX + "seq"):
        what = {yaml.ScalarNode: "a plain value", yaml.SequenceNode: "a list"}.get(type(node), "a mapping")
        return RefusedTag(f"the YAML tag {_short(node.tag)} is on {what}, which it does not fit (Helm would drop "
                          "it); remove it")
    if not isinstance(node, yaml.ScalarNode):
        what = "list" if isinstance(node, yaml.SequenceNode) else "mapping"
        return RefusedTag(f"the YAML tag {_short(node.tag)} is on a {what}, which takes no tag (Helm would drop it); "
                          "remove it")
    return RefusedTag(f"the YAML tag {_short(node.tag)} is not accepted (Helm would drop it and read the text as "
                      "written); remove it: torchdag reads plain values and the tags !!str, !!int, !!float, "
                      "!!bool, !!null and !!timestamp")


for _name in ("str", "int", "float", "bool", "null", "timestamp"):
    _StrictLoader.add_constructor(_TAG_PREFIX + _name, _construct_tagged)
for _name in ("binary", "set", "omap", "pairs"):
    _StrictLoader.add_constructor(_TAG_PREFIX + _name, _unknown_tag)
_StrictLoader.add_constructor(None, _unknown_tag)
# A plain `<<` anywhere but as a key is the text "<<" to go-yaml (PyYAML cannot construct it).
_StrictLoader.add_constructor("tag:yaml.org,2002:merge",
                              lambda loader, node: node.value if isinstance(node, yaml.ScalarNode)
                              else _unknown_tag(loader, node))


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return node.value
    return []


def graph_problem(root: yaml.Node, used: list[int] | None = None) -> str | None:
    """What makes a composed document too big or too deep to build, or None.

    The graph is a DAG (an alias is the anchored node itself, shared), so each node is
    visited once, iteratively, in document order: the first edge to a node is where it is
    written, any later one an alias. Per node: how many values it stands for with every
    alias copied out (what later phases walk) and its depth likewise; and, as go-yaml
    decodes the document, running counts of values decoded and of those decoded inside an
    alias, for Helm's "excessive aliasing" rule. Linear in the file, no recursion. `used`
    ([values, distinct values], counted on) makes a file's documents share the limits.
    """
    # Per node: (values, aliases expanded; depth likewise; values go-yaml decodes for it, alias nodes counted).
    measured: dict[int, tuple[int, int, int]] = {}
    aliases: dict[int, int] = {}  # per node, how many of its children are aliases
    distinct = 0
    run_decoded, run_aliased = 2, 0  # go-yaml's decodeCount (the document node and the root first) and aliasCount
    excessive = None  # go-yaml's verdict, reported only when the plainer limits below hold
    open_nodes = {id(root)}
    root_children = _children(root)
    stack = [(root, root_children, iter(root_children))]
    while stack:
        node, children, pending = stack[-1]
        for child in pending:
            key = id(child)
            if key in measured:
                aliases[id(node)] = aliases.get(id(node), 0) + 1
                decoded = measured[key][2]
                run_decoded, run_aliased = min(run_decoded + 1 + decoded, _CAP), min(run_aliased + decoded, _CAP)
                ratio = run_aliased / run_decoded
                allowed = _allowed_alias_ratio(run_decoded)
                if excessive is None and run_aliased > 100 and run_decoded > 1000 and ratio > allowed:
                    excessive = (f"{run_aliased} of the first {run_decoded} values decoded come from aliases "
                                 f"({100 * ratio:.1f}%, excessive aliasing); Helm's YAML reader allows at most "
                                 f"{100 * _allowed_alias_ratio(run_decoded):.0f}%")
                continue
            if not isinstance(child, yaml.CollectionNode):
                counted = 0 if child.tag == _MERGE_TAG else 1  # go-yaml merges without decoding the `<<` key
                measured[key] = (1, 0, counted)
                run_decoded += counted
                distinct += 1
                continue
            if key in open_nodes:
                return (f"an alias refers to a list or mapping that contains it (line {child.start_mark.line + 1}); "
                        "YAML values cannot contain themselves")
            run_decoded += 1
            open_nodes.add(key)
            grandchildren = _children(child)
            stack.append((child, grandchildren, iter(grandchildren)))
            break
        else:
            stack.pop()
            key = id(node)
            open_nodes.discard(key)
            size, depth, decoded = 1, 0, 1 + aliases.pop(key, 0)
            for child in children:
                child_size, child_depth, child_decoded = measured[id(child)]
                size += child_size
                decoded += child_decoded
                if child_depth > depth:
                    depth = child_depth
            depth += 1
            measured[key] = (min(size, _CAP), depth, min(decoded, _CAP))
            distinct += 1
            if depth > MAX_DEPTH:
                return (f"lists and mappings are nested more than {MAX_DEPTH} levels deep "
                        f"(line {node.start_mark.line + 1}); the limit is {MAX_DEPTH}")
    total = measured[id(root)][0]
    if used is not None:  # the file's documents so far, this one included
        used[0], used[1] = used[0] + total, used[1] + distinct
        total, distinct = used
    copies = total - distinct
    if copies > MAX_ALIAS_COPIES:
        shown = f"more than {MAX_VALUES}" if total > MAX_VALUES else str(total)
        return (f"aliases expand this file's {distinct} values to {shown} (excessive aliasing, a \"billion laughs\"); "
                f"aliases may add at most {MAX_ALIAS_COPIES} values")
    if total > MAX_VALUES:
        return f"holds more than {MAX_VALUES} values (lists, mappings and scalars); the limit is {MAX_VALUES}"
    return excessive


_MERGE_TAG = "tag:yaml.org,2002:merge"
_CAP = 10**15  # counts stop growing here: a bomb's true size is of no interest


def _allowed_alias_ratio(total: int) -> float:
    """go-yaml v2 (decode.go): 99% of a document's values may come from aliases up to
    400,000 values, falling smoothly to 10% at 4,000,000."""
    low, high = 400_000, 4_000_000
    if total <= low:
        return 0.99
    if total >= high:
        return 0.10
    return 0.99 - 0.89 * (total - low) / (high - low)


_HINTS = {  # what a terse parser message means in a values file
    "did not find expected <document start>": " (a document after '...' or after a directive starts with a line "
                                              "'---'; Helm would skip it silently)",
}


def yaml_problem(err: yaml.YAMLError, text: str = "") -> str:
    if isinstance(err, yaml.MarkedYAMLError):
        if err.problem == "exceeded maximum nesting depth":  # libyaml's own limit, 1,000 levels
            return f"lists and mappings are nested more than {MAX_DEPTH} levels deep; the limit is {MAX_DEPTH}"
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        hint = _HINTS.get(err.problem or "", "")
        row = text.split("\n")[mark.line] if mark and mark.line < text.count("\n") + 1 else ""
        if "\t" in row[mark.column:mark.column + 1] + row[:len(row) - len(row.lstrip(" \t"))]:
            hint = " (a tab character: YAML indents with spaces only; replace the tab with spaces)"
        return f"not valid YAML at {where}: {err.problem or err.context}{hint}"
    return f"not valid YAML: {err}"


class GraphProblem(Exception):
    """The composed document is too deep or too alias-expanded to build (graph_problem)."""


# --- documents, where Helm cuts them -------------------------------------------------------

_DIRECTIVE_LINE = re.compile(r"^%", re.MULTILINE)


def _directive_problem(text: str) -> str | None:
    """A `%YAML` or `%TAG` directive, which Helm's YAML reader refuses ("did not find expected
    <document start>"), or None. Only a line starting with `%` can hold one."""
    if not _DIRECTIVE_LINE.search(text):
        return None
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, yaml.DocumentStartEvent) and (event.version or event.tags):
            directive = "%YAML" if event.version else "%TAG"
            return (f"a {directive} directive (line {event.start_mark.line + 1}), which Helm's YAML reader refuses; "
                    "remove it: torchdag reads values files as Helm does")
    return None


_LINE = re.compile(r"[^\n]*\n?")


def helm_chunks(text: str) -> list[tuple[int, str]]:
    """The text split where Helm splits a values file into documents (apimachinery's YAMLReader):
    at every line that starts with `---`, whatever YAML would make of it (inside a quoted
    scalar too); a separator line begins the first chunk, and ends any other one. Each chunk
    as (its first line's index, its text)."""
    chunks: list[tuple[int, str]] = []
    lines: list[str] = []
    start = 0
    for number, match in enumerate(_LINE.finditer(text)):
        line = match.group()
        if line.startswith("---"):
            rest = line[3:].strip()
            if rest and not rest.startswith("#"):
                raise GraphProblem(f"line {number + 1}: '---' is followed by {rest[:40]!r}, and Helm's reader takes "
                                   "a line starting with --- for a document separator that only a comment may "
                                   "follow; put what follows on the next line")
            if lines:
                chunks.append((start, "".join(lines)))
                lines = []
                continue
        if not lines:
            start = number
        lines.append(line)
    if lines:
        chunks.append((start, "".join(lines)))
    return chunks


def load_documents(text: str) -> list:
    """The documents of a values file as Helm reads them (helm_chunks, then the first document of
    each), empty ones left out; each graph checked between composing and constructing (the
    limits count all of them together). A directive is refused first."""
    problem = _directive_problem(text)
    if problem:
        raise GraphProblem(problem)
    documents, used = [], [0, 0]
    for start, chunk in helm_chunks(text):
        loader = _StrictLoader("\n" * start + chunk)  # blank lines first: marks name the file's own lines
        try:
            nodes = []
            while loader.check_node():  # one document at most: YAML wants `---` after `...` (yaml_problem)
                node = loader.get_node()
                problem = graph_problem(node, used)
                if problem:
                    raise GraphProblem(problem)
                nodes.append(node)
            documents.extend(loader.construct_document(node) for node in nodes)
        finally:
            loader.dispose()
    return [document for document in documents if document is not None]


# --- what a Chinese input method types for YAML's punctuation ------------------------------

_SEPARATORS = "\uff0c\u3001\uff1b"  # comma, ideographic comma, semicolon
_OPENERS = "\u201c\u2018\uff3b\uff5b"  # quotes and brackets that open a value
_CLOSERS = "\u201d\u2019\uff3d\uff5d"


def full_width_characters() -> dict:
    """catalog.yaml `fullWidth.characters`: each one, the ASCII one YAML needs, its name and code."""
    from .catalog import catalog

    return catalog()["fullWidth"]["characters"]


def _ascii_before(line: str, column: int) -> bool:
    """An ASCII character (not a space) just before `column`, spaces skipped: what a key or a
    word of a value written in ASCII leaves there, where Chinese text leaves a Chinese one."""
    before = line[:column].rstrip(" ")
    return bool(before) and "!" <= before[-1] <= "~"


def full_width_marks(text: str) -> list[tuple[int, int, str]]:
    """(line, column, character), 1-based, of full-width punctuation standing where YAML needs
    its ASCII form: a colon after an ASCII key, a comma or semicolon inside a flow list or
    mapping or after an ASCII word, an ideographic space in the indentation or after `:` or
    `-`, a full-width
    quote or bracket opening or closing a value. Chinese text in a quoted value, a comment,
    or a plain value after a Chinese character is left alone."""
    known = full_width_characters()
    if not any(char in text for char in known):
        return []
    marks: list[tuple[int, int, str]] = []
    depth = 0  # flow collections open ([ {), across lines
    quote = ""  # the quote a scalar is open in, across lines
    for number, line in enumerate(text.split("\n"), 1):
        indent = len(line) - len(line.lstrip(" \u3000"))
        for column, char in enumerate(line):
            if quote:
                if char == quote and not (quote == '"' and line[column - 1:column] == "\\"):
                    quote = ""
                continue
            if char in "\"'" and (column == 0 or line[column - 1] in " \t[{,:-"):
                quote = char
            elif char == "#" and (column == 0 or line[column - 1] in " \t"):
                break  # a comment
            elif char in "[{":
                depth += 1
            elif char in "]}":
                depth = max(depth - 1, 0)
            elif char in known and (
                    (char == "\uff1a" and _ascii_before(line, column))
                    or (char in _SEPARATORS and (depth > 0 or _ascii_before(line, column)))
                    or (char == "\u3000" and (column < indent or line[:column].endswith((":", "-"))))
                    or (char in _OPENERS and (column == indent or line[:column].rstrip(" ").endswith(
                        (":", "-", "[", "{", ","))))
                    or (char in _CLOSERS and _ascii_before(line, column))
                    or (char == "\uff03" and column == indent)):
                marks.append((number, column + 1, char))
    return marks


def full_width_fields(char: str) -> dict:
    """The fields of the messages key-full-width and yaml-full-width for one character."""
    entry = full_width_characters()[char]
    shown = "' ' (a space)" if entry["ascii"] == " " else f"'{entry['ascii']}'"
    return {"char": char, "name": entry["name"], "code": entry["code"], "shown": shown,
            "after": " followed by a space" if entry["ascii"] in ":," else ""}
