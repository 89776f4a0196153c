"""The real gang schedulers in the local cluster (`make cluster-schedulers`, `python -m
testbed.cluster schedulers kueue coscheduling`; docs/gang.md, docs/e2e.md).

- **kueue**: Kueue's controller manager (sigs.k8s.io/kueue, tools/kueue), its CRDs and webhook
  configurations from the module's own `config/components`, the plain-pod integration switched on
  as docs/gang.md tells admins to, a ResourceFlavor and a ClusterQueue. The API server calls its
  webhooks on loopback: each `service:` reference of the module's configurations becomes
  `url: https://127.0.0.1:PORT/<path>` with the cluster's CA (clustercerts' `webhook` leaf is the
  server's certificate), as there is no Service network to route to.
- **coscheduling**: scheduler-plugins' scheduler as a second scheduler named
  `scheduler-plugins-scheduler` with the Coscheduling plugin (its chart's name and its
  `manifests/coscheduling` configuration), and its controller, which moves the PodGroups' phases;
  the `scheduling.x-k8s.io` CRDs from the module. kube-scheduler stops serving that name.

Volcano's module (volcano.sh/volcano) is not served by the module proxy (every release tried was
refused), so `volcano` stays a stand-in profile of kube-scheduler (docs/gang.md).

Which schedulers run is kept in state.json ("schedulers"), so `up` after a reboot starts them
again and kube-scheduler's configuration leaves out the names they serve.
"""

from __future__ import annotations

import base64
import ctypes
import re
from pathlib import Path

import yaml

from torchdag import REPO_ROOT

from . import procs
from .layout import BIN, Layout

SRC = REPO_ROOT / ".tools" / "src"
KUEUE = "kueue"
COSCHEDULING = "coscheduling"
KNOWN = (KUEUE, COSCHEDULING)
KUEUE_NAMESPACE = "kueue-system"
COSCHEDULING_NAME = "scheduler-plugins-scheduler"  # the name its chart installs it under
# What each scheduler runs (pid files and logs are named after these).
PROCESSES = {KUEUE: ("kueue",), COSCHEDULING: ("scheduler-plugins-scheduler", "scheduler-plugins-controller")}
PORTS = ("kueue-webhook", "kueue-health", "scheduler-plugins-scheduler", "scheduler-plugins-controller")
# The ResourceFlavor and ClusterQueue `schedulers kueue` creates (docs/gang.md's admin steps).
KUEUE_FLAVOR = "default-flavor"
KUEUE_CLUSTER_QUEUE = "torchdag"


def _module_version(module: str, tools_dir: str) -> str:
    text = (REPO_ROOT / "tools" / tools_dir / "go.mod").read_text()
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", text, re.M)
    if not found:
        raise RuntimeError(f"tools/{tools_dir}/go.mod does not require {module}")
    return found.group(1)


def kueue_version() -> str:
    return _module_version("sigs.k8s.io/kueue", "kueue")


def scheduler_plugins_version() -> str:
    return _module_version("sigs.k8s.io/scheduler-plugins", "scheduler-plugins")


def binary(process: str) -> Path:
    """The Makefile names each binary after its module's version (one build per version)."""
    version = kueue_version() if process == "kueue" else scheduler_plugins_version()
    return BIN / f"{process}-{version}"


def module_tree(name: str) -> Path:
    """The module's source tree as the Makefile linked it (its CRDs and configurations)."""
    version = kueue_version() if name == KUEUE else scheduler_plugins_version()
    return SRC / (f"kueue-{version}" if name == KUEUE else f"scheduler-plugins-{version}")


def recorded(layout: Layout) -> list[str]:
    """The real schedulers this cluster runs (state.json)."""
    return list(layout.read_state().get("schedulers", []))


def record(layout: Layout, names: list[str]) -> None:
    state = layout.read_state()
    state["schedulers"] = sorted(set(state.get("schedulers", [])) | set(names))
    layout.write_state(state)


def served_by_real(layout: Layout) -> set[str]:
    """Scheduler names a real scheduler serves here: kube-scheduler must not serve them too."""
    return {COSCHEDULING_NAME} if COSCHEDULING in recorded(layout) else set()


# -- Kueue -----------------------------------------------------------------------------------

