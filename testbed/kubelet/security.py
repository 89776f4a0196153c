"""A pod's securityContext applied to the processes the process kubelet starts, as a
container runtime applies it: user and group (runAsUser, runAsGroup), supplementary groups
(supplementalGroups, fsGroup), the capability set (the runtime's default set, less `drop`,
plus `add`) and no_new_privs (allowPrivilegeEscalation: false).

It is done by util-linux `setpriv`, which execs the container's command with those
credentials, after the per-pod mounts are made (they need the kubelet's own privileges).
The container's own securityContext wins over the pod's for the fields both carry
(Kubernetes' rule). Without root, or without setpriv, nothing is applied and a note says so.
"""

from __future__ import annotations

import os
import shutil

# containerd's and CRI-O's default capability set for a container (containerd
# pkg/oci/spec.go defaultUnixCaps): what a root process in a container holds unless the
# securityContext drops some.
RUNTIME_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
                        "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE")
IMAGE_USER = 0  # the images torchdag's jobs run (and any without USER) start as root


def can_apply() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def _capabilities(container_context: dict) -> list[str]:
    """The capability names the container keeps: the runtime's set, less drop, plus add."""
    wanted = container_context.get("capabilities") or {}
    drop = {name.upper().removeprefix("CAP_") for name in wanted.get("drop") or []}
    add = [name.upper().removeprefix("CAP_") for name in wanted.get("add") or []]
    kept = [] if "ALL" in drop else [name for name in RUNTIME_CAPABILITIES if name not in drop]
    return kept + [name for name in add if name not in kept and name != "ALL"]


def setpriv_words(pod_context: dict | None, container_context: dict | None) -> list[str]:
    """The `setpriv ...` words that give a process the credentials of a container with these
    securityContexts (then the container's argv follows)."""
    pod_context, container_context = pod_context or {}, container_context or {}

    def field(name: str, default):
        return container_context.get(name, pod_context.get(name, default))

    uid, gid = int(field("runAsUser", IMAGE_USER)), int(field("runAsGroup", 0))
    groups = [int(g) for g in pod_context.get("supplementalGroups") or []]
    if "fsGroup" in pod_context:
        groups.append(int(pod_context["fsGroup"]))
    groups = sorted(set(groups) - {gid})
    capabilities = _capabilities(container_context)
    caps = ",".join(["-all", *(f"+{name.lower()}" for name in capabilities)])
    words = ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
    words += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    # Root holds what the bounding set allows; a non-root user's exec drops every capability
    # itself (runtimes set no ambient capabilities), so the inheritable set stays empty.
    words += [f"--bounding-set={caps}", "--inh-caps=-all"]
    if container_context.get("allowPrivilegeEscalation") is False:
        words.append("--no-new-privs")
    return words + ["--"]


def describe(pod_context: dict | None, container_context: dict | None) -> str:
    """One line for the kubelet's log: what the process runs with."""
    words = setpriv_words(pod_context, container_context)
    return " ".join(word for word in words if word.startswith("--") and word != "--")


def process_prefix(pod: dict, container_name: str, role: str, notes: list[str]) -> list[str]:
    """The words to put before a container's argv so its process runs with the pod's and the
    container's securityContext; [] for Argo's own code (argoexec, whose binary a pod's
    mounts may cover: it runs as the kubelet does) or where setpriv cannot be used."""
    if role != "process":
        return []
    if not can_apply():
        notes.append("securityContext not applied: needs root and setpriv (util-linux)")
        return []
    spec = pod.get("spec") or {}
    container = next((c for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
                      if c.get("name") == container_name), {})
    pod_context, container_context = spec.get("securityContext"), container.get("securityContext")
    notes.append(f"securityContext: {describe(pod_context, container_context)}")
    return setpriv_words(pod_context, container_context)
