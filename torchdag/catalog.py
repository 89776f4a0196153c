"""The accelerator catalogue (torchdag/catalog.yaml) as Python names.

The YAML file is the single source: the Helm chart reads a generated copy of it
(chart/templates/_catalog.tpl, `make chart-sync`), so nothing here may add knowledge
the chart would not have.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

CATALOG_PATH = Path(__file__).with_name("catalog.yaml")


@functools.lru_cache(maxsize=None)
def catalog() -> dict:
    return yaml.safe_load(CATALOG_PATH.read_text(encoding="utf-8"))


def accelerator(kind: str) -> dict:
    """One accelerator kind's entry, with its device kind's facts merged in."""
    entry = catalog()["accelerators"][kind]
    return {**catalog()["devices"][entry["device"]], **entry}


def accelerator_kinds() -> list[str]:
    return list(catalog()["accelerators"])


def is_ascend(kind: str) -> bool:
    return accelerator(kind)["ascend"]


def native_backend(kind: str) -> str:
    return accelerator(kind)["backend"]


def hccl_exec_timeout(process_group: int) -> int:
    """What CANN makes of HCCL_EXEC_TIMEOUT=process_group: at most `max`, rounded down to
    a multiple of `step` (and at least one step)."""
    limits = catalog()["hcclExecTimeout"]
    return max(limits["step"], min(int(process_group), limits["max"]) // limits["step"] * limits["step"])


def resource_name(kind: str, values: dict) -> str:
    return (values.get("resourceNames") or {}).get(kind) or accelerator(kind)["resource"]


def reserved_env() -> list[str]:
    return catalog()["reservedEnv"]


def builtin_volumes() -> list[str]:
    return [catalog()["shmVolume"]["name"]] + [mount["name"] for mount in catalog()["ascendMounts"]]


def builtin_mount_paths() -> list[str]:
    return [catalog()["shmVolume"]["mountPath"]] + [mount["mountPath"] for mount in catalog()["ascendMounts"]]


@functools.lru_cache(maxsize=None)
def _ipv4() -> re.Pattern:
    return re.compile(catalog()["ipv4"].rstrip("$") + r"\Z")


def is_ipv4(text: str) -> bool:
    return bool(_ipv4().match(text))


def set_env_wrapper() -> str:
    """The bash -c script that sources CANN's set_env.sh and execs the launcher."""
    return catalog()["setEnvWrapper"]
