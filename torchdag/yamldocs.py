"""How Helm splits a values file into YAML documents, and reads each (torchdag/yamlread.py).

Helm 4 cuts the file at every line that starts with `---` (apimachinery's YAMLReader), reads
the first YAML document of each piece with go-yaml, and merges the pieces in order
(values.merge_maps). render.py cuts and reads the same way, so a file means one thing to both;
a directive, which Helm refuses, is refused here too.
"""

from __future__ import annotations

import re

import yaml

from .yamlread import GraphProblem, _BaseLoader, _StrictLoader, graph_problem

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
