"""Pods as Argo v4.0.5's controller writes them (workflow/controller/workflowpod.go) for a
node of a torchdag Plan, for the process kubelet's tests without a cluster: the node's
container with its parameters filled (torchdag.plan.node_container), Argo's init and wait
containers and its emissary wrapper around the main one. tests/e2e/test_kubelet_differential.py
holds the kubelet against the pods of Argo's real controller."""

from __future__ import annotations

import json

from torchdag.plan import Plan, node_container

EMISSARY = ["/var/run/argo/argoexec", "emissary", "--loglevel", "info", "--log-format", "text", "--"]
SA_VOLUME = {"name": "kube-api-access-x1", "projected": {"sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}
SA_MOUNT = {"name": "kube-api-access-x1", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True}


def argo_pod(plan: Plan, task_name: str, workflow: str = "local-smoke-abcde", node: str = "node-a") -> dict:
    """The pod Argo creates for one node's task (node-<rank>): init (argoexec init), wait, main (emissary)."""
    planned = next(n for n in plan.nodes if n.task == task_name)
    command, args, env = node_container(plan, planned)
    shape = planned.shape
    field_env = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in shape.field_env]
    container = {"image": plan.typed.job.image, "command": command, "args": args,
                 "env": field_env + [{"name": name, "value": value} for name, value in env],
                 "resources": shape.resources, "volumeMounts": [dict(mount) for mount in shape.mounts]}
    if plan.typed.job.working_dir:
        container["workingDir"] = plan.typed.job.working_dir
    tmpl = {"name": shape.name, "container": container}
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
    name = f"{workflow}-{shape.name}-1234"
    return {
        "metadata": {"name": name, "namespace": "default", "uid": "0123456789abcdef-pod",
                     "labels": {"workflows.argoproj.io/workflow": workflow, "torchdag.io/node-rank": str(planned.rank)},
                     "annotations": {"workflows.argoproj.io/node-name": f"{workflow}.{task_name}"}},
        "spec": {"nodeName": node, "hostNetwork": plan.network is None, "restartPolicy": "Never",
                 "serviceAccountName": "default", "initContainers": [init], "containers": [wait, main],
                 "volumes": list(plan.volumes) + [{"name": "var-run-argo", "emptyDir": {}}, SA_VOLUME]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }
