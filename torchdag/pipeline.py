"""The pipeline: load -> validate -> plan -> render, each phase once, in this order.

    load      torchdag/values.py (YAML as Helm reads it: torchdag/yamlread.py)
    validate  the values laid over the schema's defaults, then torchdag/validate.py: every
              problem of the file in one round, one ValuesError (exit status 2)
    plan      torchdag/plan.py
    render    torchdag/render.py (templates/workflow.yaml.j2), parsed back and size-checked

Writing is the caller's (torchdag/output.py): nothing is written unless every phase passed.
render.py, `torchdag render/check` and the test bed's local runner all come through `run`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from . import catalog
from .errors import ValuesError
from .plan import Plan, make_plan
from .render import render
from .validate import validate as problems_of
from .values import Loaded, coalesce, fill_absent, read_all, schema_defaults
from .yamlout import quote


def load(values_paths: str | Path | Sequence[str | Path]) -> Loaded:
    """One values file, or several merged as Helm merges its -f files (values.read_all)."""
    return read_all([values_paths] if isinstance(values_paths, (str, Path)) else values_paths)


def validate(loaded: Loaded) -> dict:
    """Valid, default-filled values (every key present), or a ValuesError with every problem."""
    merged = coalesce(loaded.values, schema_defaults())
    problems = problems_of(merged)
    # An integer beyond 2^53 is worth a line only where nothing else is wrong with it
    # (`port: 99999999999999999999` is better told its range).
    named = {problem.path for problem in problems}
    problems += [problem for problem in loaded.too_big if problem.path not in named]
    if problems:
        raise ValuesError(loaded.source, problems, blame=loaded.blame)
    return fill_absent(merged)


def one_word_option(item: str) -> bool:
    """An args item that starts with -- and holds whitespace before any `=`: an option and its
    value typed as one item ("--type example"), which argparse cannot split."""
    return item.startswith("--") and bool(_SPACE.search(item.split("=", 1)[0])) and len(words_of(item)) > 1


_SPACE = re.compile(r"[\t\n\f\r ]")  # Go's \s, as the chart's NOTES split it


def words_of(item: str) -> list[str]:
    return [word for word in re.split(r"[\t\n\f\r ]+", item.strip()) if word]


@dataclass(frozen=True)
class Rendered:
    source: str  # the values file's name in messages
    values: dict  # valid and default-filled
    plan: Plan
    text: str  # the Workflow's YAML, as it will be written

    def warnings(self) -> list[str]:
        """Advice that does not stop rendering (printed on stderr)."""
        nodes = self.values["nodes"]
        advice = (self._typing_warnings() + self._hccl_port_warnings() + self._full_crd_warnings()
                  + self._executor_token_warnings() + self._shared_claim_warnings())
        if self.plan.network:
            return advice + [f"{self.source}: nodes[{index}].address: unused on the pod network (network.mode: pod): "
                             "the other nodes reach this node by its pod's DNS name; remove it"
                             for index, node in enumerate(nodes) if node.get("address")]
        if len(nodes) == 1:
            return advice
        return advice + [
            f"{self.source}: nodes[{index}].nic: not set; gloo then binds whatever the hostname resolves to "
            "(often loopback: 'connectFullMesh failed'); name the NIC or use nic: auto"
            for index, node in enumerate(nodes)
            if not node.get("nic")
        ]


    def _typing_warnings(self) -> list[str]:
        """What renders but will not run as meant: an args item holding an option and its value
        ("--type example", one word to the script), a relative script without workingDir."""
        texts = catalog.catalog()["warnings"]
        out = [f"{self.source}: args[{index}]: "
               + catalog.fill(texts["args-one-word"], {"value": quote(item), "words": "[" + ",".join(
                   quote(word) for word in words_of(item)) + "]"})
               for index, item in enumerate(self.values["args"]) if one_word_option(item)]
        script = self.values["script"]
        if not script.startswith("/") and not self.values["workingDir"]:
            out.append(f"{self.source}: script: " + catalog.fill(texts["script-relative"], {"value": quote(script)}))
        return out

    def _executor_token_warnings(self) -> list[str]:
        """The executor's token Secret, which Argo mounts and Kubernetes >= 1.24 no longer makes."""
        account = self.values["executorServiceAccountName"]
        if not account:
            return []
        text = catalog.fill(catalog.catalog()["warnings"]["executor-token-secret"],
                            {"secret": catalog.executor_token_secret(account), "account": account})
        return [f"{self.source}: executorServiceAccountName: {text}"]

    def _shared_claim_warnings(self) -> list[str]:
        """A claim every machine mounts read-write: only ReadWriteMany works (the access mode is
        the claim's, which the values cannot show, so this is advice)."""
        count = len(self.values["nodes"])
        if count < 2:
            return []
        text = catalog.catalog()["warnings"]["shared-claim"]
        return [f"{self.source}: volumes[{index}].persistentVolumeClaim: "
                + catalog.fill(text, {"claim": volume["persistentVolumeClaim"]["claimName"], "count": count})
                for index, volume in enumerate(self.values["volumes"])
                if volume.get("persistentVolumeClaim") and not volume.get("readOnly")]

    def _full_crd_warnings(self) -> list[str]:
        """Past 200 DAG tasks the nodes go in loop tasks (plan.node_loops), so only a job with
        about 200 node shapes still passes a bound of Argo's full CRDs."""
        limit = catalog.catalog()["argoFullCrdMaxItems"]
        plan, gang = self.plan, self.plan.gang
        extra = bool(gang) + bool(gang and gang["manifest"]) + bool(plan.network)
        counts = {"spec.templates": 1 + extra + len(plan.shapes),
                  "spec.templates[0].dag.tasks": extra + (len(plan.loops) if plan.loops else len(plan.nodes))}
        return [f"{self.source}: nodes: {len(plan.shapes)} node shapes (accelerator, devices, resources, NIC mode) "
                f"make {count} items in {field}; a cluster that installed Argo's full CRDs (its default since v4.0) "
                f"refuses more than {limit} ('{field}: Too many'): give the nodes fewer distinct resources"
                for field, count in counts.items() if count > limit]

    def _hccl_port_warnings(self) -> list[str]:
        """The port among the host ports HCCL takes from a base the job's env moved (rule
        port-hccl refuses the default ones): a warning, as the env may also be set elsewhere."""
        hccl = catalog.catalog()["ports"]["hcclHost"]
        base, port = str(self.values["env"].get(hccl["env"][0], "")), self.values["port"]
        if not (base.isdigit() and 0 <= port - int(base) < hccl["count"]):
            return []
        if not any(catalog.is_ascend(catalog.node_accelerator(node)) for node in self.values["nodes"]):
            return []
        return [f"{self.source}: port: {port} is among the {hccl['count']} host ports HCCL takes from env "
                f"{hccl['env'][0]} ({base}) on Ascend nodes; the rendezvous and HCCL may collide on the master"]


def run(values_path: str | Path) -> Rendered:
    """Every phase short of writing; raises ValuesError on bad input."""
    loaded = load(values_path)
    values = validate(loaded)
    plan = make_plan(values)
    return Rendered(loaded.source, values, plan, render(plan, loaded.source))