def kueue_configuration(layout: Layout, port: dict[str, int]) -> dict:
    """Kueue's Configuration: the plain-pod integration on and system namespaces left alone, as
    docs/gang.md tells admins; one manager, no leader election; everything it serves on loopback
    (its webhooks with the cluster CA's certificate; metrics and the visibility API off)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{port['kueue-health']}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": port["kueue-webhook"], "host": "127.0.0.1",
                    "certDir": str(layout.root / "kueue" / "certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "managedJobsNamespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", KUEUE_NAMESPACE]}]},
        "integrations": {"frameworks": ["pod"]},
        # The visibility API server listens on every interface (its own port); nothing here uses it.
        "featureGates": {"VisibilityOnDemand": False},
    }


def _client_config(path: str, port: int, ca: str) -> dict:
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}


def kueue_webhooks(port: int, ca: str) -> list[dict]:
    """The module's webhook configurations as its kustomization installs them (name prefix
    `kueue-`, the namespaceSelector patches), each `service:` turned into a loopback `url:`."""
    base = module_tree(KUEUE) / "config" / "components" / "webhook"
    configs = [doc for doc in yaml.safe_load_all((base / "manifests.yaml").read_text()) if doc]
    patches = {}
    for patch in yaml.safe_load((base / "kustomization.yaml").read_text()).get("patches", []):
        body = yaml.safe_load(patch["patch"])
        for hook in body.get("webhooks", []):
            patches[(body["kind"], hook["name"])] = {k: v for k, v in hook.items() if k != "name"}
    for config in configs:
        config["metadata"]["name"] = "kueue-" + config["metadata"]["name"]
        for hook in config["webhooks"]:
            hook.update(patches.get((config["kind"], hook["name"]), {}))
            hook["clientConfig"] = _client_config(hook["clientConfig"]["service"]["path"], port, ca)
    return configs


def kueue_crds(port: int, ca: str) -> list[dict]:
    """The module's CRDs, with the conversion webhooks its kustomization patches in (on loopback)."""
    base = module_tree(KUEUE) / "config" / "components" / "crd"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    crds = {}
    for resource in kustomization["resources"]:
        crd = yaml.safe_load((base / resource).read_text())
        crds[crd["metadata"]["name"]] = crd
    for patch in kustomization.get("patches", []):
        body = yaml.safe_load((base / patch["path"]).read_text())
        conversion = body["spec"]["conversion"]
        path = conversion["webhook"]["clientConfig"]["service"].get("path", "/convert")
        conversion["webhook"]["clientConfig"] = _client_config(path, port, ca)
        crds[body["metadata"]["name"]]["spec"]["conversion"] = conversion
    return list(crds.values())


def kueue_queue_objects(quota: dict[str, str], cluster_queue: str = KUEUE_CLUSTER_QUEUE,
                        flavor: str = KUEUE_FLAVOR) -> list[dict]:
    """A ResourceFlavor and a ClusterQueue with `quota` (resource -> nominal quota) for every
    resource the job's pods request: the accelerator, cpu and memory (docs/gang.md)."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": sorted(quota),
             "flavors": [{"name": flavor, "resources": [{"name": name, "nominalQuota": quota[name]}
                                                         for name in sorted(quota)]}]}]}},
    ]


def local_queue(namespace: str, name: str, cluster_queue: str = KUEUE_CLUSTER_QUEUE) -> dict:
    """The LocalQueue a job names in `scheduling.queue` (docs/gang.md)."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}}


# Generous enough for any job of the local cluster's `make cluster-nodes`; tests make their own.
DEFAULT_QUOTA = {"cpu": "1000", "memory": "4Ti", "huawei.com/Ascend910": "4096", "huawei.com/Ascend310P": "4096",
                 "nvidia.com/gpu": "4096"}

_CLONE_NEWNS, _MS_REC, _MS_PRIVATE = 0x00020000, 0x4000, 0x40000


def _etc_overlay(upper: Path, work: Path):
    """A preexec function: Kueue's manager, with its certificate management off, reads its
    metrics certificate from the fixed path /etc/kueue/metrics/certs (cmd/kueue/main.go), where
    its Deployment mounts a Secret. Here the process gets a mount namespace of its own in which
    /etc is an overlay with that folder added: the host's /etc is never written."""
    def enter() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNS) != 0 or libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "unshare/mount --make-rprivate /")
        options = f"lowerdir=/etc,upperdir={upper},workdir={work}".encode()
        if libc.mount(b"overlay", b"/etc", b"overlay", 0, options) != 0:
            raise OSError(ctypes.get_errno(), "mount overlay on /etc")
    return enter


def prepare_kueue(layout: Layout, port: dict[str, int]) -> tuple[list[str], object]:
    """Kueue's files (configuration, certificates) and its command line and preexec function."""
    root = layout.root / "kueue"
    certs = root / "certs"
    metrics = root / "etc-upper" / "kueue" / "metrics" / "certs"
    for folder in (certs, metrics, root / "etc-work"):
        folder.mkdir(parents=True, exist_ok=True)
    for target in (certs, metrics):
        for suffix in ("crt", "key"):
            (target / f"tls.{suffix}").write_bytes(layout.cert(f"webhook.{suffix}").read_bytes())
            (target / f"tls.{suffix}").chmod(0o600)
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(kueue_configuration(layout, port), sort_keys=False))
    argv = [str(binary("kueue")), f"--config={config}", f"--kubeconfig={layout.kubeconfig}"]
    return argv, _etc_overlay(root / "etc-upper", root / "etc-work")


# -- scheduler-plugins -------------------------------------------------------------------------

