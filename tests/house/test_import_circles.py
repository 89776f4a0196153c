"""Issue 42: no import circle in the product or its test bed. Every import counts, a lazy one
inside a function too: it still ties the two modules together, and only hides the circle
until the day someone moves it to the top."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from helpers import REPO

FOLDERS = ("torchdag", "trainer", "testbed", "bench", "tools")


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every tracked module of FOLDERS (a package by its __init__.py)."""
    listed = subprocess.run(["git", "ls-files", *(f"{folder}/*.py" for folder in FOLDERS)], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    out = {}
    for path in listed:
        parts = Path(path).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = REPO / path
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` imports anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            # A helper run as a script imports its siblings by their bare names.
            targets = [alias.name for alias in node.names]
            targets += [f"{package}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {target for target in targets if target in known and target != name}
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_circles_finds_a_lazy_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_imported_reads_relative_lazy_and_sibling_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from . import x\nfrom ..y import z\n\ndef f():\n    import sibling\n    from .x import q\n")
    known = {"pkg.sub.x": source, "pkg.y": source, "pkg.y.z": source, "pkg.sub.sibling": source}
    assert imported("pkg.sub.m", source, known) == {"pkg.sub.x", "pkg.y", "pkg.y.z", "pkg.sub.sibling"}


def test_no_module_of_the_product_or_its_test_bed_imports_itself_around_a_circle():
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    # A package's __init__ importing its own modules (re-exports) is no circle unless they import it back.
    found = circles(graph)
    assert not found, f"import circles (move what both need into a module below them): {found}"
