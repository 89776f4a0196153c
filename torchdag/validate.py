"""Validate phase: the JSON Schema first, then the rules a schema cannot express.

Each problem is one line naming the field path and what is allowed. Every rule here is
mirrored by a `fail` in chart/templates/_validate.tpl with the same wording.
"""

from __future__ import annotations

import json
import re
from typing import Any

from . import catalog
from .problems import Problem
from .schema_check import schema_problems, show as _show
from .values import load_schema

# Kept as names for the tests and the chart's drift check; the catalogue holds them.
RESERVED_ENV = tuple(catalog.reserved_env())
BUILTIN_VOLUMES = tuple(catalog.builtin_volumes())

ARGO_OPEN = "{{"


# Characters no rendered string may hold: YAML cannot carry DEL, the C1 controls (NEL
# would even fold the line), U+FFFE/U+FFFF or lone surrogates, and Go's JSON encoder (the
# chart's quoting) would print them raw where Python cannot read them back.
_UNCARRIABLE = re.compile("[\u007f-\u009f\ufffe\uffff\ud800-\udfff]")


def _string_problem(text: str, is_key: bool = False) -> str | None:
    """What is wrong with one string (a value, or a mapping key), or None."""
    subject = "key" if is_key else None
    if ARGO_OPEN in text:
        return f"{subject or _show(text)} contains '{{{{', which Argo would read as a placeholder and cannot escape; remove it"
    if "\x00" in text:
        return f"{subject + ' ' if subject else ''}contains a NUL character, which no process argument or environment value can carry"
    if _UNCARRIABLE.search(text):
        return f"{subject + ' ' if subject else ''}contains a control character (DEL, U+0080-U+009F, U+FFFE or U+FFFF), which YAML cannot carry; remove it"
    return None


def string_problems(values: Any, path: tuple = ()) -> list[Problem]:
    """Strings no Workflow can carry: `{{` (Argo substitutes it everywhere and offers no
    escape, argo#8253), NUL (execve and environ end a string there) and characters YAML
    cannot hold. Keys are checked too."""
    found = []
    if isinstance(values, str):
        message = _string_problem(values)
        if message:
            found.append(Problem(path, message))
    elif isinstance(values, dict):
        for key, item in values.items():
            message = _string_problem(key, is_key=True) if isinstance(key, str) else None
            if message:
                found.append(Problem(path + (key,), message))
            found.extend(string_problems(item, path + (key,)))
    elif isinstance(values, list):
        for index, item in enumerate(values):
            found.extend(string_problems(item, path + (index,)))
    return found


# Launcher flags torchdag plans itself (either spelling); an extraArgs copy would override
# the planned value silently, since argparse keeps the last one.
PLANNED_LAUNCHER_FLAGS = ("nnodes", "node_rank", "nproc_per_node", "master_addr", "master_port", "rdzv_conf",
                          "max_restarts", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "standalone")
# Linux refuses any single exec argument or environment string longer than this (MAX_ARG_STRLEN, with its NUL).
MAX_ARG_BYTES = 131072 - 1
# Kubernetes: all annotations of an object together (keys and values).
MAX_ANNOTATION_BYTES = 256 * 1024
RESERVED_LABEL_PREFIX = "torchdag.io/"


