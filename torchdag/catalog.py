"""The catalogue (torchdag/catalog.yaml) as Python names, and its small interpreter.

The YAML file is the single source: the Helm chart reads a generated copy of it
(chart/templates/_catalog.tpl, `make chart-sync`) and interprets it with the same rules
(`torchdag.fill`, `torchdag.items`, `torchdag.problem` in chart/templates/_helpers.tpl),
so nothing here may add knowledge the chart would not have.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import yaml

from .errors import Problem

CATALOG_PATH = Path(__file__).with_name("catalog.yaml")


@functools.lru_cache(maxsize=None)
def catalog() -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 6x faster, same result
    return yaml.load(CATALOG_PATH.read_text(encoding="utf-8"), Loader=loader)


# --- the interpreter (twins: torchdag.fill, torchdag.items, torchdag.problem) -------------

_FIELD = re.compile(r"\{([^{}]*)\}")


def fill(text: str, fields: dict) -> str:
    """`{name}` replaced by fields[name], in one pass (a filled value is never read again);
    names not in fields stay as written."""
    return _FIELD.sub(lambda m: str(fields[m[1]]) if m[1] in fields else m[0], text)


def items(entries: list, facts: dict) -> list:
    """A conditional list: each entry a string, or {value, if, unless}, kept when every fact
    in `if` holds and none in `unless`; values (a string or a list of them) filled from facts.
    An unknown fact name is a KeyError: a typo in the catalogue fails every render."""
    out: list = []
    for entry in entries:
        entry = entry if isinstance(entry, dict) else {"value": entry}
        wanted, unwanted = [facts[name] for name in entry.get("if", ())], [facts[name] for name in entry.get("unless",
                                                                                                             ())]
        if all(wanted) and not any(unwanted):
            value = entry["value"]
            out.append([fill(part, facts) for part in value] if isinstance(value, list) else fill(value, facts))
    return out


def problem(rule: str, path: tuple, **fields: Any) -> Problem:
    """The Problem of a coded rule, worded by its message in the catalogue."""
    return Problem(path, fill(catalog()["messages"][rule], fields))


# --- facts -----------------------------------------------------------------------------


def executor_token_secret(account: str) -> str:
    """The Secret Argo mounts for executor.serviceAccountName when the account names none
    (util/secrets TokenName): `<account>.service-account-token`."""
    return f"{account}.service-account-token"


def accelerator(kind: str) -> dict:
    """One accelerator kind's entry, with its device kind's facts merged in."""
    entry = catalog()["accelerators"][kind]
    return {**catalog()["devices"][entry["device"]], **entry}


def node_accelerator(node: dict) -> str:
    """A node's accelerator kind: its own, else the catalogue's default kind."""
    return node.get("accelerator", catalog()["defaultAccelerator"])


def node_name(rank: int | str) -> str:
    """A machine's DAG task (and, on the pod network, its pod's hostname) for its rank."""
    return fill(catalog()["nodeName"], {"rank": rank})


def argo_parameter(name: str) -> str:
    """The Argo placeholder of a template's input parameter, filled per DAG task."""
    return fill(catalog()["container"]["inputParameter"], {"name": name})


def accelerator_kinds() -> list[str]:
    return list(catalog()["accelerators"])


def is_ascend(kind: str) -> bool:
    return accelerator(kind)["ascend"]


def hccl_limit(kind: str, nnodes: int, duo_card: bool) -> dict | None:
    """The first of the card's HCCL limits (hcclLimits) that holds for this job, or None."""
    holds = {"always": True, "multiNode": nnodes > 1, "noDuoCard": not duo_card}
    return next((limit for limit in catalog()["hcclLimits"][accelerator(kind)["hccl"]] if holds[limit["when"]]), None)


def hccl_exec_timeout(process_group: int) -> int:
    """What CANN makes of HCCL_EXEC_TIMEOUT=process_group: at most `max`, rounded down to
    a multiple of `step` (and at least one step)."""
    limits = catalog()["hcclExecTimeout"]
    return max(limits["step"], min(int(process_group), limits["max"]) // limits["step"] * limits["step"])


def resource_name(kind: str, values: dict) -> str:
    return (values.get("resourceNames") or {}).get(kind) or accelerator(kind)["resource"]


def all_items(entries: list) -> list[str]:
    """A conditional list's values, whatever their `if` and `unless` (items() picks some)."""
    return [entry["value"] if isinstance(entry, dict) else entry for entry in entries]


@functools.lru_cache(maxsize=None)
def _ipv4() -> re.Pattern:
    return re.compile(catalog()["ipv4"].rstrip("$") + r"\Z")


def is_ipv4(text: str) -> bool:
    return bool(_ipv4().match(text))
