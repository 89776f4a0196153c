"""Where the cluster's binaries, state and credentials are."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from torchdag import REPO_ROOT

BIN = REPO_ROOT / ".tools" / "bin"
# Argo's CRDs as its module ships them: the Makefile's workflow-controller build links the
# module's tree here (the `full` CRDs carry the whole schema: 2-3 MB, server-side apply only).
ARGO_MANIFESTS = REPO_ROOT / ".tools" / "src" / "argo-workflows-v4" / "manifests"
ARGO_CRDS = ARGO_MANIFESTS / "base" / "crds" / "full"
# What Argo's quick-start grants the `default` ServiceAccount so the emissary executor can
# report task results (Role `executor`: workflowtaskresults create/patch, and its binding).
ARGO_EXECUTOR_RBAC = (ARGO_MANIFESTS / "quick-start" / "base" / "executor" / "emissary" / "executor-role.yaml",
                      ARGO_MANIFESTS / "quick-start" / "base" / "executor-default-rolebinding.yaml")
# The namespace that gets ARGO_EXECUTOR_RBAC: where `kubectl create -f` puts a Workflow by default.
WORKFLOW_NAMESPACE = "default"
# The gang schedulers' PodGroup schemas (each project's published openAPIV3Schema).
GANG_CRDS = REPO_ROOT / "tests" / "crds"
DEFAULT_DIR = REPO_ROOT / ".cluster"
# The namespace Argo's controller runs for (its configmap lives there); it watches all namespaces.
ARGO_NAMESPACE = "argo"
# Service IPs are virtual here (no kube-proxy): nothing is routed to them.
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Scheduler names served by the one kube-scheduler (KubeSchedulerConfiguration profiles): the
# default and stand-ins for the gang schedulers, which place pods one by one (no gang semantics).
SCHEDULER_NAMES = ("default-scheduler", "volcano", "scheduler-plugins-scheduler")


def binary(name: str) -> Path:
    return BIN / name


@dataclass(frozen=True)
class Layout:
    """One cluster's state directory."""

    root: Path

    @classmethod
    def of(cls, directory: str | os.PathLike | None) -> Layout:
        chosen = directory or os.environ.get("TORCHDAG_CLUSTER_DIR") or DEFAULT_DIR
        return cls(Path(chosen).resolve())

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    def read_state(self) -> dict:
        return json.loads(self.state.read_text()) if self.state.exists() else {}

    def write_state(self, state: dict) -> None:
        """Atomically: other clusters' processes read it to tell whether a network slot is taken,
        and a half-written file would read as a dead owner."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.state.with_name(f"state.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.state)

    def pid_file(self, component: str) -> Path:
        return self.root / f"{component}.pid"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def cert(self, name: str) -> Path:
        return self.pki / name
