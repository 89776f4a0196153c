"""Bring the control plane up (each component only if it is not running) and wait until it serves.

Order: certificates, etcd, kube-apiserver, kube-controller-manager and kube-scheduler, then
PostgreSQL (testbed/cluster/postgres.py: Argo offloads node status there), the namespace,
configmap, database Secret and CRDs Argo needs, then Argo's workflow-controller. Ready means:
every component's health endpoint answers ok, every CRD is Established and the service-account
controller has made the `default` ServiceAccount (pods cannot be created before it exists).
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml
from kubernetes.client.exceptions import ApiException

from ..kube import Kube
from ..node import nodes as realnodes
from . import manifests, postgres, procs, schedulers
from .layout import (
    ARGO_CRDS,
    ARGO_EXECUTOR_RBAC,
    ARGO_NAMESPACE,
    SA_ISSUER,
    SERVICE_CIDR,
    WORKFLOW_NAMESPACE,
    Layout,
    binary,
)
from .procs import ClusterError

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "workflow-controller")
PORTS = ("etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler", "argo-healthz", "postgres")
ARGO_EXECUTOR_IMAGE = "quay.io/argoproj/argoexec:v4.0.5"  # named in pods, never pulled (no container runtime)
# Argo v4.0.5's controller never exits on SIGTERM (util/logging/init.go's handler takes the
# signal and does nothing else), so it gets SIGKILL; no need to wait the others' ten seconds.
GRACE_S = {"workflow-controller": 2.0}
WAIT_S = 240.0  # one component's start on a busy two-core machine takes up to a minute or so


def argv(layout: Layout, component: str, port: dict[str, int], services: str = SERVICE_CIDR) -> list[str]:
    """The component's command line (all addresses 127.0.0.1); `services`: the service range."""
    pki, kubeconfig = layout.pki, str(layout.kubeconfig)
    serving = ["--bind-address=127.0.0.1", f"--cert-dir={layout.root / 'serving' / component}",
               f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"]
    lines = {
        "etcd": [
            "--name=default", f"--data-dir={layout.root / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{port['etcd-client']}",
            f"--advertise-client-urls=http://127.0.0.1:{port['etcd-client']}",
            f"--listen-peer-urls=http://127.0.0.1:{port['etcd-peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{port['etcd-peer']}",
            f"--initial-cluster=default=http://127.0.0.1:{port['etcd-peer']}",
            # A throwaway test cluster: losing the last writes in a power cut costs nothing.
            "--unsafe-no-fsync", "--log-level=warn",
        ],
        "kube-apiserver": [
            f"--etcd-servers=http://127.0.0.1:{port['etcd-client']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port['apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            # What the API server shows a kubelet's API (kubectl logs/exec, Argo's pods/exec):
            # the process kubelet can check it against ca.crt.
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            # The process kubelet serves its API on localhost (its Nodes' InternalDNS address).
            "--kubelet-preferred-address-types=InternalDNS,InternalIP,Hostname,ExternalDNS,ExternalIP",
            # Fills the requestheader part of kube-system/extension-apiserver-authentication, which
            # the scheduler's and controller manager's delegated authentication read (else they log
            # an error every 20 s); no front-proxy client certificate is ever issued.
            f"--requestheader-client-ca-file={pki / 'ca.crt'}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--service-account-issuer={SA_ISSUER}", f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={services}", "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            # Endpoints may not hold a loopback address; in-cluster clients get the real one.
            "--endpoint-reconciler-type=none", "--profiling=false",
        ],
        "kube-controller-manager": [
            f"--kubeconfig={kubeconfig}", *serving, f"--secure-port={port['controller-manager']}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-cluster-ip-range={services}", "--profiling=false",
            # Each controller's client may make 20 requests/s by default: the node lifecycle
            # controller then took minutes to lift the `not-ready` taint of 1,024 new Nodes
            # (a few requests each; the scale bench). Large clusters raise it the same way.
            "--kube-api-qps=200", "--kube-api-burst=400",
            # One process kubelet heartbeats every Node here; on 2 cores a round over 4,096 Nodes
            # took 60-115 s, past the default 50 s, and the Nodes went unreachable.
            "--node-monitor-grace-period=300s",
        ],
        "kube-scheduler": [
            f"--config={layout.root / 'scheduler.yaml'}", *serving, f"--secure-port={port['scheduler']}",
            "--profiling=false",
        ],
        "workflow-controller": [
            f"--kubeconfig={kubeconfig}", f"--namespace={ARGO_NAMESPACE}",
            f"--executor-image={ARGO_EXECUTOR_IMAGE}", "--executor-image-pull-policy=IfNotPresent",
        ],
    }
    return [str(binary(component)), *lines[component]]


def env(component: str, port: dict[str, int]) -> dict[str, str]:
    if component != "workflow-controller":
        return {}
    # One controller, no leader election; its health server on loopback (the Makefile's build
    # reads this variable where Argo's main listens on ":6060").
    return {"LEADER_ELECTION_DISABLE": "true", "TORCHDAG_HEALTHZ_ADDRESS": f"127.0.0.1:{port['argo-healthz']}"}


# The controller-manager's and the scheduler's health ports serve self-signed certificates.
_SELF_SIGNED = ssl._create_unverified_context()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Cluster:
    def __init__(self, layout: Layout, controller_flags: tuple[str, ...] = (),
                 controller_config: dict[str, str] | None = None) -> None:
        """controller_flags: more workflow-controller flags (the scale bench's `--qps`, `--burst`);
        controller_config: more workflow-controller-configmap keys (its `resourceRateLimit`)."""
        self.layout = layout
        self.controller_flags = controller_flags
        self.controller_config = controller_config or {}
        self.port: dict[str, int] = {}
        self.services = SERVICE_CIDR
        self._kube: Kube | None = None

    # -- talking to the servers -------------------------------------------------------------
    @property
    def kube(self) -> Kube:
        """The API server as admin (the kubeconfig `prepare` wrote), through the test bed's client."""
        if self._kube is None:
            self._kube = Kube(str(self.layout.kubeconfig))
        return self._kube

    def api(self, path: str, method: str = "GET", body: dict | None = None,
            content_type: str | None = None, query: dict | None = None) -> dict | None:
        """One request to the API server as admin: the answer; None when the object does not exist (404)."""
        try:
            return self.kube.request(method, path, query=query, body=body, content_type=content_type)
        except ApiException as err:
            if err.status == 404 and method == "GET":
                return None
            try:
                reason = json.loads(err.body or "{}").get("message", "")
            except (TypeError, ValueError):
                reason = ""
            raise ClusterError(f"{method} {path}: {err.status} {reason or err.reason}") from None

    def apply(self, path: str, body: dict) -> dict | None:
        """Server-side apply (as `kubectl apply --server-side --force-conflicts`) of one object."""
        return self.api(path, "PATCH", body, "application/apply-patch+yaml",  # JSON is YAML
                        query={"fieldManager": "torchdag-cluster", "force": "true"})

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        cmd = [str(binary("kubectl")), f"--kubeconfig={self.layout.kubeconfig}", *args]
        done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
        if done.returncode:
            raise ClusterError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    @staticmethod
    def _health(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, context=_SELF_SIGNED, timeout=5) as answer:
                body = answer.read().decode(errors="replace")
                return answer.status == 200 and ("ok" in body or '"health":"true"' in body.replace(" ", ""))
        except (OSError, ValueError):
            return False

    def health_url(self, component: str) -> str:
        return {
            "etcd": f"http://127.0.0.1:{self.port['etcd-client']}/health",
            "kube-controller-manager": f"https://127.0.0.1:{self.port['controller-manager']}/healthz",
            "kube-scheduler": f"https://127.0.0.1:{self.port['scheduler']}/healthz",
            "workflow-controller": f"http://127.0.0.1:{self.port['argo-healthz']}/healthz",
        }[component]

    def healthy(self, component: str) -> bool:
        # The API server through the client (its CA, the admin's certificate); the other
        # components' health ports are plain probes, not the Kubernetes API.
        return self.kube.ready() if component == "kube-apiserver" else self._health(self.health_url(component))

    def wait(self, what: str, check, component: str | None = None, timeout: float = WAIT_S,
             exe: Path | None = None) -> None:
        """Poll `check` until true; fail early when the component's process (`exe`, by default
        the component's binary) has died."""
        deadline = time.monotonic() + timeout
        while not check():
            if component and procs.running(self.layout, component, exe or binary(component)) is None:
                raise ClusterError(f"{component} exited; {self.layout.log(component)} ends:\n"
                                   + _tail(self.layout.log(component)))
            if time.monotonic() > deadline:
                log = f"; {self.layout.log(component)} ends:\n{_tail(self.layout.log(component))}" if component else ""
                raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{log}")
            time.sleep(0.5)

    # -- bringing it up ---------------------------------------------------------------------
    def ensure(self, component: str) -> bool:
        """Start the component unless it runs; True if it was started now."""
        if procs.running(self.layout, component, binary(component)) is not None:
            return False
        flags = self.controller_flags if component == "workflow-controller" else ()
        procs.start(self.layout, component, [*argv(self.layout, component, self.port, self.services), *flags],
                    env(component, self.port))
        return True

    def prepare(self) -> None:
        missing = [name for name in (*COMPONENTS, "clustercerts", "kubectl") if not binary(name).exists()]
        if missing or not ARGO_CRDS.is_dir():
            raise ClusterError(f"missing under .tools: {', '.join(missing) or ARGO_CRDS}; run `make cluster-up`")
        self.layout.root.mkdir(parents=True, exist_ok=True)
        # The service range: the cluster's own (testbed/node/network.py), so that the real
        # nodes' pods reach the kubernetes Service of their cluster, whichever else runs here.
        slot = realnodes.slot_of(self.layout)
        self.services, service_ip = str(slot.services), slot.service_ip
        subprocess.run([str(binary("clustercerts")), "-dir", str(self.layout.pki), "-service-ip", service_ip],
                       check=True)
        self.port = procs.ports(self.layout, PORTS)
        # Atomically, and only when it changes: every `up` comes here while other processes of the
        # cluster (its kubelet, a `register`) read the file, and a half-written one is a broken CA.
        text = manifests.kubeconfig(self.layout, self.port["apiserver"])
        if not self.layout.kubeconfig.exists() or self.layout.kubeconfig.read_text() != text:
            tmp = self.layout.kubeconfig.with_name(f"kubeconfig.{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.chmod(0o600)
            os.replace(tmp, self.layout.kubeconfig)
        self.write_scheduler_config()

    def write_scheduler_config(self) -> None:
        (self.layout.root / "scheduler.yaml").write_text(
            manifests.scheduler_config(self.layout, schedulers.served_by_real(self.layout)))

    def restart_scheduler(self) -> None:
        """kube-scheduler again with its configuration rewritten (a real scheduler took a name)."""
        self.write_scheduler_config()
        procs.stop(self.layout, "kube-scheduler", binary("kube-scheduler"))
        self.ensure("kube-scheduler")
        self.wait("kube-scheduler health", lambda: self.healthy("kube-scheduler"), "kube-scheduler")

    def apply_objects(self, objects: list[dict]) -> None:
        """Server-side apply of these objects (one kubectl call; CRDs waited for until Established)."""
        path = self.layout.root / "apply.yaml"
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=torchdag-cluster", "-f", str(path))
        for crd in objects:
            if crd["kind"] == "CustomResourceDefinition":
                name = crd["metadata"]["name"]
                self.wait(f"CRD {name} Established", lambda name=name: self._established(name))

    def everything_ready(self) -> bool:
        return procs.running(self.layout, "postgres", postgres.POSTGRES) is not None and all(
            procs.running(self.layout, name, binary(name)) is not None and self.healthy(name)
            for name in COMPONENTS) and schedulers.running(self.layout)

    def apply_argo_prerequisites(self) -> None:
        configmap = manifests.argo_configmap(postgres.persistence(self.port["postgres"]))
        configmap["data"].update(self.controller_config)
        objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ARGO_NAMESPACE}}, configmap,
                   manifests.postgres_secret(postgres.ROLE, postgres.password(self.layout), postgres.SECRET),
                   *manifests.gang_crds()]
        extra = self.layout.root / "manifests.yaml"
        extra.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        argo = sorted(ARGO_CRDS.glob("argoproj.io_*.yaml"))
        files = [arg for path in (*argo, extra) for arg in ("-f", str(path))]
        for attempt in range(3):  # server-side apply is idempotent: a loaded API server's timeout is tried again
            try:
                self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=torchdag-cluster", *files)
                break
            except ClusterError as err:
                if attempt == 2 or "Timeout" not in str(err):
                    raise
        rbac = [arg for path in ARGO_EXECUTOR_RBAC for arg in ("-f", str(path))]
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=torchdag-cluster",
                     f"--namespace={WORKFLOW_NAMESPACE}", *rbac)
        names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in argo]
        names += [crd["metadata"]["name"] for crd in objects if crd["kind"] == "CustomResourceDefinition"]
        for name in names:
            self.wait(f"CRD {name} Established", lambda name=name: self._established(name))

    def _established(self, name: str) -> bool:
        crd = self.api(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
        return any(cond["type"] == "Established" and cond["status"] == "True"
                   for cond in (crd.get("status") or {}).get("conditions") or [])  # null just after create

    def up(self, say=print, gang_schedulers: tuple[str, ...] = ()) -> None:
        """Everything not running started; `gang_schedulers` (kueue, coscheduling) added to the
        real schedulers the cluster runs (those it ran already are started again too)."""
        self.layout.root.mkdir(parents=True, exist_ok=True)
        newly = [name for name in gang_schedulers if name not in schedulers.recorded(self.layout)]
        if newly:  # before prepare() writes kube-scheduler's configuration, which leaves their names out
            schedulers.record(self.layout, newly)
        self.prepare()
        wanted = schedulers.recorded(self.layout)
        if self.everything_ready() and not newly:
            say(f"cluster already up: {self.summary()}")
            return
        started = time.monotonic()
        for component in ("etcd", "kube-apiserver"):
            self.ensure(component)
            self.wait(f"{component} health", lambda c=component: self.healthy(c), component)
        self.ensure("kube-controller-manager")
        # A kube-scheduler that ran before a real scheduler was added still serves its name.
        scheduler_restart = not self.ensure("kube-scheduler") and schedulers.COSCHEDULING in newly
        postgres.start(self.layout, self.port["postgres"])  # before the controller, which connects at start
        self.apply_argo_prerequisites()
        self.ensure("workflow-controller")
        for component in COMPONENTS[2:]:
            self.wait(f"{component} health", lambda c=component: self.healthy(c), component)
        for namespace in ("default", ARGO_NAMESPACE):
            self.wait(f"ServiceAccount {namespace}/default",
                      lambda ns=namespace: self.api(f"/api/v1/namespaces/{ns}/serviceaccounts/default") is not None,
                      "kube-controller-manager")
        if wanted:
            schedulers.start(self, wanted, say, restart_scheduler=scheduler_restart)
        say(f"cluster up in {time.monotonic() - started:.0f}s: {self.summary()}")

    def summary(self) -> str:
        return (f"API server https://127.0.0.1:{self.port['apiserver']}, kubeconfig {self.layout.kubeconfig}, "
                f"logs {self.layout.logs}/")

    def kubelet(self, args: list[str], say=print) -> None:
        """The process kubelet (testbed/kubelet) in the background, serving every Node
        `cluster-nodes` registers (label torchdag.io/accelerator), with this interpreter:
        the pods' torchrun and python are its environment's."""
        if not self.layout.kubeconfig.exists():
            raise ClusterError(f"no cluster at {self.layout.root}: run `make cluster-up` first")
        if procs.running(self.layout, "kubelet", Path(sys.executable)):
            say(f"the process kubelet is running already (log: {self.layout.log('kubelet')})")
            return
        argv = [sys.executable, "-m", "testbed.kubelet", "--kubeconfig", str(self.layout.kubeconfig),
                "--selector", "torchdag.io/accelerator", "--state-dir", str(self.layout.root), *args]
        procs.start(self.layout, "kubelet", argv, env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        say(f"process kubelet started: pods of the registered Nodes run here (log: {self.layout.log('kubelet')}, "
            f"container output under {self.layout.root / 'logs'})")

    def down(self, say=print) -> None:
        stopped = []
        # The real nodes first (and the services and addresses they use): they stop their pods.
        stopped += realnodes.RealNodes(self.layout, say).stop_all()
        # The process kubelet too: it stops the pods' processes it started.
        if procs.stop(self.layout, "kubelet", Path(sys.executable), grace=30.0):
            stopped.append("kubelet")
        stopped += schedulers.stop(self.layout)  # before the API server they talk to
        for name in reversed(COMPONENTS):
            how = procs.stop(self.layout, name, binary(name), grace=GRACE_S.get(name, 10.0))
            if how:
                stopped.append(name if how == "terminated" else f"{name} ({how})")
            if name == "workflow-controller":  # its database next, once nothing writes to it
                how = postgres.stop(self.layout)
                if how:
                    stopped.append("postgres" if how == "terminated" else f"postgres ({how})")
        if self.layout.root.exists():
            shutil.rmtree(self.layout.root, ignore_errors=True)
        say(f"stopped {', '.join(stopped) or 'nothing (none was running)'}; removed {self.layout.root}")

