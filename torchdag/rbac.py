"""The rights a job's ServiceAccount needs (catalogue `rbac`): which of the Roles in docs/rbac/
(written from the catalogue by tools/sync_chart.py) the features of a plan call for. The render
header's `rbac:` line names them; the chart's rbac.create grants their rules in one Role
(chart/templates/role.yaml, from the same catalogue)."""

from __future__ import annotations

from .catalog import catalog, items
from .plan import Plan


def role_facts(plan: Plan) -> dict:
    """What decides the Roles: the helpers' ConfigMap task, the pod network's Service, elastic
    members (their host check ends a pod), and the gang's kind (its PodGroup)."""
    gang = plan.gang["kind"] if plan.gang else "none"
    return {"helpers": plan.agents is not None, "podNetwork": plan.network is not None,
            "elastic": plan.elastic_from < len(plan.nodes), **{kind: kind == gang for kind in catalog()["gangs"]}}


def roles(plan: Plan) -> list[str]:
    """The names of the Roles a job needs, in the catalogue's order."""
    return items(catalog()["rbac"]["roles"], role_facts(plan))


def role_files(plan: Plan) -> list[str]:
    """Each Role's file, relative to the repository (docs/rbac/<name>.yaml)."""
    return [f"{catalog()['rbac']['folder']}/{name}.yaml" for name in roles(plan)]


def files_argument(plan: Plan) -> str:
    """The Roles' files as kubectl's -f takes several: docs/rbac/A.yaml,docs/rbac/B.yaml."""
    return ",".join(role_files(plan))
