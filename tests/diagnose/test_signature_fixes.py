"""Every cause and fix diagnose prints (torchdag/diagnose/signatures.yaml) names only things
that exist: a values field (in the schema), a file or a doc (in this tree), a Workflow
feature (in a rendered Workflow: tests/golden/), an environment variable (in a rendered
Workflow or the docs), a torchdag command and its options (its parser takes them), an
install hint's extra (pyproject.toml), or a tool of the host named below. A fix that sends
the user to a mutex the Workflow does not have, or to a package PyPI does not serve, fails."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from torchdag.cli import CLUSTER_COMMANDS, SUBCOMMANDS, build_parser, cluster_parser
from torchdag.diagnose import signatures

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "schema" / "values.schema.json").read_text(encoding="utf-8"))
GOLDEN = "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "tests" / "golden").glob("*/*.yaml")))
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md")))
AGENTS_PATH = "/opt/torchdag/trainer/agents"  # catalog agents.path: trainer/agents/ in this tree
# Tools of the host or the cluster a fix may tell the user to run: not ours, so not checked here.
HOST_TOOLS = {"kubectl": "Kubernetes' CLI", "ss": "iproute2", "ip": "iproute2", "dmesg": "util-linux",
              "ls": "coreutils", "ps": "procps", "py-spy": "py-spy", "npu-smi": "Ascend's driver"}
# What Argo can give a Workflow that a fix could claim this one has: named, it must be rendered.
ARGO_FEATURES = ("mutex", "semaphore", "synchronization", "memoize", "podGC", "ttlStrategy", "retryStrategy",
                 "activeDeadlineSeconds", "priorityClassName", "podDisruptionBudget", "hooks", "onExit")


def _subschemas(node: dict) -> list[dict]:
    """The schema node and every schema it is made of ($ref, allOf, anyOf, oneOf, if/then/else)."""
    out, todo = [], [node]
    while todo:
        current = todo.pop()
        if not isinstance(current, dict):
            continue
        if "$ref" in current:
            target = SCHEMA
            for part in current["$ref"].lstrip("#/").split("/"):
                target = target[part]
            todo.append(target)
        out.append(current)
        for key in ("allOf", "anyOf", "oneOf"):
            todo += current.get(key) or []
        todo += [current[k] for k in ("then", "else") if k in current]
    return out


def schema_field(path: str) -> bool:
    """`timeouts.rendezvous`, `nodes[].resources`, `resources.limits.memory`: a field of the schema;
    a bare name is one at the top level or of a node (a fix says "for this node")."""
    parts = path.split(".")
    starts = [SCHEMA] if len(parts) > 1 else [SCHEMA, {"$ref": "#/$defs/node"}]
    for start in starts:
        nodes = [start]
        for part in parts:
            name, items = part.removesuffix("[]"), part.endswith("[]")
            nodes = [s["properties"][name] for n in nodes for s in _subschemas(n)
                     if name in (s.get("properties") or {})]
            if items:
                nodes = [s["items"] for n in nodes for s in _subschemas(n) if "items" in s]
        if nodes:
            return True
    return False


def tree_file(name: str) -> bool:
    if name.startswith(AGENTS_PATH):
        return (REPO / "trainer" / "agents" / name[len(AGENTS_PATH):].strip("/")).exists()
    name = name.rstrip("/")
    return (REPO / name).exists() or (REPO / "docs" / name).exists() or any(REPO.glob(f"*/**/{name}")) \
        if "/" not in name else (REPO / name).exists()


def command_problem(text: str) -> str | None:
    words = shlex.split(text.replace("…", "x"))
    if words[0] == "torchdag":
        sub, args = words[1], ["job" if w in ("NAME",) else "1" if w in ("R", "K") else w for w in words[2:]]
        if sub in CLUSTER_COMMANDS:
            parser = cluster_parser(sub, f"torchdag {sub}")
        elif any(c.name == sub for c in SUBCOMMANDS):
            parser = build_parser(f"torchdag {sub}", check=sub == "check")
        else:
            return f"no torchdag command {sub!r}"
        try:
            parser.parse_args(args or ["job"])
        except SystemExit:
            return f"torchdag {sub} does not take {' '.join(args)!r}"
        return None
    if words[:2] == ["pip", "install"]:
        found = re.fullmatch(r"(.+?)\[(\w+)\]", words[2])
        extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        if not found or found.group(1) != "." or found.group(2) not in extras:
            return f"{words[2]!r} is not an extra of this repository ('.[{'|'.join(extras)}]'): torchdag is not on PyPI"
        return None
    if words[0] not in HOST_TOOLS:
        return f"{words[0]!r} is neither a torchdag command nor a host tool this test knows (HOST_TOOLS)"
    return None


VALUES_SPAN = re.compile(r"([A-Za-z][\w]*(?:\[\])?(?:\.[A-Za-z][\w]*(?:\[\])?)*)(?::(?: .*)?)?")
DOTTED = re.compile(r"(?<![\w/.`-])([a-z][A-Za-z]+(?:\[\])?(?:\.[a-z][A-Za-z]+)+)(?![\w/`-])")
FILE = re.compile(r"(?<![\w`])((?:/opt/torchdag/|docs/|trainer/|torchdag/|tests/|examples/)[\w./-]*"
                  r"|[\w-]+\.(?:md|py|yaml))")
ENV = re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b")
WORKFLOWS = re.compile(r"\bthe (?:rendered )?Workflow's (\w+)")


def problems(text: str) -> list[str]:
    text = re.sub(r"\{\d+\}", "…", text)
    out = []
    spans = re.findall(r"`([^`]+)`", text)
    for span in spans:
        first = span.split()[0]
        if first in ("torchdag", "pip") or first in HOST_TOOLS:
            out.append(command_problem(span))
        elif "/" in span or span.endswith((".md", ".py", ".yaml")):
            out.append(None if tree_file(span) else f"no file {span}")
        elif VALUES_SPAN.fullmatch(span):
            field = VALUES_SPAN.fullmatch(span).group(1)
            out.append(None if schema_field(field) else f"`{span}`: no values field {field}")
        else:
            out.append(f"`{span}`: neither a values field, a file nor a command")
    bare = re.sub(r"`[^`]+`", " ", text)
    for path in DOTTED.findall(bare):
        if path.split(".")[0].removesuffix("[]") in SCHEMA["properties"] and not schema_field(path):
            out.append(f"no values field {path}")
    for name in FILE.findall(bare):
        if not tree_file(name):
            out.append(f"no file {name}")
    for name in ENV.findall(bare):
        if name not in GOLDEN and name not in DOCS:
            out.append(f"{name}: in no rendered Workflow and no doc")
    for word in WORKFLOWS.findall(bare) + [w for w in ARGO_FEATURES if re.search(rf"\b{w}\b", bare, re.I)]:
        if not re.search(rf'^\s*(?:- )?"?{word}"?:', GOLDEN, re.M | re.I):
            out.append(f"the Workflow has no {word} (in no rendered Workflow under tests/golden/)")
    return [p for p in out if p]


@pytest.mark.parametrize("sig", signatures.load(), ids=lambda s: s.id)
def test_each_fix_names_only_what_exists(sig):
    assert problems(sig.cause) + problems(sig.fix) == []


@pytest.mark.parametrize("text, expected", [
    ("pick a free `port:`; the rendered Workflow's mutex keeps two jobs apart", "the Workflow has no mutex"),
    ("run `pip install 'torchdag[cluster]'`", "'torchdag[cluster]' is not an extra of this repository"),
    ("raise timeouts.rendezvos", "no values field timeouts.rendezvos"),
    ("set `nic:` or `nodes[].nix`", "`nodes[].nix`: no values field"),
    ("see docs/nothing.md", "no file docs/nothing.md"),
    ("run `torchdag logs NAME --rank R --tail 5`", "does not take"),
    ("run `frobnicate --now`", "neither a"),
    ("run `ip-frob --now`", "neither a"),
    ("set NOT_A_VARIABLE_ANYWHERE=1", "in no rendered Workflow and no doc"),
])
def test_the_check_catches_what_does_not_exist(text, expected):
    assert any(expected in p for p in problems(text)), problems(text)


def test_install_hints_name_this_repositorys_extras():
    """torchdag is not on PyPI: every install hint installs an extra from the checkout."""
    texts = {p: p.read_text(encoding="utf-8") for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
                                                         *sorted((REPO / "torchdag").rglob("*.py"))]}
    found = {(str(p.relative_to(REPO)), m) for p, t in texts.items() for m in re.findall(r"pip install '[^']+'", t)}
    assert found and [(p, m, command_problem(m)) for p, m in sorted(found) if command_problem(m)] == []
