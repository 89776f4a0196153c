"""The features the docs offer, met pairwise (tests/feature_matrix.py): every Workflow render.py
accepts holds each invariant below, with the user's own image (nothing of torchdag in it). A
combination render.py refuses is refused only by a rule that names its field."""

from __future__ import annotations

import ast
import posixpath
import re

import pytest
import yaml
from feature_matrix import CASES, DIMENSIONS, outcome

from helpers import REPO
from torchdag.catalog import catalog

AGENTS = catalog()["agents"]["path"]
AGENT_SOURCES = REPO / "torchdag" / "agents"
ROLE = catalog()["labels"]["role"]
LIMIT = catalog()["argoFullCrdMaxItems"]
REFUSALS = {  # rule -> (the field it names, words of its message)
    "kueue-podsets": ("scheduling.gang", "a Workload holds at most"),
    "templates-too-many": ("nodes", "Argo's full CRDs"),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("matrix"))


def accepted(case, folder) -> dict:
    """The case's Workflow, or {} when render.py refused it (test_only_the_listed_rules_refuse)."""
    done = outcome(case, folder)
    return {} if done.text is None else done.workflow


def templates(wf: dict) -> dict[str, dict]:
    return {template["name"]: template for template in wf["spec"]["templates"]}


def by_role(wf: dict, role: str) -> dict:
    return next(t for t in wf["spec"]["templates"] if (t.get("metadata") or {}).get("labels", {}).get(ROLE) == role)