def clean_path(path: str) -> str:
    """An absolute path in canonical form, as Go's path.Clean (sprig `clean`) writes it:
    `//dev/./shm/` and `/dev/x/../shm` are both `/dev/shm`."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def _dicts(items: Any) -> list[tuple[int, dict]]:
    """(index, item) for the items of a list that are mappings: rules run on what the
    schema check left usable, so independent problems are reported in one round."""
    return [(i, item) for i, item in enumerate(items) if isinstance(item, dict)] if isinstance(items, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def null_problems(values: dict, schema: dict | None = None) -> list[Problem]:
    """A user `null` removes a default (Helm's rule). Where absence means nothing sensible
    (port, backend, hostNetwork...), that is an error, not a silent 0 or false; keys whose
    absence is meaningful say so with `x-null`, and empty defaults ("", [], {}) are the same
    as absent."""
    found = []
    for refused in null_refused(schema if schema is not None else load_schema()):
        *parents, key = refused["path"]
        section = values.get(parents[0]) if parents else values
        if isinstance(section, dict) and key not in section:
            found.append(Problem(tuple(refused["path"]), f"is null, which would delete {refused['what']}; remove the line to keep the default, or give a value"))
    return found


def null_refused(schema: dict, prefix: tuple = ()) -> list[dict]:
    """The keys on which a user `null` is an error, with what it would delete (the chart
    gets this list in _catalog.tpl)."""
    out = []
    for key, prop in schema.get("properties", {}).items():
        if "default" not in prop or "x-null" in prop:
            continue
        if "properties" in prop:
            out.append({"path": [*prefix, key], "what": "its keys' defaults"})
            out.extend(null_refused(prop, prefix + (key,)))
        elif prop["default"] not in ("", [], {}):
            out.append({"path": [*prefix, key], "what": f"the default {json.dumps(prop['default'])}"})
    return out


def _node_problems(values: dict) -> list[Problem]:
    problems = []
    first_by_name: dict[str, int] = {}
    first_by_address: dict[str, int] = {}
    master_index = None
    for index, node in _dicts(values.get("nodes")):
        name = _text(node.get("name"))
        if name is None:
            continue
        address = _text(node.get("address")) or name
        if name in first_by_name:
            problems.append(Problem(("nodes", index, "name"), f"{name!r} duplicates nodes[{first_by_name[name]}].name; each machine is listed once"))
        elif address in first_by_address:
            problems.append(Problem(("nodes", index, "address"), f"{address!r} is also the address of nodes[{first_by_address[address]}]; each node needs its own address"))
        first_by_name.setdefault(name, index)
        first_by_address.setdefault(address, index)
        if node.get("master") is True:
            if master_index is None:
                master_index = index
            else:
                problems.append(Problem(("nodes", index, "master"), f"more than one master: nodes[{master_index}] is the master already; at most one node may set master: true"))
    return problems


def _kinds(values: dict) -> list[tuple[int, str]]:
    known = set(catalog.accelerator_kinds())
    out = []
    for index, node in _dicts(values.get("nodes")):
        kind = node.get("accelerator", "cpu")
        if isinstance(kind, str) and kind in known:
            out.append((index, kind))
    return out


def backend_problems(values: dict) -> list[Problem]:
    """Which backend can span these nodes, card by card (catalogue `hccl`)."""
    kinds = _kinds(values)
    if not kinds:
        return []
    backend = values.get("backend", "auto")
    distinct = list(dict.fromkeys(kind for _, kind in kinds))
    nnodes = len(values["nodes"]) if isinstance(values.get("nodes"), list) else 0
    if backend == "auto" and len(distinct) > 1:
        return [Problem(("backend",), f"auto cannot pick one backend for nodes of different accelerator kinds ({', '.join(distinct)}): hccl and nccl cannot span them; set backend: gloo to train across them")]
    if backend == "nccl":
        for index, kind in kinds:
            if catalog.native_backend(kind) != "nccl":
                return [Problem(("backend",), f"nccl needs GPU nodes (device cuda), but nodes[{index}] is {kind}; use backend: gloo to mix kinds")]
    if backend != "hccl":
        return []
    for index, kind in kinds:
        if not catalog.is_ascend(kind):
            return [Problem(("backend",), f"hccl needs Ascend nodes, but nodes[{index}] is {kind}; use backend: gloo to mix kinds")]
    if len(distinct) > 1:
        return [Problem(("backend",), f"hccl cannot span different Ascend kinds ({', '.join(distinct)}); use backend: gloo to train across them")]
    kind = distinct[0]
    support = catalog.accelerator(kind)["hccl"]
    if support == "none":
        return [Problem(("backend",), f"hccl: {kind} has no HCCL collectives (Huawei's HCCL product table); use backend: gloo")]
    if support == "duo-single":
        if nnodes > 1:
            return [Problem(("backend",), f"hccl on {kind} works within one server only (Atlas 300I Duo), and this job has {nnodes} nodes; use backend: gloo across nodes")]
        ascend = values.get("ascend") if isinstance(values.get("ascend"), dict) else {}
        if not ascend.get("duoCard"):
            return [Problem(("backend",), f"hccl on {kind} needs Atlas 300I Duo cards; set ascend.duoCard: true if the node has them, else use backend: gloo")]
    return []


def _env_problems(values: dict) -> list[Problem]:
    problems = []
    env = values.get("env")
    if not isinstance(env, dict):
        return []
    for key, value in env.items():
        if key in RESERVED_ENV:
            problems.append(Problem(("env", key), "is set by torchdag itself (from nodes[], port, timeouts and backend); remove it and use those keys"))
        elif isinstance(value, str) and len(f"{key}={value}".encode()) > MAX_ARG_BYTES:
            problems.append(Problem(("env", key), f"is {len(value.encode())} bytes; Linux refuses an environment string over {MAX_ARG_BYTES} bytes (MAX_ARG_STRLEN)"))
    return problems


def _argument_problems(values: dict) -> list[Problem]:
    problems = []
    words = [(("script",), values.get("script"))]
    args = values.get("args") if isinstance(values.get("args"), list) else []
    words += [(("args", i), word) for i, word in enumerate(args)]
    launcher = values.get("launcher") if isinstance(values.get("launcher"), dict) else {}
    extra = launcher.get("extraArgs") if isinstance(launcher.get("extraArgs"), list) else []
    words += [(("launcher", "extraArgs", i), word) for i, word in enumerate(extra)]
    for path, word in words:
        if isinstance(word, str) and len(word.encode()) > MAX_ARG_BYTES:
            problems.append(Problem(path, f"is {len(word.encode())} bytes; Linux refuses a single argument over {MAX_ARG_BYTES} bytes (MAX_ARG_STRLEN)"))
    for index, word in enumerate(extra):
        if not isinstance(word, str):
            continue
        flag = word.lstrip("-").split("=", 1)[0].replace("-", "_")
        if word.startswith("-") and flag in PLANNED_LAUNCHER_FLAGS:
            problems.append(Problem(("launcher", "extraArgs", index), f"{_show(word)} sets a launcher flag torchdag plans itself (from nodes[], port, timeouts, launcher.maxRestarts); remove it and use those keys"))
    return problems


def _metadata_problems(values: dict) -> list[Problem]:
    problems = []
    labels = values.get("labels")
    if isinstance(labels, dict):
        for key in labels:
            if isinstance(key, str) and key.startswith(RESERVED_LABEL_PREFIX):
                problems.append(Problem(("labels", key), f"the {RESERVED_LABEL_PREFIX} prefix is torchdag's own (job and node-rank labels); choose another key"))
    annotations = values.get("annotations")
    if isinstance(annotations, dict):
        size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
        if size > MAX_ANNOTATION_BYTES:
            problems.append(Problem(("annotations",), f"hold {size} bytes; Kubernetes allows {MAX_ANNOTATION_BYTES} bytes of annotations per object"))
    return problems


def _volume_problems(values: dict) -> list[Problem]:
    problems = []
    kinds = _kinds(values)
    ascend = values.get("ascend") if isinstance(values.get("ascend"), dict) else {}
    driver_mounts = {}
    if ascend.get("mountDriver") and any(catalog.is_ascend(kind) for _, kind in kinds):
        driver_mounts = {m["mountPath"]: m["name"] for m in catalog.catalog()["ascendMounts"]}
    shm = catalog.catalog()["shmVolume"]["mountPath"]
    seen_volumes: dict[str, int] = {}
    seen_mounts: dict[str, int] = {}
    for index, volume in _dicts(values.get("volumes")):
        name, mount_path = _text(volume.get("name")), _text(volume.get("mountPath"))
        if name is not None:
            if name in BUILTIN_VOLUMES:
                problems.append(Problem(("volumes", index, "name"), f"{name!r} is used by torchdag itself; choose another name"))
            elif name in seen_volumes:
                problems.append(Problem(("volumes", index, "name"), f"{name!r} duplicates volumes[{seen_volumes[name]}].name"))
            seen_volumes.setdefault(name, index)
        if mount_path is None or not mount_path.startswith("/"):
            continue
        mount = clean_path(mount_path)
        if mount == shm and values.get("shmSize"):
            problems.append(Problem(("volumes", index, "mountPath"), f"{mount_path!r} is /dev/shm, which torchdag mounts (shmSize); set shmSize: \"\" to mount your own"))
        elif mount in driver_mounts:
            problems.append(Problem(("volumes", index, "mountPath"), f"{mount_path!r} is where torchdag mounts the Ascend driver ({driver_mounts[mount]}); set ascend.mountDriver: false to mount the driver yourself"))
        elif mount in seen_mounts:
            problems.append(Problem(("volumes", index, "mountPath"), f"{mount_path!r} is also the mountPath of volumes[{seen_mounts[mount]}]"))
        seen_mounts.setdefault(mount, index)
    return problems


def _scheduling_problems(values: dict) -> list[Problem]:
    problems = []
    scheduling = values.get("scheduling") if isinstance(values.get("scheduling"), dict) else {}
    if scheduling.get("gang") == "kueue" and not scheduling.get("queue"):
        problems.append(Problem(("scheduling", "queue"), "must name the Kueue LocalQueue when gang is kueue (pods without a queue are not managed by Kueue)"))
    if values.get("automountServiceAccountToken") is False:
        if not values.get("executorServiceAccountName"):
            problems.append(Problem(("executorServiceAccountName",), "must be set when automountServiceAccountToken is false: Argo's executor still needs a token to report each step"))
        if scheduling.get("gang") not in (None, "none"):
            problems.append(Problem(("automountServiceAccountToken",), "must stay true with a gang scheduler: the gang watch reads the pods through the API"))
    return problems


def semantic_problems(values: dict) -> list[Problem]:
    """Rules across fields. They read only what has the schema's shape, so they run
    beside the schema check and every independent problem is reported at once."""
    return (null_problems(values) + _node_problems(values) + backend_problems(values) + _env_problems(values)
            + _argument_problems(values) + _metadata_problems(values) + _volume_problems(values) + _scheduling_problems(values))


def validate(values: Any) -> list[Problem]:
    """All problems of a merged values document; an empty list means it is valid."""
    if not isinstance(values, dict):
        return schema_problems(values)
    return schema_problems(values) + string_problems(values) + semantic_problems(values)
