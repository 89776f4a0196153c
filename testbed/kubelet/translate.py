"""Pod -> processes: what a kubelet computes for each container before it starts it.

The environment (kubelet's makeEnvironmentVariables, k8s.io/kubernetes v1.37): envFrom
first, then env in order, a literal `value` expanded (`$(VAR)`) against the variables
defined before it and then the service variables, `valueFrom` taken as is (downward API,
resource fields, ConfigMap and Secret keys); the service variables of the `kubernetes`
Service last. command and args expand against that whole environment. Then Argo's
emissary wrapper is unwrapped and the container goes through the same local mappings as
`make smoke` (testbed.runtime.localize), so both start the same processes.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable

from kubernetes.utils import parse_quantity

from ..runtime import Options, device_of, kube_expand, localize
from .sandbox import can_mount

ARGOEXEC_PATHS = ("argoexec", "/var/run/argo/argoexec", "/usr/local/bin/argoexec", "/bin/argoexec")
DEFAULT_TERMINATION_PATH = "/dev/termination-log"


class PodError(Exception):
    """The pod cannot start as written (a missing ConfigMap key, a bad field path): the
    message goes into the container's status, as kubelet's CreateContainerConfigError."""


@dataclass
class PodContext:
    """What a container's environment draws on besides its pod."""

    node_name: str
    host_ip: str
    pod_ip: str
    api_host: str  # the API server as in-cluster clients reach it (KUBERNETES_SERVICE_HOST)
    api_port: int
    allocatable: dict = field(default_factory=dict)  # the node's, for resource fields without a limit
    config_maps: Callable[[str, str], dict | None] = lambda ns, name: None  # -> data, or None when absent
    secrets: Callable[[str, str], dict | None] = lambda ns, name: None  # -> decoded data
    options: Options = field(default_factory=Options)
    argoexec: str | None = None  # the argoexec binary built from Argo's module
    wait: str = "report"  # Argo's wait sidecar: "report" (a stated stand-in) or "real" (argoexec wait)


@dataclass
class ContainerRun:
    name: str
    init: bool
    role: str  # "process", "argoexec" (Argo's own code, run for real) or "argo-wait"
    argv: list[str]
    env: list[tuple[str, str]]
    cwd: str
    device: str
    notes: list[str] = field(default_factory=list)
    termination_path: str = DEFAULT_TERMINATION_PATH
    termination_policy: str = "File"
    volume_mounts: list[dict] = field(default_factory=list)
    emissary: bool = False  # was wrapped in Argo's emissary: its exit code goes to /var/run/argo/ctr/NAME/exitcode


def service_env(host: str, port: int) -> dict[str, str]:
    """The variables kubelet gives every container for the `kubernetes` Service (here: the
    API server on loopback, which in-cluster clients find through them)."""
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": str(port),
        f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
    }


def field_ref(pod: dict, ctx: PodContext, path: str) -> str:
    """The downward API's env fields (pkg/fieldpath and kubelet's podFieldSelectorRuntimeValue)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    for prefix, key in (("metadata.labels['", "labels"), ("metadata.annotations['", "annotations")):
        if path.startswith(prefix) and path.endswith("']"):
            return (meta.get(key) or {}).get(path[len(prefix):-2], "")
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", "default"),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or ctx.node_name,
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": ctx.host_ip,
        "status.hostIPs": ctx.host_ip,
        "status.podIP": ctx.pod_ip,
        "status.podIPs": ctx.pod_ip,
    }
    if path not in simple:
        raise PodError(f"unsupported fieldRef fieldPath {path!r}")
    return simple[path]


def resource_ref(pod: dict, container: dict, ctx: PodContext, ref: dict) -> str:
    """resourceFieldRef: the limit or request, rounded up in units of the divisor; a limit
    that is not set is the node's allocatable (pkg/api/v1/resource ExtractResourceValueByContainerName)."""
    name = ref.get("containerName") or container["name"]
    spec = pod.get("spec") or {}
    target = next((c for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
                   if c["name"] == name), None)
    if target is None:
        raise PodError(f"resourceFieldRef: no container {name!r}")
    kind, _, resource = ref["resource"].partition(".")
    given = ((target.get("resources") or {}).get(kind) or {}).get(resource)
    if given is None and kind == "limits":
        given = ctx.allocatable.get(resource)
    if given is None:
        return "0"
    divisor = parse_quantity(str(ref.get("divisor") or "1"))
    if divisor == 0:
        divisor = parse_quantity("1")
    return str(int(math.ceil(parse_quantity(str(given)) / divisor)))


def _key_ref(kind: str, ref: dict, namespace: str, lookup) -> str | None:
    data = lookup(namespace, ref["name"])
    if data is None or ref["key"] not in data:
        if ref.get("optional"):
            return None
        what = f"{kind} {ref['name']!r}" if data is None else f"key {ref['key']!r} in {kind} {ref['name']!r}"
        raise PodError(f"{what} not found")
    return data[ref["key"]]