def coscheduling_config(layout: Layout) -> dict:
    """scheduler-plugins' `manifests/coscheduling/scheduler-config.yaml` under its chart's name:
    Coscheduling at every extension point and as the queue sort; its Permit wait at the plugin's
    default (60 s; a PodGroup's scheduleTimeoutSeconds overrides it)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": COSCHEDULING_NAME, "plugins": {
            "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
            "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]}}}],
    }


def coscheduling_crds() -> list[dict]:
    """The PodGroup and ElasticQuota CRDs from the module (its controller reconciles both)."""
    base = module_tree(COSCHEDULING) / "manifests"
    docs = []
    for path in (base / "coscheduling" / "crd.yaml", base / "capacityscheduling" / "crd.yaml"):
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def coscheduling_argv(layout: Layout, port: dict[str, int]) -> dict[str, list[str]]:
    kubeconfig = str(layout.kubeconfig)
    config = layout.root / "scheduler-plugins.yaml"
    config.write_text(yaml.safe_dump(coscheduling_config(layout), sort_keys=False))
    return {
        "scheduler-plugins-scheduler": [
            str(binary("scheduler-plugins-scheduler")), f"--config={config}", "--bind-address=127.0.0.1",
            f"--secure-port={port['scheduler-plugins-scheduler']}",
            f"--cert-dir={layout.root / 'serving' / 'scheduler-plugins-scheduler'}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--profiling=false"],
        "scheduler-plugins-controller": [
            str(binary("scheduler-plugins-controller")), "--metricsAddr=0",
            f"--probeAddr=127.0.0.1:{port['scheduler-plugins-controller']}"],
    }


# -- bringing them up --------------------------------------------------------------------------

def health_url(process: str, port: dict[str, int]) -> str:
    return {
        "kueue": f"http://127.0.0.1:{port['kueue-health']}/readyz",
        "scheduler-plugins-scheduler": f"https://127.0.0.1:{port['scheduler-plugins-scheduler']}/healthz",
        "scheduler-plugins-controller": f"http://127.0.0.1:{port['scheduler-plugins-controller']}/readyz",
    }[process]


def start(cluster, names: list[str], say=print, restart_scheduler: bool | None = None) -> None:
    """Start each named scheduler that is not running, with what it needs in the API server,
    and wait until it serves. `cluster` is a running Cluster (up.py). kube-scheduler is restarted
    without the names the new ones serve (`restart_scheduler`; by default when one is new)."""
    unknown = [name for name in names if name not in KNOWN]
    if unknown:
        raise procs.ClusterError(f"unknown scheduler {', '.join(unknown)}: known are {', '.join(KNOWN)} "
                           f"(volcano's module is not served; docs/gang.md)")
    missing = [str(binary(p)) for name in names for p in PROCESSES[name] if not binary(p).exists()]
    missing += [str(module_tree(name)) for name in names if not module_tree(name).is_dir()]
    if missing:
        raise procs.ClusterError(f"missing: {', '.join(missing)}; run `make cluster-schedulers`")
    layout = cluster.layout
    port = procs.ports(layout, PORTS)
    subprocess_env = {"KUBECONFIG": str(layout.kubeconfig)}
    ca = base64.b64encode(layout.cert("ca.crt").read_bytes()).decode()
    newly = [name for name in names if name not in recorded(layout)]
    record(layout, names)
    if restart_scheduler is None:
        restart_scheduler = COSCHEDULING in newly
    if COSCHEDULING in names:
        cluster.apply_objects(coscheduling_crds())
        if restart_scheduler:  # kube-scheduler gives up the name: one scheduler per name
            cluster.restart_scheduler()
        for process, argv in coscheduling_argv(layout, port).items():
            _ensure(cluster, process, argv, subprocess_env)
    if KUEUE in names:
        cluster.apply_objects([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
                               *kueue_crds(port["kueue-webhook"], ca)])
        argv, preexec = prepare_kueue(layout, port)
        _ensure(cluster, "kueue", argv, subprocess_env, preexec)
    for name in names:
        for process in PROCESSES[name]:
            cluster.wait(f"{process} health", lambda p=process: cluster._health(health_url(p, port)),
                         process, exe=binary(process))
    if KUEUE in names:
        # The webhooks only once the server answers: with failurePolicy Fail, every pod
        # creation outside the system namespaces goes through it.
        cluster.apply_objects(kueue_webhooks(port["kueue-webhook"], ca))
        cluster.apply_objects(kueue_queue_objects(DEFAULT_QUOTA))
    say(f"gang schedulers running: {', '.join(names)} (logs {layout.logs}/)")


def _ensure(cluster, process: str, argv: list[str], env: dict[str, str], preexec=None) -> None:
    if procs.running(cluster.layout, process, binary(process)) is None:
        procs.start(cluster.layout, process, argv, env, preexec_fn=preexec)


def running(layout: Layout) -> bool:
    return all(procs.running(layout, process, binary(process)) is not None
               for name in recorded(layout) for process in PROCESSES[name])


def stop(layout: Layout) -> list[str]:
    """Stop every scheduler process this cluster runs; what was stopped."""
    stopped = []
    for name in KNOWN:
        for process in PROCESSES[name]:
            exe = binary(process)
            how = procs.stop(layout, process, exe) if exe.exists() or layout.pid_file(process).exists() else ""
            if how:
                stopped.append(process if how == "terminated" else f"{process} ({how})")
    return stopped

