"""Test helpers live beside the tests they serve (issue 42): a helper module at tests/ serves
several subject folders (tests/render, tests/e2e, ...) or tests/conftest.py; one that serves a
single folder lives in that folder, and one that other folders import lives at tests/.
tests/conftest.py puts tests/ and every subject folder on sys.path, so a module's name must be
unique across them all.

"Serves" is read from the source, not from a list kept by hand: who imports the module, who
takes a fixture of a plugin that tests/conftest.py names in `pytest_plugins`, and, for a
helper imported by another helper at tests/, whom that one serves."""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

from helpers import REPO

TESTS = REPO / "tests"
ROOT_CONFTEST = TESTS / "conftest.py"
EVERY_FOLDER = "tests/conftest.py (every folder)"


def modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache
def parsed() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in modules()}


def root_helpers() -> list[str]:
    return sorted(p.stem for p in TESTS.glob("*.py") if p != ROOT_CONFTEST)


def folder_of(path: Path) -> str | None:
    """A module's subject folder (tests/<folder>/...), None for one at tests/ itself."""
    parts = path.relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 else None


def imported_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def plugins(tree: ast.Module) -> set[str]:
    """The modules tests/conftest.py loads as pytest plugins."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytest_plugins" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def is_fixture(node: ast.AST) -> bool:
    def names_fixture(decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return (getattr(target, "attr", None) or getattr(target, "id", None)) == "fixture"

    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(map(names_fixture, node.decorator_list))


def fixtures(tree: ast.Module) -> set[str]:
    """The names of the fixtures a module defines."""
    return {node.name for node in ast.walk(tree) if is_fixture(node)}


def requested(tree: ast.Module) -> set[str]:
    """The fixtures the module's tests and fixtures take (their parameters, and the names in
    pytest.mark.usefixtures(...)), less those it defines itself."""
    names = set()
    for node in ast.walk(tree):
        takes_fixtures = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
        if takes_fixtures or is_fixture(node):
            names |= {arg.arg for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "usefixtures":
            names |= {arg.value for arg in node.args if isinstance(arg, ast.Constant)}
    return names - fixtures(tree)


def served() -> dict[str, set[str]]:
    """For each helper module at tests/: the subject folders it serves."""
    trees = parsed()
    helpers = set(root_helpers())
    direct: dict[str, set[str]] = defaultdict(set)  # module -> folders, EVERY_FOLDER or helpers at tests/
    loaded_as_plugins = plugins(trees[ROOT_CONFTEST])
    plugin_fixtures = {name: fixtures(trees[TESTS / f"{name}.py"]) for name in loaded_as_plugins & helpers}
    for path, tree in trees.items():
        user = folder_of(path) or (EVERY_FOLDER if path == ROOT_CONFTEST else path.stem)
        for name in imported_names(tree) & helpers - {path.stem}:
            direct[name].add(user)
        # A fixture of the same name in the module's own folder's conftest.py shadows the plugin's.
        folder_conftest = trees.get(TESTS / folder_of(path) / "conftest.py") if folder_of(path) else None
        takes = requested(tree) - (fixtures(folder_conftest) if folder_conftest else set())
        for name, its_fixtures in plugin_fixtures.items():
            if path.stem != name and takes & its_fixtures:
                direct[name].add(user)
    # A helper another helper at tests/ imports serves whom that one serves.
    folders = {name: {user for user in users if user not in helpers} for name, users in direct.items()}
    changed = True
    while changed:
        changed = False
        for name, users in direct.items():
            for user in users & helpers:
                if not folders.get(user, set()) <= folders[name]:
                    folders[name] |= folders[user]
                    changed = True
    return {name: folders.get(name, set()) for name in helpers}


def test_each_helper_at_the_root_of_tests_serves_several_folders():
    """A helper that one folder alone imports (or whose fixtures one folder alone takes) lives
    in that folder; its fixtures reach that folder's tests through the folder's conftest.py."""
    lone = {name: sorted(folders) for name, folders in served().items()
            if len(folders) < 2 and EVERY_FOLDER not in folders}
    assert not lone, ("move these helpers beside the tests they serve (tests/<folder>/), or, imported by no test, "
                      f"beside what runs them: {lone}")


def test_a_helper_in_a_subject_folder_serves_that_folder_only():
    """The other half of the rule: what several folders import is shared, and lives at tests/."""
    trees = parsed()
    placed = {path.stem: folder_of(path) for path in trees if folder_of(path) and path.parent.parent == TESTS
              and not path.stem.startswith("test_") and path.name != "conftest.py"}
    foreign = defaultdict(set)
    for path, tree in trees.items():
        for name in imported_names(tree) & placed.keys():
            if folder_of(path) != placed[name]:
                foreign[f"tests/{placed[name]}/{name}.py"].add(str(path.relative_to(TESTS)))
    assert not foreign, f"helpers that other folders import belong at tests/: {dict(foreign)}"


def test_module_names_are_unique_on_the_tests_path():
    """tests/ and each folder under it are on sys.path: two modules of one name would shadow each other."""
    where = defaultdict(list)
    for folder in [TESTS, *sorted(p for p in TESTS.iterdir() if p.is_dir())]:
        for entry in folder.iterdir():
            if (entry.suffix == ".py" and entry.name != "conftest.py") or (entry / "__init__.py").is_file():
                where[entry.stem].append(str(entry.relative_to(REPO)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"modules of the same name on the tests' path: {clashes}"
