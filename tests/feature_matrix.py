"""Where features meet (issue 37): the values files of a pairwise matrix over every feature
the docs offer, and what render.py makes of each, for tests/render/test_feature_matrix.py
(the invariants, fast tier) and tests/validators/test_feature_matrix_tools.py (Argo's own
validator and the chart, in the tiers that have them).

The dimensions and their values are below; allpairspy makes the cases, so that every value of
every dimension meets every value of every other in at least one case (an elastic member is
only a thing under node recovery: that pair is left out, rule elastic-needs-node-recovery).
A combination render.py refuses is not a Workflow: the refusals allowed are listed with the
dimensions that cause them, and every other case must render.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import yaml
from allpairspy import AllPairs

from torchdag.errors import ValuesError

DIMENSIONS = {
    "gang": ["none", "volcano", "kueue", "coscheduling"],
    "recovery": ["none", "node", "job"],
    "elastic": [False, True],
    "network": ["host", "pod"],
    "nicAuto": [False, True],
    "preflight": [False, True],
    "helpers": ["workflow", "image"],
    "recordErrors": [True, False],
    # 3 machines; 201 alike (past the full CRDs' 200 DAG tasks: loop tasks); 99 node shapes
    # (nodes differing in resources: a template each, and a retry wrapper each under node recovery)
    "machines": ["3", "201", "99-shapes"],
    "volume": [False, True],
}
NAMES = list(DIMENSIONS)


def _allowed(row: list) -> bool:
    given = dict(zip(NAMES, row))
    return not (given.get("elastic") and given.get("recovery", "node") != "node")


@dataclass(frozen=True)
class Case:
    gang: str
    recovery: str
    elastic: bool
    network: str
    nicAuto: bool
    preflight: bool
    helpers: str
    recordErrors: bool
    machines: str
    volume: bool

    @property
    def id(self) -> str:
        flags = [name for name in ("elastic", "nicAuto", "preflight", "volume") if getattr(self, name)]
        return "-".join([f"gang={self.gang}", f"recovery={self.recovery}", f"net={self.network}",
                         f"helpers={self.helpers}", f"record={'on' if self.recordErrors else 'off'}",
                         f"machines={self.machines}", *flags])

    @property
    def count(self) -> int:
        return {"3": 3, "201": 201, "99-shapes": 99}[self.machines]

    @property
    def least(self) -> int:
        """The fewest machines the job may run with."""
        return self.count - 1 if self.elastic else self.count

    def refusals(self) -> set[str]:
        """The rules render.py may refuse this combination by (nothing else may refuse it)."""
        shapes = self.machines == "99-shapes"
        return ({"kueue-podsets"} if shapes and self.gang == "kueue" else set()) | \
            ({"templates-too-many"} if shapes and self.recovery == "node" else set())

    def values(self) -> dict:
        nodes = []
        for rank in range(self.count):
            node = {"name": f"host-{rank:03d}", "accelerator": "ascend910", "devices": 1 + rank % 2}
            if self.network == "host":
                node["address"] = f"10.1.{rank // 250}.{rank % 250 + 1}"
                node["nic"] = "auto" if self.nicAuto else "eth0"
            if self.machines == "99-shapes":
                node["resources"] = {"limits": {"memory": f"{rank + 1}Gi"}}
            nodes.append(node)
        nodes[0]["master"] = True
        values = {"name": "matrix", "image": "registry.example.com/team/own-image:1", "script": "/workspace/train.py",
                  "args": ["--epochs", "1"], "backend": "gloo", "nodes": nodes,
                  "launcher": {"recordErrors": self.recordErrors},
                  "agents": {"fromWorkflow": self.helpers == "workflow"},
                  "preflight": {"enabled": self.preflight},
                  "scheduling": {"gang": self.gang, "timeout": 600},
                  "network": {"mode": self.network}}
        if self.gang == "kueue":
            values["scheduling"]["queue"] = "team-a"
        if self.network == "pod" and self.nicAuto:
            values["network"]["nic"] = "auto"
        if self.recovery != "none":
            values["failurePolicy"] = {"maxRestarts": 2, "backoffSeconds": 5, "recovery": self.recovery}
        if self.elastic:
            values["elastic"] = {"minNodes": self.least, "rejoinSeconds": 20}
        if self.volume:
            values["volumes"] = [{"name": "data", "mountPath": "/data", "persistentVolumeClaim": {"claimName": "data"},
                                  "readOnly": True}]
        return values


CASES = [Case(*row) for row in AllPairs(list(DIMENSIONS.values()), filter_func=_allowed)]


@dataclass(frozen=True)
class Outcome:
    case: Case
    text: str | None  # the Workflow's YAML as render.py writes it, or None when refused
    refused: tuple[tuple[str, str], ...]  # (field, message) of each problem when refused

    @functools.cached_property
    def workflow(self) -> dict:
        return next(doc for doc in yaml.safe_load_all(self.text) if doc and doc.get("kind") == "Workflow")


@functools.lru_cache(maxsize=None)
def outcome(case: Case, folder: str) -> Outcome:
    """render.py's result for the case, its values file written under folder (once per case)."""
    from pathlib import Path

    from torchdag import pipeline

    path = Path(folder) / f"{case.id}.yaml"
    path.write_text(yaml.safe_dump(case.values(), sort_keys=False), encoding="utf-8")
    try:
        return Outcome(case, pipeline.run(path).text, ())
    except ValuesError as err:
        return Outcome(case, None, tuple((".".join(map(str, p.path)), p.message) for p in err.problems))


def values_file(case: Case, folder: str):
    from pathlib import Path

    outcome(case, folder)
    return Path(folder) / f"{case.id}.yaml"
