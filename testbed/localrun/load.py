"""Load phase: a values file (rendered here with render.py's pipeline) or a file render.py
already wrote, down to the one Argo Workflow (or WorkflowTemplate) the runner runs.

The rendered output may hold several YAML documents: the Workflow plus objects it needs
on the cluster (a Volcano or scheduler-plugins PodGroup, ...). They are not run here;
each is named in an `ignored:` note.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import EXIT_INVALID, LocalRunError

RUNNABLE_KINDS = ("Workflow", "WorkflowTemplate")
_GANG_GROUPS = ("scheduling.volcano.sh/", "scheduling.x-k8s.io/", "scheduling.k8s.io/")

try:  # libyaml: a 1,000-node Workflow loads several times faster
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader


@dataclass
class LoadedWorkflow:
    doc: dict  # the Workflow or WorkflowTemplate
    source: str  # the file named on the command line
    rendered_here: bool  # True: a values file, rendered by this run
    ignored: list[str] = field(default_factory=list)  # one note per object not run

    @property
    def kind(self) -> str:
        return str(self.doc.get("kind"))


def read_text(path: str | Path) -> str:
    """The file's text. Not found, a folder, not UTF-8, unreadable: the ValuesError
    render.py raises (`FILE: (top level): no such file`), through the same values.read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        from torchdag.values import read

        read(path)  # raises ValuesError, worded exactly as for render.py
        raise  # pragma: no cover - it became readable in between


def _documents(text: str) -> list | None:
    """Every non-empty YAML document, or None when the text is not YAML we can split or is
    too deep or alias-expanded to build (the values loader's bounds: yamlread.graph_problem)."""
    from torchdag.yamlread import graph_problem

    loader = _Loader(text)
    try:
        documents = []
        while loader.check_node():
            node = loader.get_node()
            if node is None or graph_problem(node):
                return None if node is not None else documents
            document = loader.construct_document(node)
            if document is not None:
                documents.append(document)
        return documents
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()


def _is_object(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str)


def _is_runnable(doc) -> bool:
    return _is_object(doc) and doc["apiVersion"].startswith("argoproj.io/") and doc["kind"] in RUNNABLE_KINDS


def _name(doc: dict) -> str:
    meta = doc.get("metadata") or {}
    if meta.get("name"):
        return str(meta["name"])
    if meta.get("generateName"):
        return f"{meta['generateName']}*"
    return "(unnamed)"


def _ignored_note(doc) -> str:
    if not _is_object(doc):
        return f"ignored: a {type(doc).__name__} document (not a Kubernetes object)"
    api, kind = doc["apiVersion"], doc["kind"]
    if kind == "PodGroup" and api.startswith(_GANG_GROUPS):
        why = "gang scheduling is not simulated: every node starts here at once"
    elif api.startswith("argoproj.io/"):
        why = f"localrun runs a {' or '.join(RUNNABLE_KINDS)} only"
    else:
        why = "not run here"
    return f"ignored: {kind} {_name(doc)} ({api}: {why})"


def select_workflow(docs: list, source: str) -> tuple[dict, list[str]]:
    """The one Workflow/WorkflowTemplate among docs, and a note for every other one."""
    runnable = [d for d in docs if _is_runnable(d)]
    if not runnable:
        kinds = ", ".join(f"{d['kind']} ({d['apiVersion']})" if _is_object(d) else type(d).__name__ for d in docs)
        raise LocalRunError(f"{source}: no argoproj.io Workflow or WorkflowTemplate among its "
                            f"{len(docs)} document(s): {kinds or 'none'}", EXIT_INVALID)
    if len(runnable) > 1:
        names = ", ".join(f"{d['kind']} {_name(d)}" for d in runnable)
        raise LocalRunError(f"{source}: {len(runnable)} workflows ({names}); localrun runs one, "
                            "render one job per file", EXIT_INVALID)
    return runnable[0], [_ignored_note(d) for d in docs if d is not runnable[0]]


def load(path: str | Path) -> LoadedWorkflow:
    """Read a rendered file, or render a values file with render.py's pipeline
    (ValuesError propagates, worded as render.py words it)."""
    source = str(path)
    docs = _documents(read_text(path))
    if docs and any(_is_runnable(d) for d in docs):
        doc, ignored = select_workflow(docs, source)
        return LoadedWorkflow(doc, source, False, ignored)
    if docs and all(_is_object(d) for d in docs):
        select_workflow(docs, source)  # Kubernetes objects, none of them a Workflow: says so
    from torchdag import pipeline  # load, validate, plan, render

    rendered = pipeline.build(path)
    doc, ignored = select_workflow(_documents(rendered) or [], f"{source} (rendered)")
    return LoadedWorkflow(doc, source, True, ignored)


def load_workflow(path: str | Path) -> dict:
    """Just the Workflow (see load for the notes on what else the file held)."""
    return load(path).doc