def container_env(pod: dict, container: dict, ctx: PodContext) -> list[tuple[str, str]]:
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    services = service_env(ctx.api_host, ctx.api_port)
    defined: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, lookup in (("configMapRef", ctx.config_maps), ("secretRef", ctx.secrets)):
            if kind in source:
                data = lookup(namespace, source[kind]["name"])
                if data is None and not source[kind].get("optional"):
                    raise PodError(f"{kind} {source[kind]['name']!r} not found")
                defined.update({prefix + k: v for k, v in (data or {}).items()})

    def lookup(name: str) -> str | None:
        return defined.get(name, services.get(name))

    for entry in container.get("env") or []:
        name, source = entry["name"], entry.get("valueFrom")
        if entry.get("value") or not source:
            defined[name] = kube_expand(entry.get("value") or "", lookup)
        elif "fieldRef" in source:
            defined[name] = field_ref(pod, ctx, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            defined[name] = resource_ref(pod, container, ctx, source["resourceFieldRef"])
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind = "configMapKeyRef" if "configMapKeyRef" in source else "secretKeyRef"
            value = _key_ref(kind[:-6], source[kind], namespace, ctx.config_maps if kind[0] == "c" else ctx.secrets)
            if value is not None:
                defined[name] = value
        else:
            raise PodError(f"env {name}: unsupported valueFrom {sorted(source)}")
    return list(defined.items()) + [(k, v) for k, v in services.items() if k not in defined]


def unwrap_emissary(command: list[str]) -> list[str] | None:
    """`/var/run/argo/argoexec emissary [flags] -- CMD...` -> CMD...; None when not wrapped."""
    if len(command) >= 2 and command[0] in ARGOEXEC_PATHS and command[1] == "emissary":
        if "--" in command:
            return command[command.index("--") + 1:]
        return []
    return None


def argoexec_role(command: list[str]) -> str | None:
    """`argoexec init|wait|resource|data|agent ...`: Argo's own code; None otherwise."""
    if command and command[0] in ARGOEXEC_PATHS and len(command) > 1:
        return command[1]
    return None


def plan_container(pod: dict, container: dict, ctx: PodContext, *, init: bool = False) -> ContainerRun:
    env = container_env(pod, container, ctx)
    env_map = dict(env)
    command = [kube_expand(str(w), env_map.get) for w in container.get("command") or []]
    args = [kube_expand(str(w), env_map.get) for w in container.get("args") or []]
    notes: list[str] = []
    termination = container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH
    policy = container.get("terminationMessagePolicy") or "File"
    mounts = list(container.get("volumeMounts") or [])
    inner = unwrap_emissary(command)
    if inner is not None:
        wrapper = command[:command.index("--") + 1] if "--" in command else command
        notes.append(f"unwrapped Argo's emissary: {' '.join(wrapper)}")
        command = inner
    role = argoexec_role(command)
    if role is not None:  # Argo's own pods; a resource template's main is `emissary -- argoexec resource ...`
        if role == "wait" and ctx.wait != "real":
            return ContainerRun(container["name"], init, "argo-wait", command + args, env, os.getcwd(), "cpu",
                                notes, termination, policy, mounts)
        binary = ctx.argoexec
        if not binary or not os.path.exists(binary):
            raise PodError(f"{command[0]} {role}: Argo's executor binary is not built here "
                           f"({binary or 'no --argoexec'}; `make go-tools` builds .tools/bin/argoexec)")
        notes.append(f"Argo's own code: {command[0]} -> {binary}")
        return ContainerRun(container["name"], init, "argoexec", [binary] + command[1:] + args, env,
                            os.getcwd(), "cpu", notes, termination, policy, mounts, emissary=inner is not None)
    if not command:
        raise PodError(f"container {container['name']}: no command: the image's entrypoint is not known here")
    argv, env_out, cwd, device = localize(command, args, env, container.get("workingDir"),
                                          device_of(env_map, container), ctx.options, notes,
                                          # the volumes hide the image there, where they can be mounted
                                          tuple(m["mountPath"] for m in mounts) if can_mount() else ())
    return ContainerRun(container["name"], init, "process", argv, env_out, cwd, device, notes,
                        termination, policy, mounts, emissary=inner is not None)


def plan_pod(pod: dict, ctx: PodContext) -> tuple[list[ContainerRun], list[ContainerRun]]:
    """(init containers, containers), each as it will start; PodError when one cannot."""
    spec = pod.get("spec") or {}
    inits = [plan_container(pod, c, ctx, init=True) for c in spec.get("initContainers") or []]
    mains = [plan_container(pod, c, ctx) for c in spec.get("containers") or []]
    return inits, mains
