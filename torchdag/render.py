"""Render phase: plan -> Workflow YAML text through templates/workflow.yaml.j2.

The text is parsed back before anyone writes it, so a template bug can never ship a
document that is not YAML or is not one Workflow.
"""

from __future__ import annotations

import functools
import jinja2
import yaml

from . import TEMPLATES_DIR
from .plan import Plan, quantity
from .values import load_schema
from .yamlout import block, kube_quote, launcher_escape, quote

# Sources CANN's set_env.sh, then execs the launcher with its arguments as given: they
# travel as positional parameters, so bash never re-parses a user string.
SET_ENV_WRAPPER = (
    'set_env="$1"; shift; '
    'if [ ! -r "$set_env" ]; then echo "torchdag: cannot read $set_env (ascend.setEnvScript)" >&2; exit 127; fi; '
    '. "$set_env"; exec "$@"'
)


def argo_parameter(name: str) -> str:
    return "{{inputs.parameters." + name + "}}"


@functools.lru_cache(maxsize=None)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML: quoting is done by the q/kq filters
        extensions=["jinja2.ext.do"],
    )
    env.filters.update(q=quote, tojson=quote, kq=kube_quote, launcher_escape=launcher_escape, yaml=block, quantity=quantity)
    env.globals.update(param=argo_parameter, set_env_wrapper=SET_ENV_WRAPPER)
    return env


def _fill_missing(values: dict, schema: dict) -> dict:
    """Keys a user deleted with `null` read as None in templates instead of failing."""
    out = dict(values)
    for key, prop in schema.get("properties", {}).items():
        if "default" not in prop:
            continue
        if "properties" in prop:  # a section: `section: null` deleted all its defaults
            out[key] = _fill_missing(out.get(key) or {}, prop)
        elif key not in out:
            out[key] = None
    return out


def render(plan: Plan) -> str:
    filled = Plan(
        values=_fill_missing(plan.values, load_schema()),
        nodes=plan.nodes,
        shapes=plan.shapes,
        backend=plan.backend,
        backend_reason=plan.backend_reason,
        world_size=plan.world_size,
    )
    text = _environment().get_template("workflow.yaml.j2").render(plan=filled)
    check_document(text)
    return text


class RenderBug(Exception):
    """The templates produced something that is not one Workflow document."""


def check_document(text: str) -> None:
    """Parse the text back (composing nodes only: the full parse, at a third of the cost
    of building Python objects) and check it is exactly one Workflow mapping."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        documents = list(yaml.compose_all(text, Loader=loader))  # noqa: S506
    except yaml.YAMLError as err:
        raise RenderBug(f"rendered YAML does not parse: {err}") from err
    if len(documents) != 1 or not isinstance(documents[0], yaml.MappingNode):
        raise RenderBug(f"rendered YAML holds {len(documents)} documents, expected one mapping")
    top = {key.value: value for key, value in documents[0].value if isinstance(key, yaml.ScalarNode)}
    kind = top.get("kind")
    if not isinstance(kind, yaml.ScalarNode) or kind.value not in ("Workflow", "WorkflowTemplate") or "spec" not in top:
        raise RenderBug("rendered YAML is not a Workflow")
