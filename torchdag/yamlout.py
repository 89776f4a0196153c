"""Quoting for the Jinja templates: every scalar leaves as a double-quoted YAML/JSON string.

A double-quoted scalar cannot change the document's structure whatever it holds
(`: `, `#`, quotes, newlines), so user strings are always printed through `quote`.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Characters YAML may not hold raw, or would fold inside a quoted scalar (NEL, LS, PS):
# escape them as \uXXXX, which YAML and JSON read back identically.
_UNSAFE = re.compile("[\u007f-\u009f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")
_PLAIN_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_./-]*$")
_YAML11_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def quote(value: Any) -> str:
    """One scalar as YAML. Strings are double-quoted; numbers and booleans stay typed."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return json.dumps(value)
    if not isinstance(value, str):
        raise TypeError(f"quote() takes a scalar, got {type(value).__name__}")
    text = json.dumps(value, ensure_ascii=False)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def kube_escape(value: str) -> str:
    """Kubernetes expands $(VAR) in command, args and env values; `$$` is its escape for `$`."""
    return value.replace("$", "$$")


def launcher_escape(value: str) -> str:
    """torchrun substitutes ${local_rank} in the script's arguments with string.Template,
    whose escape for `$` is `$$` (torch/distributed/elastic/utils/macros.py)."""
    return value.replace("$", "$$")


def kube_quote(value: Any) -> str:
    return quote(kube_escape(value) if isinstance(value, str) else value)


def key(name: str) -> str:
    if _PLAIN_KEY.fullmatch(name) and name.lower() not in _YAML11_WORDS:
        return name
    return quote(name)


def block(data: Any, indent: int) -> str:
    """A nested mapping or list as block YAML, for `{{ x | yaml(N) }}` at column N.

    The first line carries no indentation (the template puts it at column N); sequences
    sit at their parent key's column, as PyYAML and yamllint's `consistent` expect.
    """
    lines = _block_lines(data, 0)
    pad = " " * indent
    return "\n".join(lines[:1] + [pad + line for line in lines[1:]])


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def _inline(value: Any) -> str | None:
    if _is_scalar(value):
        return quote(value)
    if not value:
        return "{}" if isinstance(value, dict) else "[]"
    return None


def _block_lines(data: Any, col: int) -> list[str]:
    pad = " " * col
    lines: list[str] = []
    if isinstance(data, dict):
        for name, value in data.items():
            inline = _inline(value)
            if inline is not None:
                lines.append(f"{pad}{key(name)}: {inline}")
            elif isinstance(value, dict):
                lines.append(f"{pad}{key(name)}:")
                lines.extend(_block_lines(value, col + 2))
            else:
                lines.append(f"{pad}{key(name)}:")
                lines.extend(_block_lines(value, col))
    elif isinstance(data, list):
        for item in data:
            inline = _inline(item)
            if inline is not None:
                lines.append(f"{pad}- {inline}")
                continue
            inner = _block_lines(item, col + 2)
            lines.append(f"{pad}- {inner[0][col + 2:]}")
            lines.extend(inner[1:])
    else:
        lines.append(pad + quote(data))
    return lines
