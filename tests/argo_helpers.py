"""What Argo and Kubernetes do to a rendered Workflow, for tests that check the result.

- strict Argo validation with hera's models (unknown fields forbidden);
- the Pod each DAG task becomes (parameters substituted), validated against Kubernetes'
  strict schemas;
- the process each container starts, after Kubernetes' $(VAR) expansion.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import kubernetes_validate
import yaml

from testbed.runtime import kube_command, kube_container_env

KUBERNETES_VERSION = "1.35.0"

_hera_workflow = None


def _strict_hera_models():
    global _hera_workflow
    if _hera_workflow is None:
        import hera.shared._pydantic as hera_pydantic

        # Must be set before hera.workflows.models is imported, or unknown keys pass silently.
        hera_pydantic.APIBaseModel.model_config["extra"] = "forbid"
        from hera.workflows.models import Workflow, WorkflowTemplate

        _hera_workflow = {"Workflow": Workflow, "WorkflowTemplate": WorkflowTemplate}
    return _hera_workflow


def validate_argo(doc: dict) -> None:
    """Raises pydantic.ValidationError for anything Argo's API would not take."""
    _strict_hera_models()[doc["kind"]].model_validate(doc, strict=True)


def substitute(value: Any, parameters: dict[str, str], workflow_name: str = "wf-test") -> Any:
    """Argo's `{{inputs.parameters.X}}` / `{{workflow.name}}` / `{{workflow.namespace}}` substitution over a
    whole template."""
    text = json.dumps(value)

    def replace(match: re.Match) -> str:
        tag = match.group(1)
        if tag.startswith("inputs.parameters."):
            found = parameters[tag[len("inputs.parameters."):]]
        elif tag == "workflow.name":
            found = workflow_name
        elif tag == "workflow.namespace":
            found = "wf-namespace"
        else:
            raise KeyError(f"unresolved Argo tag {{{{{tag}}}}}")
        return json.dumps(found)[1:-1]  # Argo inserts the JSON-escaped value

    return json.loads(re.sub(r"\{\{([^{}]+)\}\}", replace, text))


def _through_retry_wrapper(templates: dict, name: str, parameters: dict) -> tuple[dict, str]:
    """Under failurePolicy.recovery node a task calls its shape's retry wrapper, whose `train`
    step calls the container template: that step's parameters (first attempt: retries 0)."""
    steps = templates[name].get("steps")
    if not steps:
        return parameters, name
    train = next(step for group in steps for step in group if step["name"] == "train")
    given = {**{f"{{{{inputs.parameters.{key}}}}}": value for key, value in parameters.items()}, "{{retries}}": "0",
             # the one expression it holds: whether this node (rank 0) hosts the rendezvous store
             "{{=inputs.parameters['node-rank'] == '0' ? 'true' : 'false'}}": str(parameters.get("node-rank") == "0")
             .lower()}
    return {p["name"]: given.get(p["value"], p["value"]) for p in train["arguments"]["parameters"]}, train["template"]


def task_pods(doc: dict) -> dict[str, dict]:
    """Each DAG task as the Pod Argo would create for it (the main container only)."""
    spec = doc["spec"]
    templates = {t["name"]: t for t in spec["templates"]}
    dag = templates[spec["entrypoint"]]["dag"]
    pods = {}
    for task in dag["tasks"]:
        if "container" not in templates[_through_retry_wrapper(templates, task["template"], {})[1]]:
            continue  # the gang's PodGroup (a resource template) is no training pod
        parameters = {p["name"]: p["value"] for p in (task.get("arguments") or {}).get("parameters") or []}
        parameters, name = _through_retry_wrapper(templates, task["template"], parameters)
        template = substitute(templates[name], parameters)
        container = dict(template["container"], name="main")
        pod_spec: dict = {"containers": [container], "restartPolicy": "Never"}
        for key in ("affinity", "nodeSelector", "tolerations"):
            if key in template:
                pod_spec[key] = template[key]
        for key in ("hostNetwork", "dnsPolicy", "securityContext", "imagePullSecrets", "serviceAccountName",
                    "tolerations", "nodeSelector", "volumes"):
            if key in spec and key not in pod_spec:
                pod_spec[key] = copy.deepcopy(spec[key])
        if "podPriorityClassName" in spec:
            pod_spec["priorityClassName"] = spec["podPriorityClassName"]
        if "schedulerName" in template:
            pod_spec["schedulerName"] = template["schedulerName"]
        if "podSpecPatch" in template:  # the pod network's hostname and subdomain (no list fields in it)
            pod_spec.update(yaml.safe_load(template["podSpecPatch"]))
        metadata = {"name": f"wf-test-{task['name']}", "labels": {**spec.get("podMetadata", {}).get("labels", {}),
                                                                  **template.get("metadata", {}).get("labels", {})}}
        annotations = {**spec.get("podMetadata", {}).get("annotations", {}),
                       **template.get("metadata", {}).get("annotations", {})}
        if annotations:
            metadata["annotations"] = annotations
        pods[task["name"]] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
    return pods


def validate_kubernetes(pod: dict) -> None:
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def container_process(container: dict) -> tuple[list[str], dict[str, str]]:
    """argv and environment of a container after Kubernetes' expansion (the test bed's port of
    kubelet's expand.go, testbed.runtime, held against the Go code in tests/validators/test_expand_oracle.py)."""
    # Env from the downward API reads as "<fieldRef:PATH>": what the kubelet fills in is not known here.
    env = dict(kube_container_env((item["name"], item["value"] if "value" in item else
                                   f"<fieldRef:{item['valueFrom']['fieldRef']['fieldPath']}>")
                                  for item in container.get("env", [])))
    argv = kube_command(container.get("command", []) + container.get("args", []), env)
    return argv, env