def sibling_imports(name: str) -> set[str]:
    """The helpers' folder files a helper imports beside it (by module name, or relatively)."""
    siblings = {path.stem for path in AGENT_SOURCES.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse((AGENT_SOURCES / name).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in siblings:
            found.add(node.module.split(".")[0] + ".py")
        elif isinstance(node, ast.Import):
            found |= {alias.name + ".py" for alias in node.names if alias.name in siblings}
    return found


def helpers_run(container: dict) -> set[str]:
    """Every file of the helpers' folder a container runs, and what those import."""
    words = [*container.get("command", []), *container.get("args", [])]
    paths = [word.partition("=")[2] if word.startswith("-") else word for word in words]
    wanted = {posixpath.basename(path) for path in paths if path.startswith(AGENTS + "/")}
    pending = list(wanted)
    while pending:
        for found in sibling_imports(pending.pop()) - wanted:
            wanted.add(found)
            pending.append(found)
    return wanted


def config_map(wf: dict) -> dict | None:
    for template in wf["spec"]["templates"]:
        manifest = (template.get("resource") or {}).get("manifest")
        if manifest and yaml.safe_load(manifest).get("kind") == "ConfigMap":
            return yaml.safe_load(manifest)
    return None


def test_the_pairs_cover_every_value_of_every_dimension_with_every_other():
    seen = {(a, x, b, y) for case in CASES for a, x in vars(case).items() for b, y in vars(case).items() if a < b}
    for a, xs in DIMENSIONS.items():
        for b, ys in DIMENSIONS.items():
            for x in xs:
                for y in ys:
                    if a < b and not ({a, b} == {"elastic", "recovery"} and True in (x, y) and "node" not in (x, y)):
                        assert (a, x, b, y) in seen, (a, x, b, y)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_only_the_listed_rules_refuse_a_combination_naming_its_field(case, folder):
    done, allowed = outcome(case, folder), case.refusals()
    if not allowed:
        assert done.text is not None, f"render.py refused a combination the docs offer: {done.refused}"
        return
    assert done.text is None, f"rendered, but a cluster refuses it: expected a refusal by {sorted(allowed)}"
    for field, message in done.refused:
        assert any(field == REFUSALS[rule][0] and REFUSALS[rule][1] in message for rule in allowed), (field, message)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_helper_a_container_runs_is_in_the_configmap_mounted_there(case, folder):
    wf = accepted(case, folder)
    if not wf:
        return
    data = config_map(wf)
    volumes = {volume["name"]: volume for volume in wf["spec"].get("volumes", [])}
    runs_any = False
    for template in wf["spec"]["templates"]:
        container = template.get("container")
        needed = helpers_run(container) if container else set()
        if not needed:
            continue
        runs_any = True
        mounted = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
        if case.helpers == "image":  # the image brings them: nothing may hide its folder
            assert data is None and AGENTS not in mounted, template["name"]
            continue
        assert data is not None, "no helpers' ConfigMap"
        assert mounted.get(AGENTS, {}).get("configMap", {}).get("name") == data["metadata"]["name"], template["name"]
        assert needed <= set(data["data"]), f"{template['name']} runs {sorted(needed - set(data['data']))} " \
                                            f"from {AGENTS}, which its ConfigMap lacks"
        for name in needed:
            assert data["data"][name] == (AGENT_SOURCES / name).read_text(encoding="utf-8"), name
    assert runs_any, "every job runs its scheduling watch from the helpers' folder"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_no_two_mounts_of_a_container_share_a_path(case, folder):
    wf = accepted(case, folder)
    for template in wf.get("spec", {}).get("templates", []):
        paths = [posixpath.normpath(m["mountPath"]) for m in (template.get("container") or {}).get("volumeMounts", [])]
        assert len(paths) == len(set(paths)), (template["name"], paths)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_templates_and_dag_tasks_fit_argos_full_crds(case, folder):
    wf = accepted(case, folder)
    if not wf:
        return
    assert len(wf["spec"]["templates"]) <= LIMIT, f"{len(wf['spec']['templates'])} templates, over {LIMIT}"
    for template in wf["spec"]["templates"]:
        assert len((template.get("dag") or {}).get("tasks", [])) <= LIMIT, template["name"]


@pytest.mark.parametrize("case", [c for c in CASES if c.gang != "none"], ids=lambda c: c.id)
def test_a_gangs_minimum_is_the_fewest_machines_the_job_may_run_with(case, folder):
    wf = accepted(case, folder)
    if not wf:
        return
    if case.gang == "kueue":  # no minimum: the group is every machine, each pod says how many
        for template in wf["spec"]["templates"]:
            annotations = (template.get("metadata") or {}).get("annotations", {})
            if "container" in template and ROLE not in (template.get("metadata") or {}).get("labels", {}):
                assert annotations["kueue.x-k8s.io/pod-group-total-count"] == str(case.count)
        return
    group = yaml.safe_load(templates(wf)["gang"]["resource"]["manifest"])
    assert group["spec"]["minMember"] == case.least
    if case.gang == "volcano":  # the accelerators of those machines, the first in rank order
        assert group["spec"]["minResources"] == {"huawei.com/Ascend910": str(sum(1 + r % 2 for r in range(case.least)))}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_pod_that_waits_for_its_machine_is_bounded(case, folder):
    """Each node's pod is pinned to its machine, and waits Pending while that machine is gone
    or full: its first placement is the scheduling watch's (in the DAG a whole-job restart runs
    again), each retry under node recovery the host check's, beside it in the same step group.
    Argo's template `timeout` bounds no Pending pod (the controller checks it only when it
    looks at the Workflow again), so none is relied on."""
    wf = accepted(case, folder)
    if not wf:
        return
    all_templates = templates(wf)
    train = all_templates[wf["spec"]["entrypoint"]]
    watch = by_role(wf, "gang-watch" if case.gang != "none" else "schedule-watch")
    assert watch["name"] in {task["template"] for task in train["dag"]["tasks"]}
    assert {f"--pods={case.count}", "--timeout=600"} <= set(watch["container"]["command"])
    for template in wf["spec"]["templates"]:
        assert "timeout" not in template, template["name"]
    wrappers = [t for t in wf["spec"]["templates"] if "steps" in t]
    if case.recovery != "node":
        assert not wrappers
        return
    called = {task["template"] for task in train["dag"]["tasks"]}
    shapes = {t["name"] for t in wf["spec"]["templates"] if "container" in t and ROLE not in t["metadata"]["labels"]}
    assert not called & shapes, "under node recovery every node task calls its retry wrapper"
    check = by_role(wf, "host-check")
    command = check["container"]["command"]
    assert {"--what=retry", "--rank={{inputs.parameters.node-rank}}", "--timeout=600"} <= set(command)
    if case.elastic:
        assert {f"--elastic-from={case.least}", "--elastic-timeout=20"} <= set(command)
    for wrapper in wrappers:
        (group,) = [g for g in wrapper["steps"] if any(step["name"] == "train" for step in g)]
        (step,) = [s for s in group if s["template"] == check["name"]]
        assert step["when"] == "{{retries}} > 0"
        assert step["arguments"]["parameters"] == [{"name": "node-rank", "value": "{{inputs.parameters.node-rank}}"}]


@pytest.mark.parametrize("case", [c for c in CASES if c.volume], ids=lambda c: c.id)
def test_a_user_volume_at_the_helpers_path_is_refused_naming_it(case, folder, tmp_path):
    from torchdag import pipeline
    from torchdag.errors import ValuesError

    values = case.values()
    values["volumes"][0]["mountPath"] = AGENTS + "/"
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(values))
    if case.helpers == "image":  # the image's own helpers: the user may put them there
        return
    with pytest.raises(ValuesError) as refused:
        pipeline.run(path)
    assert re.search(rf"volumes\[0\]\.mountPath: '{AGENTS}/' is where the Workflow mounts torchdag's helpers",
                     str(refused.value)), str(refused.value)
