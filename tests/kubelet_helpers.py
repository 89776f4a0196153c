"""Pods as Argo v4.0.5's controller writes them (workflow/controller/workflowpod.go), from a
rendered Workflow's DAG task, for the process kubelet's tests without a cluster."""

from __future__ import annotations

import copy
import json

from testbed.localrun.expand import argo_substitute
from testbed.localrun.prepare import Options, workflow_scope

EMISSARY = ["/var/run/argo/argoexec", "emissary", "--loglevel", "info", "--log-format", "text", "--"]
SA_VOLUME = {"name": "kube-api-access-x1", "projected": {"sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}
SA_MOUNT = {"name": "kube-api-access-x1", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True}


def _substitute(value, scope):
    if isinstance(value, str):
        return argo_substitute(value, scope)
    if isinstance(value, list):
        return [_substitute(v, scope) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, scope) for k, v in value.items()}
    return value


def argo_pod(doc: dict, task_name: str, workflow: str = "local-smoke-abcde", node: str = "node-a") -> dict:
    """The pod Argo creates for one DAG task: init (argoexec init), wait, main (emissary)."""
    spec = doc["spec"]
    templates = {t["name"]: t for t in spec["templates"]}
    entry = templates[spec["entrypoint"]]
    task = next(t for t in entry["dag"]["tasks"] if t["name"] == task_name)
    template = templates[task["template"]]
    scope = workflow_scope(doc, Options(), workflow)
    params = {p["name"]: str(p["value"]) for p in (template.get("inputs") or {}).get("parameters") or []
              if "value" in p}
    for p in (task.get("arguments") or {}).get("parameters") or []:
        params[p["name"]] = argo_substitute(str(p["value"]), scope)
    scope.update({f"inputs.parameters.{k}": v for k, v in params.items()})
    tmpl = _substitute(copy.deepcopy(template), scope)
    container = tmpl["container"]
    argo_env = [{"name": "ARGO_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "ARGO_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "ARGO_WORKFLOW_NAME", "value": workflow},
                {"name": "ARGO_WORKFLOW_UID", "value": "wf-uid-1"},
                {"name": "ARGO_CONTAINER_NAME", "value": "main"},
                {"name": "ARGO_TEMPLATE", "value": json.dumps(tmpl)},
                {"name": "ARGO_NODE_ID", "value": f"{workflow}-1234"},
                {"name": "ARGO_DEADLINE", "value": "2026-12-03T00:00:00Z"}]
    argo_mount = {"name": "var-run-argo", "mountPath": "/var/run/argo"}
    main = dict(container, name="main", command=EMISSARY + list(container.get("command") or []),
                env=argo_env + list(container.get("env") or []),
                volumeMounts=list(container.get("volumeMounts") or []) + [argo_mount, SA_MOUNT],
                terminationMessagePath="/dev/termination-log", terminationMessagePolicy="File")
    executor = {"image": "quay.io/argoproj/argoexec:v4.0.5", "env": argo_env,
                "volumeMounts": [argo_mount, SA_MOUNT]}
    init = dict(executor, name="init", command=["argoexec", "init", "--loglevel", "info", "--log-format", "text"])
    wait = dict(executor, name="wait", command=["argoexec", "wait", "--loglevel", "info", "--log-format", "text"])
    name = f"{workflow}-{template['name']}-1234"
    return {
        "metadata": {"name": name, "namespace": "default", "uid": "0123456789abcdef-pod",
                     "labels": {"workflows.argoproj.io/workflow": workflow,
                                **((tmpl.get("metadata") or {}).get("labels") or {})},
                     "annotations": {"workflows.argoproj.io/node-name": f"{workflow}.{task_name}"}},
        "spec": {"nodeName": node, "hostNetwork": bool(spec.get("hostNetwork")), "restartPolicy": "Never",
                 "serviceAccountName": "default", "initContainers": [init], "containers": [wait, main],
                 "volumes": list(spec.get("volumes") or []) + [{"name": "var-run-argo", "emptyDir": {}}, SA_VOLUME]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }
