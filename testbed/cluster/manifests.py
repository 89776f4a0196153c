"""What the cluster's processes read: the kubeconfig, the scheduler's configuration, Argo's
configmap and the gang schedulers' PodGroup CRDs."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

from .layout import ARGO_NAMESPACE, GANG_CRDS, SCHEDULER_NAMES, Layout


def _data(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(layout: Layout, apiserver_port: int) -> str:
    """An admin kubeconfig (group system:masters) with the credentials inline, so it can be
    copied anywhere; every component of the control plane uses it too."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "torchdag-local", "cluster": {
            "server": f"https://127.0.0.1:{apiserver_port}",
            "certificate-authority-data": _data(layout.cert("ca.crt")),
        }}],
        "users": [{"name": "torchdag-admin", "user": {
            "client-certificate-data": _data(layout.cert("admin.crt")),
            "client-key-data": _data(layout.cert("admin.key")),
        }}],
        "contexts": [{"name": "torchdag-local", "context": {"cluster": "torchdag-local", "user": "torchdag-admin",
                                                            "namespace": "default"}}],
        "current-context": "torchdag-local",
    }
    return yaml.safe_dump(config, sort_keys=False)


def scheduler_config(layout: Layout, served_elsewhere: set[str] = frozenset()) -> str:
    """One kube-scheduler serving every scheduler name a rendered Workflow may ask for, but
    those a real scheduler of the cluster serves (testbed/cluster/schedulers.py)."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": name} for name in SCHEDULER_NAMES if name not in served_elsewhere],
    }
    return yaml.safe_dump(config, sort_keys=False)


def argo_configmap(persistence: str) -> dict:
    """workflow-controller-configmap: metrics and telemetry servers off (they would listen on
    every interface); node status offloaded to the cluster's PostgreSQL when a Workflow passes
    1 MiB (`persistence`, testbed/cluster/postgres.py); everything else at Argo's defaults."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "workflow-controller-configmap", "namespace": ARGO_NAMESPACE},
        "data": {
            "metricsConfig": "enabled: false\n",
            "telemetryConfig": "enabled: false\n",
            "persistence": persistence,
        },
    }


def postgres_secret(username: str, password: str, name: str) -> dict:
    """The credentials Argo's persistence config names (userNameSecret, passwordSecret)."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ARGO_NAMESPACE},
            "stringData": {"username": username, "password": password}}


def gang_crds() -> list[dict]:
    """CustomResourceDefinitions for the PodGroups of tests/crds/*.json (each project's own
    openAPIV3Schema; `status`, which the files leave out, is kept as the API server gets it)."""
    crds = []
    for path in sorted(GANG_CRDS.glob("*.json")):
        stored = json.loads(path.read_text())
        plural, group = stored["x-crd"].split(".", 1)
        version = stored["x-apiVersion"].split("/", 1)[1]
        schema = {key: value for key, value in stored.items() if not key.startswith("x-")}
        schema["properties"] = {**schema["properties"],
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
        kind = stored["x-kind"]
        crds.append({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": stored["x-crd"]},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": kind + "List"},
                "versions": [{"name": version, "served": True, "storage": True,
                              "schema": {"openAPIV3Schema": schema}, "subresources": {"status": {}}}],
            },
        })
    return crds
