"""Validate phase: the JSON Schema first, then the rules a schema cannot express.

Each problem is one line naming the field path and what is allowed. Rules the schema can
state live there (`x-rule`, worded by `x-message`), so both renderers enforce them as they
are; each rule coded here is named by its message id in catalog.yaml (`messages`), and
chart/templates/_validate.tpl codes the same rule under the same id.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from . import catalog
from .catalog import problem
from .errors import Problem
from .plan import is_pod
from .schema_check import schema_problems, schema_report, show
from .values import load_schema
from .yamlout import quantity
from .yamlread import full_width_characters, full_width_fields

ARGO_OPEN = "{{"


# Characters no rendered string may hold: YAML cannot carry DEL, the C1 controls (NEL
# would even fold the line), U+FFFE/U+FFFF or lone surrogates, and Go's JSON encoder (the
# chart's quoting) would print them raw where Python cannot read them back.
_UNCARRIABLE = re.compile("[\u007f-\u009f\ufffe\uffff\ud800-\udfff]")


def _string_problem(text: str, path: tuple, is_key: bool = False) -> Problem | None:
    """What is wrong with one string (a value, or a mapping key), or None."""
    subject = "key " if is_key else ""
    if ARGO_OPEN in text:
        return problem("string-argo-braces", path, shown="key" if is_key else show(text))
    if "\x00" in text:
        return problem("string-nul", path, subject=subject)
    if _UNCARRIABLE.search(text):
        return problem("string-control", path, subject=subject)
    wide = next((char for char in text if char in full_width_characters()), None) if is_key else None
    if wide:  # `{port： 1}` or `"nic：": x`: the load phase names most of them with their line
        return problem("key-full-width", path, **full_width_fields(wide))
    return None


def string_problems(values: Any) -> list[Problem]:
    """Strings no Workflow can carry: `{{` (Argo substitutes it everywhere and offers no
    escape, argo#8253), NUL (execve and environ end a string there) and characters YAML
    cannot hold. Keys are checked too."""
    # All the strings at once first (joined by a newline, which makes none of the three):
    # naming each problem's field costs a walk with paths, in a file that has any.
    text = "\n".join(_strings(values))
    if ARGO_OPEN not in text and "\x00" not in text and not _UNCARRIABLE.search(text) \
            and not any(char in text for char in full_width_characters()):
        return []
    return _string_problems_at(values, ())


def _strings(values: Any) -> list[str]:
    found, pending = [], [values]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            found.extend(key for key in item if isinstance(key, str))
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


def _string_problems_at(values: Any, path: tuple) -> list[Problem]:
    found = []
    if isinstance(values, str):
        found.append(_string_problem(values, path))
    elif isinstance(values, dict):
        for key, item in values.items():
            found.append(_string_problem(key, path + (key,), is_key=True) if isinstance(key, str) else None)
            found.extend(_string_problems_at(item, path + (key,)))
    elif isinstance(values, list):
        for index, item in enumerate(values):
            found.extend(_string_problems_at(item, path + (index,)))
    return [each for each in found if each]


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


def _section(values: dict, key: str) -> dict:
    return values.get(key) if isinstance(values.get(key), dict) else {}


def _node_problems(values: dict) -> list[Problem]:
    problems = []
    first_by_name: dict[str, int] = {}
    first_by_address: dict[str, int] = {}
    master_index = None
    index_by_name: dict[str, int] = {}  # each name's first node, looked up once per node (jobs of 4,096)
    for index, node in _dicts(values.get("nodes")):
        index_by_name.setdefault(_text(node.get("name")), index)
    for index, node in _dicts(values.get("nodes")):
        name = _text(node.get("name"))
        if name is None:
            continue
        address = _text(node.get("address")) or name
        # the field that holds the address: a node without an address key is reached by its name
        address_field = ("nodes", index, "address" if "address" in node else "name")
        other = index_by_name.get(address)
        if name in first_by_name:
            problems.append(problem("node-duplicate-name", ("nodes", index, "name"), name=name,
                                    first=first_by_name[name]))
        elif address in first_by_address:
            problems.append(problem("node-duplicate-address", address_field, address=address,
                                    first=first_by_address[address]))
        elif other is not None and other != index and "address" in node:
            problems.append(problem("node-address-other-name", address_field, address=address, other=other))
        first_by_name.setdefault(name, index)
        first_by_address.setdefault(address, index)
        if node.get("master") is True:
            if master_index is None:
                master_index = index
            else:
                problems.append(problem("node-two-masters", ("nodes", index, "master"), first=master_index))
    return problems


def _restart_problems(values: dict) -> list[Problem]:
    """Rule restarts-past-deadline: Argo waits backoffSeconds before restart 1, twice that
    before restart 2 and so on, and retries nothing past the Workflow's deadline: the waits
    of every restart must fit in it (the attempts themselves take time too)."""
    policy, deadline = _section(values, "failurePolicy"), _section(values, "timeouts").get("workflowDeadline")
    restarts, step = policy.get("maxRestarts"), policy.get("backoffSeconds")
    if not all(isinstance(number, int) and not isinstance(number, bool) for number in (restarts, step, deadline)):
        return []  # no deadline, or what the schema refuses
    waited = fit = 0
    for _ in range(restarts):
        if waited >= deadline:
            break
        waited, step = waited + step, step * catalog.catalog()["restartStrategy"]["factor"]
        fit += waited < deadline
    if fit == restarts:
        return []
    return [problem("restarts-past-deadline", ("failurePolicy", "maxRestarts"), restarts=restarts, fit=fit,
                    next=fit + 1, waited=waited, deadline=deadline, backoff=policy["backoffSeconds"])]


def _elastic_problems(values: dict) -> list[Problem]:
    """Rules elastic-needs-node-recovery and elastic-min-nodes: elastic.minNodes names how
    few machines the job may train on, which only node recovery can do, and at most every node."""
    minimum = _section(values, "elastic").get("minNodes")
    if not isinstance(minimum, int) or isinstance(minimum, bool) or not minimum:
        return []
    policy, nodes = _section(values, "failurePolicy"), values.get("nodes")
    problems = []
    if not policy.get("maxRestarts") or policy.get("recovery", "node") != "node":
        problems.append(problem("elastic-needs-node-recovery", ("elastic", "minNodes")))
    if isinstance(nodes, list) and minimum > len(nodes):
        problems.append(problem("elastic-min-nodes", ("elastic", "minNodes"), min=minimum, count=len(nodes)))
    return problems


def _kinds(values: dict) -> list[tuple[int, str]]:
    known = set(catalog.accelerator_kinds())
    out = []
    for index, node in _dicts(values.get("nodes")):
        kind = catalog.node_accelerator(node)
        if isinstance(kind, str) and kind in known:
            out.append((index, kind))
    return out


def backend_problems(values: dict) -> list[Problem]:
    """Rules backend-devices, backend-mixed-kinds and backend-hccl-card: which nodes the
    backend can span (catalogue `backends`), card by card (`hcclLimits`)."""
    kinds, backend = _kinds(values), values.get("backend", "auto")
    rules = catalog.catalog()["backends"].get(backend) if isinstance(backend, str) else None
    if not kinds or rules is None:
        return []
    distinct = list(dict.fromkeys(kind for _, kind in kinds))
    fields = {"backend": backend, "kinds": ", ".join(distinct), "nnodes": len(values["nodes"])}
    other = next(((index, kind) for index,
                  kind in kinds if catalog.accelerator(kind)["device"] not in rules.get("devices", [])), None)
    if rules.get("devices") and other:
        text = rules["otherDevice"] if len(distinct) > 1 else rules["otherDeviceAll"]
        message = catalog.fill(text, {**fields, "index": other[0], "kind": other[1]})
    elif rules.get("mixedKinds") and len(distinct) > 1:
        message = catalog.fill(rules["mixedKinds"], fields)
    elif rules.get("cardLimits"):
        limit = catalog.hccl_limit(distinct[0], fields["nnodes"], bool(_section(values, "ascend").get("duoCard")))
        message = catalog.fill(limit["refuse"], {**fields, "kind": distinct[0]}) if limit else None
    else:
        message = None
    return [Problem(("backend",), message)] if message else []


def _size_problems(values: dict) -> list[Problem]:
    """Rules env-too-long, arg-too-long and annotations-too-large: limits in bytes
    (catalogue `limits`), which no schema keyword counts."""
    limits = catalog.catalog()["limits"]
    problems = []
    env = values.get("env") if isinstance(values.get("env"), dict) else {}
    for key, value in env.items():
        if isinstance(value, str) and len(f"{key}={value}".encode()) > limits["argBytes"]:
            problems.append(problem("env-too-long", ("env", key), bytes=len(value.encode()), limit=limits["argBytes"]))
    words = [(("script",), values.get("script"))]
    args = values.get("args") if isinstance(values.get("args"), list) else []
    words += [(("args", i), word) for i, word in enumerate(args)]
    extra = _section(values, "launcher").get("extraArgs")
    words += [(("launcher", "extraArgs", i), word) for i, word in enumerate(extra if isinstance(extra, list) else [])]
    for path, word in words:
        if isinstance(word, str) and len(word.encode()) > limits["argBytes"]:
            problems.append(problem("arg-too-long", path, bytes=len(word.encode()), limit=limits["argBytes"]))
    annotations = values.get("annotations")
    if isinstance(annotations, dict):
        size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
        if size > limits["annotationBytes"]:
            problems.append(problem("annotations-too-large", ("annotations",), bytes=size,
                                    limit=limits["annotationBytes"]))
    return problems


def _volume_problems(values: dict) -> list[Problem]:
    """Rules volume-duplicate-name, volume-on-shm, volume-on-driver, volume-duplicate-mount:
    each mount path (in canonical form) is taken once, by torchdag's own volumes first."""
    problems = []
    taken: dict[str, tuple[str, dict]] = {}  # mount path -> (the rule a second claim breaks, its fields)
    if values.get("shmSize"):
        taken[catalog.catalog()["shmVolume"]["mountPath"]] = ("volume-on-shm", {})
    if _section(values, "ascend").get("mountDriver") and any(catalog.is_ascend(kind) for _, kind in _kinds(values)):
        taken.update({m["mountPath"]: ("volume-on-driver",
                                       {"mount": m["name"]}) for m in catalog.catalog()["ascendMounts"]})
    names: dict[str, int] = {}
    for index, volume in _dicts(values.get("volumes")):
        name, mount_path = _text(volume.get("name")), _text(volume.get("mountPath"))
        if name in names:
            problems.append(problem("volume-duplicate-name", ("volumes", index, "name"), shown=show(name),
                                    first=names[name]))
        elif name is not None:
            names[name] = index
        if mount_path is None or not mount_path.startswith("/"):
            continue
        mount = clean_path(mount_path)
        argo = next((path for path in catalog.catalog()["argoMounts"] if (mount + "/").startswith(path + "/")), None)
        if argo:
            problems.append(problem("volume-argo-mount", ("volumes", index, "mountPath"), shown=show(mount_path),
                                    argo=argo))
        elif mount in taken:
            rule, fields = taken[mount]
            problems.append(problem(rule, ("volumes", index, "mountPath"), shown=show(mount_path), **fields))
        else:
            taken[mount] = ("volume-duplicate-mount", {"first": index})
    return problems


def _byte_floor_problems(values: dict) -> list[Problem]:
    """Rule bytes-below-floor: a quantity of bytes (shmSize, memory) is a count of bytes when it
    has no suffix, so `shmSize: 16` is 16 bytes; below the catalogue's floor (1Mi) no training
    container runs, and the number was almost surely meant in Gi."""
    floor = catalog.catalog()["limits"]["byteFloor"]
    fields = [(("shmSize",), values.get("shmSize"))]
    owners = [(("resources",), values.get("resources"))]
    owners += [(("nodes", index, "resources"), node["resources"]) for index, node in _dicts(values.get("nodes"))
               if "resources" in node]
    for path, resources in owners:
        resources = resources if isinstance(resources, dict) else {}
        for part in ("requests", "limits"):
            if "memory" in _section(resources, part):
                fields.append((path + (part, "memory"), resources[part]["memory"]))
    problems = []
    for path, value in fields:
        amount = quantity_value(value)
        if amount is not None and 0 < amount < floor:
            problems.append(problem("bytes-below-floor", path, shown=quantity(value)))
    return problems


def _image_problems(values: dict) -> list[Problem]:
    """Rule image-name-too-long: the kubelet parses the image as distribution/reference's
    ParseNormalizedNamed does: the name (registry and repository, without tag and digest), with
    docker.io/ (and library/) added where the image names no registry, is at most 255 characters."""
    image = values.get("image")
    if not isinstance(image, str):
        return []
    name = re.sub(r"(:[^/:@]*)?(@[\s\S]*)?\Z", "", image, count=1)
    first, slash, rest = name.partition("/")
    registry = slash and (any(c in first for c in ".:") or first == "localhost" or first.lower() != first)
    normalized = name if registry else "docker.io/" + ("" if slash else "library/") + name
    limit = catalog.catalog()["limits"]["imageName"]
    if len(normalized) <= limit:
        return []
    return [problem("image-name-too-long", ("image",), length=len(normalized), limit=limit,
                    normalized=" as docker.io/..." if not registry else "")]


@functools.lru_cache(maxsize=None)
def _quantity_pattern() -> re.Pattern:
    return re.compile(load_schema()["$defs"]["quantity"]["anyOf"][0]["pattern"].rstrip("$") + r"\Z")


def quantity_value(value: Any) -> float | None:
    """A quantity as a number, to compare a request with its limit (catalogue `quantity`), or
    None where it has not the schema's shape. As the chart computes it: the number's float
    times its suffix's factor, or divided by it (so 1100m equals 1.1); a number beyond float64
    counts 0, as Helm's float64 cast makes it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str) or not _quantity_pattern().match(value):
        return None
    suffix = re.search(r"(?:[KMGTPE]i|[numkMGTPE])\Z", value)
    suffix = suffix[0] if suffix else ""
    number = float(value[:len(value) - len(suffix)])
    number = number if math.isfinite(number) else 0.0
    scale = catalog.catalog()["quantity"]
    return number / scale["divide"][suffix] if suffix in scale["divide"] else number * scale["multiply"].get(suffix, 1)


def _resource_problems(values: dict) -> list[Problem]:
    """Rule resources-request-over-limit: Kubernetes refuses a container whose request is
    above its limit; top-level resources and each node's own."""
    owners = [(("resources",), values.get("resources"))]
    owners += [(("nodes", index, "resources"), node["resources"]) for index, node in _dicts(values.get("nodes"))
               if "resources" in node]
    problems = []
    for path, resources in owners:
        resources = resources if isinstance(resources, dict) else {}
        requests, limits = _section(resources, "requests"), _section(resources, "limits")
        for name, request in requests.items():
            wanted, allowed = quantity_value(request), quantity_value(limits.get(name))
            if wanted is not None and allowed is not None and wanted > allowed:
                problems.append(problem("resources-request-over-limit", path + ("requests", name),
                                        request=quantity(request), limit=quantity(limits[name])))
    return problems


def _name_problems(values: dict) -> list[Problem]:
    """Rules name-run-length and network-service-name: what render.py's run names need of
    `name` and the chart's do not (it names the Workflow after the release and checks that)."""
    name, limit = values.get("name"), catalog.catalog()["runNameMaxLength"]
    if isinstance(name, str) and limit < len(name) <= 63:  # longer: the schema's maxLength says it
        return [problem("name-run-length", ("name",), shown=show(name), length=len(name), limit=limit)]
    return _service_name_problems(values)


def _service_name_problems(values: dict) -> list[Problem]:
    """Rule network-service-name (render.py only): on the pod network each run's headless
    Service is named after the Workflow, `<name>-` plus Argo's suffix, and a Service name is a
    DNS-1035 label. The chart names the Workflow after the release and checks that instead
    (release-name-service), so `name` is not held to it there."""
    name = values.get("name")
    network = {"network": _section(values, "network"), "hostNetwork": values.get("hostNetwork")}
    if isinstance(name, str) and name[:1].isdigit() and is_pod(network):
        return [problem("network-service-name", ("name",), shown=show(name))]
    return []


def semantic_problems(values: dict) -> list[Problem]:
    """Rules across fields. They read only what has the schema's shape, so they run
    beside the schema check and every independent problem is reported at once."""
    return (_node_problems(values) + backend_problems(values) + _size_problems(values) + _volume_problems(values)
            + _resource_problems(values) + _name_problems(values) + _byte_floor_problems(values)
            + _image_problems(values))


def validate(values: Any) -> list[Problem]:
    """All problems of a merged values document; an empty list means it is valid."""
    if not isinstance(values, dict):
        return schema_problems(values)
    plain, conditional, unknown_key = schema_report(values)
    # A field already refused on its own (a quoted number, a value not in its enum) is not also
    # judged by a rule across fields: that rule would read it as something it is not.
    refused = {problem.path for problem in plain}
    rules = semantic_problems(values) + _restart_problems(values) + _elastic_problems(values)
    across = [problem for problem in conditional + rules
              if problem.path not in refused]
    # A misspelled key leaves its default in place of what was meant: rules across fields would
    # judge that default (a misspelled accelerator reads as cpu, then the backend is wrong), so
    # they wait until the key is fixed; each field's own problems are all reported now.
    return plain + string_problems(values) + ([] if unknown_key else across)
