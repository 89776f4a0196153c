"""The two substitutions a container's strings go through before they reach the process.

1. Argo (controller side): `{{inputs.parameters.X}}`, `{{workflow.name}}`, ... are replaced
   once, left to right; a replaced value is never scanned again (fasttemplate), and an
   unknown tag fails the workflow ("failed to resolve {{...}}").
2. Kubernetes (kubelet side): `$(NAME)` in env values, command and args; a port of
   third_party/forked/golang/expansion/expand.go, byte for byte, quirks included.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Mapping

ARGO_TAG = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


class UnresolvedTag(Exception):
    """A `{{...}}` tag Argo would refuse: the workflow would fail before any pod starts."""


def argo_substitute(text: str, scope: Mapping[str, str]) -> str:
    """Replace every `{{ tag }}` from scope (Argo trims spaces inside the braces)."""

    def replace(match: re.Match) -> str:
        tag = match.group(1).strip()
        if tag not in scope:
            raise UnresolvedTag(f"failed to resolve {{{{{tag}}}}}")
        return scope[tag]

    return ARGO_TAG.sub(replace, text)


_OPERATOR, _OPENER, _CLOSER = ord("$"), ord("("), ord(")")


def kube_expand(value: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes' `$(VAR)` expansion: `$$` -> `$`; `$(NAME)` -> lookup(NAME), or kept
    as written when NAME is unknown; any other `$` is kept.

    Works on UTF-8 bytes like the Go original. One quirk is kept on purpose: for `$`
    followed by a byte that starts neither `$` nor `(`, Go appends string(byte), which
    re-encodes a non-ASCII lead byte as a code point ("$é" -> "$Ã\\xa9"). render.py
    escapes every user `$` as `$$`, so rendered strings never reach that branch.
    """
    data = value.encode("utf-8", "surrogateescape")
    out = bytearray()
    checkpoint = 0
    cursor = 0
    while cursor < len(data):
        if data[cursor] == _OPERATOR and cursor + 1 < len(data):
            out += data[checkpoint:cursor]
            rest = data[cursor + 1:]
            if rest[0] == _OPERATOR:  # escaped operator
                read, is_var, advance = rest[:1], False, 1
            elif rest[0] == _OPENER:
                close = rest.find(b")", 1)
                if close >= 1:
                    read, is_var, advance = rest[1:close], True, close + 1
                else:  # incomplete reference: "$(" kept, the rest copied as is
                    read, is_var, advance = b"$(", False, 1
            else:
                read, is_var, advance = b"$" + chr(rest[0]).encode("utf-8"), False, 1
            if is_var:
                name = read.decode("utf-8", "surrogateescape")
                found = lookup(name)
                out += (found if found is not None else f"$({name})").encode("utf-8", "surrogateescape")
            else:
                out += read
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out += data[checkpoint:]
    return out.decode("utf-8", "surrogateescape")


def kube_container_env(env: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Env values expand against the variables defined *before* them in the list
    (kubelet's makeEnvironmentVariables); a later duplicate name overrides."""
    defined: dict[str, str] = {}
    out = []
    for name, raw in env:
        value = kube_expand(raw, defined.get)
        defined[name] = value
        out.append((name, value))
    return out


def kube_command(words: Iterable[str], env: Mapping[str, str]) -> list[str]:
    """command/args expand against the container's whole (already expanded) env."""
    return [kube_expand(word, env.get) for word in words]
