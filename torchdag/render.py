"""Render phase: plan -> Workflow YAML text through templates/workflow.yaml.j2.

The text is parsed back before anyone writes it, so a template bug can never ship a
document that is not YAML, or a stream without exactly one Workflow in it.
"""

from __future__ import annotations

import functools

import jinja2
import yaml

from . import TEMPLATES_DIR
from .errors import InternalBug
from .plan import Plan
from .problems import Problem, ValuesError
from .summary import summary_comment
from .yamlout import quote, sorted_items, toleration

ARGO_KINDS = ("Workflow", "WorkflowTemplate")


@functools.lru_cache(maxsize=None)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML: quoting is done by the tojson filter
    )
    env.filters.update(tojson=quote, sorted_items=sorted_items, toleration=toleration)
    return env


# Argo keeps a Workflow in one Kubernetes object; etcd (and Argo, which offloads only the
# status) refuses one larger than this, counted as the JSON the API server stores.
MAX_OBJECT_BYTES = 1024 * 1024


class TooLarge(ValuesError):
    """The values are valid, but the Workflow they make is larger than Argo can store."""


def render(plan: Plan, source: str = "values") -> str:
    text = _environment().get_template("workflow.yaml.j2").render(plan=plan, summary=summary_comment(plan))
    for document in check_documents(text):
        size = json_size(document)
        if size > MAX_OBJECT_BYTES:
            message = (f"{len(plan.nodes)} nodes make a {_kind(document)} of {size} bytes as the API server stores it "
                       f"(JSON), over the {MAX_OBJECT_BYTES}-byte limit of one Kubernetes object: split the job, "
                       "or shorten args, env and names")
            raise TooLarge(source, [Problem(("nodes",), message)])
    return text


def _kind(document: yaml.MappingNode) -> str:
    return next((value.value for key, value in document.value if key.value == "kind"), "document")


def json_size(root: yaml.Node) -> int:
    """Bytes of the compact JSON of a composed document, as Go's encoder writes it (the
    quoting of yamlout.quote), without building Python objects: one walk over the nodes."""
    size = 0
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if node.tag.endswith((":int", ":bool", ":null")):
                size += len(node.value) if not node.tag.endswith(":null") else 4
            else:
                size += len(quote(node.value).encode())
        elif isinstance(node, yaml.MappingNode):
            size += 2 + max(len(node.value) - 1, 0) + len(node.value)  # braces, commas, colons
            for key, value in node.value:
                stack.append(key)
                stack.append(value)
        else:
            size += 2 + max(len(node.value) - 1, 0)  # brackets, commas
            stack.extend(node.value)
    return size


class RenderBug(InternalBug):
    """The templates produced something that is not the documents they should be."""


def check_documents(text: str) -> list[yaml.MappingNode]:
    """Parse the text back (composing nodes only: the full parse, at a third of the cost
    of building Python objects); every document a mapping with a kind, exactly one of
    them a Workflow or WorkflowTemplate with a spec."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        documents = list(yaml.compose_all(text, Loader=loader))
    except yaml.YAMLError as err:
        raise RenderBug(f"the rendered YAML does not parse: {err}") from err
    argo = 0
    for document in documents:
        if not isinstance(document, yaml.MappingNode):
            raise RenderBug("a rendered document is not a mapping")
        top = {key.value: value for key, value in document.value if isinstance(key, yaml.ScalarNode)}
        kind = top.get("kind")
        if not isinstance(kind, yaml.ScalarNode):
            raise RenderBug("a rendered document has no kind")
        if kind.value in ARGO_KINDS and "spec" in top:
            argo += 1
    if argo != 1:
        raise RenderBug(f"the rendered YAML holds {argo} Workflows, expected one")
    return documents
