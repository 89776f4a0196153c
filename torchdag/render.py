"""Render phase: plan -> Workflow YAML text through templates/workflow.yaml.j2.

The text is parsed back before anyone writes it, so a template bug can never ship a
document that is not YAML, or a stream without exactly one Workflow in it.
"""

from __future__ import annotations

import functools
import json
import os

import jinja2
import yaml

from . import TEMPLATES_DIR
from .catalog import argo_parameter, catalog, fill, items, problem
from .errors import InternalBug, Problem, ValuesError
from .plan import Plan
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
    env.globals.update(input_parameter=argo_parameter, catalog=catalog(), fill=fill)
    return env


class TooLarge(ValuesError):
    """The values are valid, but the Workflow they make is larger than Argo can keep."""


def render(plan: Plan, source: str = "values", check_size: bool = True) -> str:
    """The Workflow's text, parsed back; refused when larger than Argo can keep, unless
    check_size is off (bench/bench_cluster.py: what Argo does with what the guard refuses)."""
    problems = [found for found in [gang_problem(plan)] if found] + full_crd_problems(plan)
    if problems:
        raise ValuesError(source, problems)
    text = _environment().get_template("workflow.yaml.j2").render(plan=plan, summary=summary_comment(plan))
    for document in check_documents(text):
        problem = size_problem(plan, _kind(document), json_size(document)) if check_size else None
        if problem:
            raise TooLarge(source, [problem])
    return text


def gang_problem(plan: Plan) -> Problem | None:
    """A gang scheduler that makes a group of each node template and admits a bounded number
    of them (catalog gangs maxPodSets: Kueue's Workload); a plan-time rule, as the templates
    are the plan's."""
    entry = catalog()["gangs"][plan.gang["kind"]] if plan.gang else {}
    if len(plan.shapes) <= entry.get("maxPodSets", len(plan.shapes)):
        return None
    fields = {"count": len(plan.shapes), "max": entry["maxPodSets"], "names": ", ".join(s.name for s in plan.shapes)}
    return Problem(("scheduling", "gang"), fill(entry["tooManyPodSets"], fields))


def item_counts(plan: Plan) -> dict[str, int]:
    """What Argo's full CRDs count (catalog argoFullCrdMaxItems): the Workflow's templates and
    its one DAG's tasks, as the templates print them."""
    helpers = bool(plan.gang and plan.gang["manifest"]) + bool(plan.network) + bool(plan.agents)
    templates = (1 + len(plan.shapes) * (2 if plan.node_retry else 1) + 1 + bool(plan.host_check) + helpers)
    tasks = (len(plan.loops) if plan.loops else len(plan.nodes)) + 1 + helpers
    return {"spec.templates": templates, "spec.templates[0].dag.tasks": tasks}


def full_crd_problems(plan: Plan) -> list[Problem]:
    """Rule templates-too-many: past 200 machines the nodes go in loop tasks (plan.node_loops),
    but each node shape is a template (and, under node recovery, a retry wrapper too): Argo's
    full CRDs refuse more than 200 of either; a plan-time rule, as the counts are the plan's."""
    limit = catalog()["argoFullCrdMaxItems"]
    wrappers = " (a container template and, under failurePolicy.recovery node, a retry wrapper each)" \
        if plan.node_retry else ""
    return [problem("templates-too-many", ("nodes",), shapes=len(plan.shapes), count=count, field=field, limit=limit,
                    wrappers=wrappers if field == "spec.templates" else "")
            for field, count in item_counts(plan).items() if count > limit]


def status_shape(plan: Plan) -> str:
    """The catalogue's argoStatus.shapes entry for the plan: whole-job restarts (or none),
    node recovery, or node recovery with elastic members (each retry behind a host check)."""
    if not plan.node_retry:
        return "job"
    return "elastic" if plan.elastic_from < len(plan.nodes) else "node"


def distinct_bytes(plan: Plan) -> int:
    """Bytes of the machines' own parameter values (host, node rank, NIC, address) that the
    other machines do not share: Argo's status repeats each in several node entries, which lie
    far apart in its JSON (sorted by node id), so gzip keeps them nearly whole. What every
    machine shares at the start or the end of a value (a cluster's naming scheme) compresses away."""
    columns: dict[str, list[bytes]] = {}
    for node in plan.nodes:
        for name, value in node.arguments:
            columns.setdefault(name, []).append(value.encode())
    total = 0
    for values in columns.values():
        prefix = len(os.path.commonprefix(values))
        suffix = min(len(os.path.commonprefix([value[::-1] for value in values])), min(map(len, values)) - prefix)
        total += sum(map(len, values)) - len(values) * (prefix + suffix)
    return total


