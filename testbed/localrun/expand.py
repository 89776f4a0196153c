"""The two substitutions a container's strings go through before they reach the process.

1. Argo (controller side): `{{inputs.parameters.X}}`, `{{workflow.name}}`, ... are replaced
   once, left to right; a replaced value is never scanned again (fasttemplate). A tag under
   one of the prefixes Argo's validator resolves (`inputs.`, `workflow.`, ...) that is not in
   scope fails the workflow at submission ("failed to resolve {{...}}"); any other unknown
   tag (`{{retries}}` outside a retrying template, `{{foo}}`) reaches the pod as literal text:
   the controller substitutes pods with unresolved tags allowed (v4.0.5
   workflow/common/util.go `SubstituteParams`; prefixes from common.go
   `GlobalVarValidWorkflowVariablePrefix`).
2. Kubernetes (kubelet side): `$(NAME)` in env values, command and args; a port of
   third_party/forked/golang/expansion/expand.go (k8s.io/kubernetes v1.37).
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Mapping

ARGO_TAG = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


# Tags under these prefixes must resolve (Argo's validator); others may stay as text.
VALIDATED_PREFIXES = ("item.", "steps.", "inputs.", "outputs.", "pod.", "workflow.", "tasks.")


class UnresolvedTag(Exception):
    """A `{{...}}` tag Argo would refuse: the workflow would fail before any pod starts."""


def argo_substitute(text: str, scope: Mapping[str, str]) -> str:
    """Replace every `{{ tag }}` from scope (Argo trims spaces inside the braces); an
    unknown tag outside VALIDATED_PREFIXES is kept as written, as Argo keeps it."""

    def replace(match: re.Match) -> str:
        tag = match.group(1).strip()
        if tag in scope:
            return scope[tag]
        if tag.startswith(VALIDATED_PREFIXES):
            raise UnresolvedTag(f"failed to resolve {{{{{tag}}}}}")
        return match.group(0)

    return ARGO_TAG.sub(replace, text)


def kube_expand(value: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes' `$(VAR)` expansion (third_party/forked/golang/expansion/expand.go):
    `$$` -> `$`; `$(NAME)` -> lookup(NAME), or kept as written when NAME is unknown; an
    unclosed `$(` and any other `$` are kept. Operators are ASCII, so working on characters
    is working on Go's bytes and runes (tests/validators/test_expand_oracle.py holds this against
    the Go code itself)."""
    out = []
    checkpoint = cursor = 0
    while cursor < len(value):
        if value[cursor] == "$" and cursor + 1 < len(value):
            out.append(value[checkpoint:cursor])
            following = value[cursor + 1]
            close = value.find(")", cursor + 2) if following == "(" else -1
            if close >= 0:
                name = value[cursor + 2:close]
                found = lookup(name)
                out.append(found if found is not None else f"$({name})")
                cursor = close
            else:  # `$$` is one `$`; `$(` without `)` and `$x` stay as written
                out.append("$" if following == "$" else "$" + following)
                cursor += 1
            checkpoint = cursor + 1
        cursor += 1
    out.append(value[checkpoint:])
    return "".join(out)


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
