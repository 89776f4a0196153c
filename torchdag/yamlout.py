"""Quoting for the Jinja templates: every scalar leaves as a JSON string, written exactly
as Helm's `toJson` (Go's encoding/json) writes it, so the chart can print the same bytes.

A double-quoted scalar cannot change the document's structure whatever it holds
(`: `, `#`, quotes, newlines). Characters YAML cannot carry in any form (DEL, the C1
controls, U+FFFE/U+FFFF, surrogates) never reach this point: validation refuses them.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Go's encoder escapes these for HTML safety; JSON and YAML read the escapes back as the
# characters, so the output means the same and matches helm byte for byte.
_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})
# What either encoder escapes (or what json.dumps cannot pass through): without any of it
# a string is its own JSON text between quotes (most of a big job's 50,000 scalars).
_NEEDS_ESCAPING = re.compile("[\x00-\x1f\"\\\\<>&\u2028\u2029\ud800-\udfff]")


def quote(value: Any) -> str:
    """One scalar as YAML: strings JSON-quoted, integers and booleans bare."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"quote() prints strings, integers and booleans, got {type(value).__name__}")
    if not _NEEDS_ESCAPING.search(value):
        return f'"{value}"'
    return json.dumps(value, ensure_ascii=False).translate(_GO_ESCAPES)


def sorted_items(mapping: dict) -> list[tuple[str, Any]]:
    """A string-keyed map in Go's order (byte order of UTF-8 = code point order)."""
    return sorted(mapping.items())


def toleration(item: dict) -> str:
    """One toleration as a flow mapping; the schema fixes its fields and their types."""
    fields = [f"{key}: {quote(item[key])}" for key in ("key", "operator", "value", "effect") if key in item]
    if "tolerationSeconds" in item:
        fields.append(f"tolerationSeconds: {int(item['tolerationSeconds'])}")
    return "{" + ", ".join(fields) + "}"


def dollar_escape(value: str) -> str:
    """Kubernetes expands $(VAR) in command, args and env values, and torchrun's
    ${local_rank} macro (string.Template) runs over the script's arguments: both read
    `$$` as a literal `$`."""
    return value.replace("$", "$$")


def quantity(value: Any) -> str:
    """Quantities are printed as strings; 4.0 and 4 both become "4" (as Helm prints them)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
