"""Facts live once, in torchdag/catalog.yaml: neither renderer (render.py's Python and
templates, the chart's templates) writes one of them again as a literal. Each fact below is
looked for in the renderers' text in the forms a copy would take: a quoted string, a
pattern's fixed part next to where its field would go (`f"node-{rank}"`, `printf "node-%d"`,
`"node-" ~ rank`), the default accelerator beside the key it defaults, the table's header as
one list of its column names."""

from __future__ import annotations

import re

import pytest

from helpers import REPO
from torchdag.catalog import catalog

# The whole product: the wheel's modules (diagnose/ too), the pod helpers and the trainer, both
# renderers' templates.
RENDERERS = sorted([*(REPO / "torchdag").rglob("*.py"), *(REPO / "trainer").rglob("*.py"),
                    *(REPO / "templates").glob("*.j2"), *(REPO / "chart" / "templates").glob("*.*")])
# The catalogue itself, and the chart's generated copy of it.
NOT_RENDERERS = {"catalog.py", "_catalog.tpl"}
# Copies a file must keep, by (fact, file): the pod helpers run in the user's image with the
# standard library alone, without the catalogue; the test below holds their copies to it.
# Not copies: the typed Plan's field `service` (plan_model.Network.service, whether the run has
# its Service), a JSON key the chart's twin must spell, is also the Service task's name.
KNOWN: dict[tuple[str, str], int] = {("labels.nodeRank", "gangpods.py"): 1, ("hostLabel", "gangpods.py"): 1,
                                     ("network.task", "_plan_model.tpl"): 1}


def texts() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in RENDERERS if path.name not in NOT_RENDERERS}


def at(path: str):
    value = catalog()
    for key in path.split("."):
        value = value[key]
    return value


def quoted(text: str) -> str:
    """The text as a string literal; not as a subscript (`entry["service"]` reads a key)."""
    return rf"""(?<!\[)["']{re.escape(text)}["']"""


def pattern(text: str) -> str:
    """The fixed parts of a `{field}` pattern beside where a copy would put its field: a
    format field or placeholder (`{`, `%`), or the quote a concatenated literal ends with."""
    parts = re.split(r"\{[^{}]*\}", text)
    copies = [re.escape(before) + r"""(?=[{%"'])""" for before in parts[:-1] if before]
    copies += [r"""(?<=[}"'])""" + re.escape(after) for after in parts[1:] if after]
    return "|".join(copies)


def header(columns: list[str]) -> str:
    """The column names in order as one list, with nothing or a width between them."""
    return r"""[\s,]*(?:\d+[\s,]*)?""".join(quoted(column) for column in columns)


FACTS = {
    "nodeName": pattern(at("nodeName")),
    "nodeLoops.task": pattern(at("nodeLoops.task")),
    "container.retryWrapper": pattern(at("container.retryWrapper")),
    "defaultAccelerator": r"""accelerator["')\s,|]*(?:default\s*)?""" + quoted(at("defaultAccelerator")),
    "summary.columns": header(at("summary.columns")),
    "summary.skipped": pattern(at("summary.skipped")),
    "summary.footer": re.escape(at("summary.footer")),
    "entrypoint": quoted(at("entrypoint")),
    "container.retryStep": quoted(at("container.retryStep")),
    "hostCheck.task": quoted(at("hostCheck.task")),
    **{f"hostCheck.requests.{key}": quoted(value) for key, value in at("hostCheck.requests").items()},
    **{f"watch.requests.{key}": quoted(value) for key, value in at("watch.requests").items()},
    **{f"watch.task.{key}": quoted(value) for key, value in at("watch.task").items()},
    "watch.env": "|".join(quoted(name) for name, _ in at("watch.env")),
    **{f"labels.{key}": quoted(value) for key, value in at("labels").items()},
    "network.runLabel": quoted(at("network.runLabel")),
    "network.task": quoted(at("network.task")),
    "setEnvCommand": "|".join(quoted(word) for word in at("setEnvCommand") if "{" not in word and len(word) > 2),
    "shmVolume.medium": quoted(at("shmVolume.medium")),
    "hostLabel": quoted(at("hostLabel")),
    # the manifests torchdag applies: their heads are catalogue lines
    "manifest kinds": r'''kind: \\?"(?:PodGroup|ConfigMap|Service)\\?"''',
}


@pytest.mark.parametrize("fact", sorted(FACTS))
def test_no_renderer_writes_a_catalogue_fact_again(fact):
    found = {name: len(re.findall(FACTS[fact], text)) for name, text in texts().items()}
    copies = {name: count for name, count in found.items() if count != KNOWN.get((fact, name), 0)}
    assert not copies, f"{fact} is written again in {copies} (or KNOWN counts a copy that is gone): read it from " \
                       "the catalogue (torchdag/catalog.yaml)"


def test_the_schema_defaults_a_node_to_the_catalogues_default_accelerator():
    from torchdag.values import load_schema

    node = load_schema()["$defs"]["node"]["properties"]["accelerator"]
    assert node["default"] == catalog()["defaultAccelerator"]


def test_the_pod_helpers_copies_are_the_catalogues():
    from torchdag.agents import gangpods

    assert gangpods.RANK_LABEL == at("labels.nodeRank")
    pod = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": at("hostLabel"), "values": ["host-a"]}]}]}}}}}
    assert gangpods.pinned_host(pod) == "host-a"