def status_parts(plan: Plan) -> tuple[int, int, int]:
    """(failures survived, the status's bytes for the job, its milli-bytes for each machine),
    packed as Argo packs it, by the shape's catalogue figures (argoStatus.shapes, measured on
    the real controller): a base for the job, each machine and each byte of the machines' own
    values, plus what each failure the job survives adds (failurePolicy.maxRestarts; under node
    recovery the master's loss, after which every node's retry starts its pod again)."""
    typed = plan.typed
    failures = typed.retry.limit if typed.retry else 0
    facts = catalog()["argoStatus"]
    figures = facts["shapes"][status_shape(plan)]
    others = {"podGroup": bool(typed.gang and typed.gang.pod_group), "podNetwork": typed.network.service,
              "helpersTask": typed.helpers.from_workflow}
    pods, machines, own = len(items(facts["otherPods"], others)), len(plan.nodes), distinct_bytes(plan)
    job = (figures["perJob"] + pods * figures["perOtherPod"]
           + failures * (figures["perFailure"] + pods * figures["perFailureOtherPod"]))
    per_failure = 1000 * figures["perFailureMachine"] + own * figures["perFailureMilliByte"] // machines
    per_machine = 1000 * figures["perMachine"] + own * figures["perMilliByte"] // machines + failures * per_failure
    return failures, job, per_machine


def status_budget(plan: Plan, offloaded: bool | None = None) -> tuple[int, int]:
    """Rule workflow-size: (failures survived, bytes) of the status Argo keeps beside the spec;
    no bytes when the controller offloads node status (`offloaded`; default: as the values say)."""
    failures, job, per_machine = status_parts(plan)
    if plan.typed.job.node_status_offload if offloaded is None else offloaded:
        return failures, 0
    return failures, job + -(-per_machine * len(plan.nodes) // 1000)


def size_problem(plan: Plan, kind: str, spec_bytes: int) -> Problem | None:
    facts = catalog()["argoStatus"]
    limit = facts["maxBytes"]
    failures, status = status_budget(plan)
    if spec_bytes + status <= limit:
        return None
    _, job, per_machine = status_parts(plan)
    # The machines that would fit: each keeps the fewest spec bytes a machine adds and its own
    # values; the rest of the spec (templates, helpers) stays whatever the count.
    machines, own = len(plan.nodes), distinct_bytes(plan)
    floor = facts["specPerMachineAtLeast"]
    if plan.loops:  # the least a machine's loop item adds (compact JSON, its comma), less its own bytes
        floor = max(floor, min(len(json.dumps(json.loads(item), separators=(",", ":"))) + 1
                               for loop in plan.loops for item in loop.items) - own // machines)
    helpers = facts["helpersAdvice"] if plan.typed.helpers.from_workflow else ""
    fixed = max(0, spec_bytes - machines * floor - own)
    fits = max(0, 1000 * (limit - job - fixed) // (1000 * floor + 1000 * own // machines + per_machine))
    return problem("workflow-size-spec" if spec_bytes > limit else "workflow-size-status", ("nodes",),
                   count=len(plan.nodes), kind=kind, bytes=spec_bytes, limit=limit, status=status, restarts=failures,
                   shape=facts["shapes"][status_shape(plan)]["name"], fits=fits, helpers=helpers,
                   restarts_advice=facts["restartsAdvice"] if failures else "")


def _kind(document: yaml.MappingNode) -> str:
    return next((value.value for key, value in document.value if key.value == "kind"), "document")


def json_size(root: yaml.Node) -> int:
    """Bytes of the compact JSON of a composed document, as Go's encoder writes it (the
    quoting of yamlout.quote), without building Python objects: one walk over the nodes."""
    size = 0
    quoted: dict[str, int] = {}  # a string's quoted bytes, once per distinct string (4,096 `name`s)
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if node.tag.endswith((":int", ":bool", ":null")):
                size += len(node.value) if not node.tag.endswith(":null") else 4
            else:
                length = quoted.get(node.value)
                if length is None:
                    length = quoted[node.value] = len(quote(node.value).encode())
                size += length
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
