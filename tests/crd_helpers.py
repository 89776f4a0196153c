"""The gang schedulers' PodGroup CRDs, for tests that check what a rendered Workflow creates.

tests/crds/*.json hold each CRD's openAPIV3Schema as its project publishes it (header
"x-source": repository:path@commit; "x-apiVersion" and "x-kind" say which objects it
describes; only `status` is left out). This module turns one into a JSON Schema with what
the API server would enforce for a structural schema:

- x-kubernetes-* keywords are dropped (x-kubernetes-int-or-string: true without an anyOf
  becomes "integer or string"; x-kubernetes-preserve-unknown-fields: true leaves that object open);
- format int32 / int64 become the integer's range (the stricter of it and any minimum/maximum);
- every object schema with `properties` is closed (additionalProperties: false) unless the CRD
  gives it additionalProperties or preserve-unknown-fields: the API server prunes unknown
  fields, so a field the renderer writes but the CRD lacks would silently vanish;
- metadata (only `type: object` in a CRD: the API server checks ObjectMeta itself) gets the
  subset of ObjectMeta rules a manifest can break: name or generateName, the name a DNS-1123
  subdomain, labels and annotations maps of strings.

`podgroup_from_workflow` pulls the PodGroup a rendered Workflow creates out of its `gang`
resource template.
"""

from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parent / "crds"

# What Argo puts in place of {{workflow.name}}: generateName "<name>-" plus five characters.
SAMPLE_RUN_NAME = "job-x7k2p"

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}

# k8s.io/apimachinery/pkg/util/validation: IsDNS1123Subdomain (custom resources' names).
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

_OBJECT_META = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": _DNS1123_SUBDOMAIN.pattern},
        "generateName": {"type": "string"},
        "namespace": {"type": "string", "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "anyOf": [{"required": ["name"]}, {"required": ["generateName"]}],
}


def to_json_schema(node: Any) -> Any:
    """An openAPIV3Schema (structural, as in a CRD) as a strict JSON Schema; see the module doc."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = to_json_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = to_json_schema(value)
        else:
            out[key] = copy.deepcopy(value)
    if int_or_string and "anyOf" not in out and "type" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("type") == "integer" and out.get("format") in _INT_RANGES:
        low, high = _INT_RANGES[out.pop("format")]
        out["minimum"] = max(out.get("minimum", low), low)
        out["maximum"] = min(out.get("maximum", high), high)
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


@lru_cache(maxsize=None)
def _schemas() -> dict[tuple[str, str], dict]:
    found: dict[tuple[str, str], dict] = {}
    for path in sorted(CRDS.glob("*.json")):
        stored = json.loads(path.read_text())
        key = (stored["x-apiVersion"], stored["x-kind"])
        body = {k: v for k, v in stored.items() if not k.startswith("x-")}
        schema = to_json_schema(body)
        schema["properties"]["metadata"] = _OBJECT_META
        schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata"})
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)
        found[key] = schema
    return found


def crd_schema(api_version: str, kind: str) -> dict | None:
    """The strict JSON Schema for objects of that apiVersion and kind, or None."""
    return _schemas().get((api_version, kind))


def validate_crd_object(obj: dict) -> list[str]:
    """Every way `obj` breaks its CRD's schema, one message each ("path: problem"); [] if none."""
    if not isinstance(obj, dict):
        return [f"<root>: not an object: {obj!r}"]
    schema = crd_schema(obj.get("apiVersion"), obj.get("kind"))
    if schema is None:
        known = ", ".join(f"{a} {k}" for a, k in sorted(_schemas()))
        return [f"<root>: no CRD schema for apiVersion {obj.get('apiVersion')!r} kind {obj.get('kind')!r} "
                f"(known: {known})"]
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(obj), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def gang_template(doc: dict) -> dict | None:
    """The Workflow's template named "gang" (the one that creates the PodGroup), or None."""
    for template in doc.get("spec", {}).get("templates", []):
        if template.get("name") == "gang":
            return template
    return None


def podgroup_from_workflow(doc: dict, run_name: str = SAMPLE_RUN_NAME) -> dict | None:
    """The PodGroup the rendered Workflow `doc` creates, as the API server would receive it for
    a run named `run_name`; None when it creates none (gang: none or kueue).

    Raises ValueError when a `gang` template exists but is not the resource template that
    applies one object, owned by the Workflow (action apply, setOwnerReference true).
    """
    template = gang_template(doc)
    if template is None:
        return None
    resource = template.get("resource")
    if not isinstance(resource, dict):
        raise ValueError("template gang is not a resource template")
    if resource.get("action") != "apply" or resource.get("setOwnerReference") is not True:
        raise ValueError(
            f"template gang: action {resource.get('action')!r}, setOwnerReference {resource.get('setOwnerReference')!r}"
            " (expected apply, true)")
    manifest = resource.get("manifest")
    if not isinstance(manifest, str):
        raise ValueError("template gang has no manifest string")
    documents = [d for d in yaml.safe_load_all(manifest.replace("{{workflow.name}}", run_name)) if d is not None]
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise ValueError(f"template gang: the manifest holds {len(documents)} documents, expected one object")
    return documents[0]
