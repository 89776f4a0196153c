"""Kubernetes' `$(NAME)` expansion of env values, command and args (kubelet side): a port
of third_party/forked/golang/expansion/expand.go (k8s.io/kubernetes v1.37). The process
kubelet expands a pod's container with it; `make smoke` the Plan's words, which render.py
escapes for it (torchdag.yamlout.dollar_escape)."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping


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
