"""A pod's files, and the fixed in-container paths each of its processes sees.

Every pod gets a folder (STATE/pods/<namespace>/<pod>-<uid>/): its volumes (emptyDir,
configMap, secret, the ServiceAccount token projected as kube-api-access-*), one
termination-message file per container. As root, each container's process starts under
`unshare --mount` with bind mounts, so the paths in-cluster code reads are the pod's own:
/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace} (client-go's
InClusterConfig and the gang watch read them there), /var/run/argo (Argo's shared
volume), the container's terminationMessagePath. A mount point that does not exist on
this machine is created only under /var/run, /run and /dev (tmpfs and devtmpfs: gone at
reboot) and /opt/torchdag (where a Workflow mounts its helpers: the folders made there are
removed, when empty, as the kubelet stops); any other volume whose mount point is missing is
skipped, with a note.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
MEMORY_ROOT = Path("/dev/shm/torchdag-kubelet")  # emptyDir medium: Memory
CREATABLE = ("/var/run/", "/run/", "/dev/", "/opt/torchdag/")  # the last: where the Workflow mounts its helpers
# Folders made on this machine as mount points, removed by remove_made_folders() when the
# kubelet stops: not before, as a running pod's private mount sits on them.
MADE_FOLDERS: set[str] = set()
_MADE_LOCK = threading.Lock()
# Every process kubelet on this machine shares those folders (the e2e tests run two at once): a
# process holds HOST_STATE/lock shared while any of its pods has mounts, and lists the folders it
# makes in HOST_STATE/made-folders. Only a kubelet that can take the lock exclusively (no pod on
# the machine has mounts) removes them, all of them: rmdir of a folder that is a mount point in
# another pod's namespace would detach that pod's mount.
HOST_STATE = Path("/run/torchdag-kubelet")
_host_users = 0
_host_lock = None  # the open lock file while _host_users > 0


def _host_file(name: str, mode: str):
    try:
        HOST_STATE.mkdir(parents=True, exist_ok=True)
        return open(HOST_STATE / name, mode)
    except OSError:  # not root: this kubelet keeps to its own folders
        return None


def _hold_host() -> None:
    global _host_users, _host_lock
    with _MADE_LOCK:
        _host_users += 1
        if _host_users == 1:
            _host_lock = _host_file("lock", "a")
            if _host_lock is not None:
                fcntl.flock(_host_lock, fcntl.LOCK_SH)  # waits while another kubelet removes folders


def _release_host() -> None:
    global _host_users, _host_lock
    with _MADE_LOCK:
        _host_users -= 1
        if _host_users == 0 and _host_lock is not None:
            _host_lock.close()  # releases the lock
            _host_lock = None


MOUNTS = 'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 126; shift 2; done; '
MOUNT_SCRIPT = MOUNTS + 'shift; exec "$@"'
# The same when a bind covers the program itself (Argo mounts an emptyDir on /tmp in its own
# containers, and a checkout under /tmp holds argoexec): the program is opened before the
# mounts and run through its descriptor.
MOUNT_SCRIPT_KEEP_PROGRAM = 'exec 9<"$1" || exit 127; shift; ' + MOUNTS + 'shift 2; exec /proc/self/fd/9 "$@"'


def can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None


@dataclass
class Sandbox:
    root: Path
    mounts_allowed: bool = field(default_factory=can_mount)
    holds_host: bool = False  # counted in _host_users from its first binds until release_volumes

    @classmethod
    def for_pod(cls, state_dir: Path, pod: dict, mounts_allowed: bool | None = None) -> "Sandbox":
        meta = pod["metadata"]
        root = state_dir / "pods" / meta.get("namespace", "default") / f"{meta['name']}-{meta.get('uid', '')[:8]}"
        root.mkdir(parents=True, exist_ok=True)
        return cls(root) if mounts_allowed is None else cls(root, mounts_allowed)

    def memory_dir(self) -> Path:
        return MEMORY_ROOT / self.root.parent.name / self.root.name

    def release_volumes(self) -> None:
        """A terminated pod's volumes are torn down, as the kubelet does (its
        --keep-terminated-pod-volumes is off by default): emptyDirs lose their files (Argo's
        init copies its 200 MB executor into each pod's /var/run/argo), memory-backed ones
        their RAM. The pod's termination messages stay, and its logs (under the kubelet's
        state, not here)."""
        if self.holds_host:
            self.holds_host = False
            _release_host()
        shutil.rmtree(self.root / "volumes", ignore_errors=True)
        shutil.rmtree(self.memory_dir(), ignore_errors=True)
        for folder in (self.memory_dir().parent, MEMORY_ROOT):
            try:
                folder.rmdir()  # only when empty
            except OSError:
                pass

    def volume_dir(self, name: str) -> Path:
        path = self.root / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_service_account(self, token: str, ca: bytes, namespace: str) -> Path:
        folder = self.volume_dir("serviceaccount")
        for name, data in (("token", token.encode()), ("ca.crt", ca), ("namespace", namespace.encode())):
            tmp = folder / f".{name}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, folder / name)  # rotated in place, as kubelet's atomic writer does
        return folder

    def write_files(self, volume: str, data: dict[str, str], items: list[dict] | None) -> Path:
        folder = self.volume_dir(volume)
        chosen = [(i["key"], i.get("path", i["key"])) for i in items] if items else [(k, k) for k in data]
        for key, path in chosen:
            if key in data:
                target = folder / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(data[key])
        return folder

    def termination_file(self, container: str) -> Path:
        path = self.root / "termination" / container
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        return path

    def source_for(self, volume: dict, notes: list[str]) -> Path | None:
        """Where a pod volume's files are on this machine (None: not mounted)."""
        name = volume["name"]
        if "emptyDir" in volume:
            if (volume["emptyDir"] or {}).get("medium") == "Memory" and os.path.isdir("/dev/shm"):
                # tmpfs, as kubelet gives medium: Memory (/dev/shm holds torch's shared memory)
                path = self.memory_dir() / name
                path.mkdir(parents=True, exist_ok=True)
                return path
            return self.volume_dir(name)
        if "hostPath" in volume:
            path = Path(volume["hostPath"]["path"])
            if path.exists():
                return path
            notes.append(f"volume {name}: hostPath {path} does not exist here: not mounted")
            return None
        projected = (volume.get("projected") or {}).get("sources") or []
        if any("serviceAccountToken" in s for s in projected) or name == "serviceaccount":
            return self.root / "volumes" / "serviceaccount"
        for kind in ("configMap", "secret", "projected", "downwardAPI", "persistentVolumeClaim"):
            if kind in volume:
                folder = self.root / "volumes" / name
                if folder.exists():
                    return folder
                notes.append(f"volume {name} ({kind}): not provided by the process kubelet: not mounted")
                return None
        notes.append(f"volume {name}: kind {sorted(k for k in volume if k != 'name')} not supported: not mounted")
        return None

    def binds(self, volumes: list[dict], volume_mounts: list[dict], termination: tuple[Path, str] | None,
              notes: list[str]) -> list[tuple[str, str]]:
        """(source on this machine, path in the container) for each mount that can be made."""
        if not self.holds_host:
            self.holds_host = True
            _hold_host()  # before any mount point is looked at: none is removed under this pod
        by_name = {v["name"]: v for v in volumes}
        out: list[tuple[str, str]] = []
        for mount in volume_mounts:
            volume = by_name.get(mount["name"])
            target = mount["mountPath"]
            if volume is None:
                notes.append(f"volumeMount {mount['name']}: no such volume in the pod: not mounted")
                continue
            source = self.source_for(volume, notes)
            if source is None:
                continue
            if mount.get("subPath"):
                source = source / mount["subPath"]
                source.mkdir(parents=True, exist_ok=True)
            if str(source) == target:
                continue
            if self._mount_point(target, directory=True, notes=notes):
                out.append((str(source), target))
        if termination is not None:
            source, target = termination
            if self._mount_point(target, directory=False, notes=notes):
                out.append((str(source), target))
        return out

    def _mount_point(self, target: str, *, directory: bool, notes: list[str]) -> bool:
        if os.path.exists(target):
            return True
        if not target.startswith(CREATABLE):
            notes.append(f"mount point {target} does not exist on this machine: not mounted")
            return False
        folder = target if directory else os.path.dirname(target)
        try:
            missing = _missing_folders(folder)
            os.makedirs(folder, exist_ok=True)
            if not directory:
                open(target, "a").close()
        except OSError as err:
            notes.append(f"cannot create mount point {target}: {err.strerror}: not mounted")
            return False
        with _MADE_LOCK:
            MADE_FOLDERS.update(missing)
        listed = _host_file("made-folders", "a")
        if listed is not None:
            with listed:
                listed.write("".join(f"{folder}\n" for folder in missing))
        return True


def _missing_folders(folder: str) -> list[str]:
    out = []
    while folder not in ("", "/") and not os.path.exists(folder):
        out.append(folder)
        folder = os.path.dirname(folder)
    return out


def remove_made_folders() -> list[str]:
    """Remove the mount-point folders made on this machine, deepest first, each only when
    empty (an image's own files are never touched), unless a pod of any kubelet here still
    has mounts: then the last kubelet to stop removes them. The folders removed."""
    lock = _host_file("lock", "a")
    try:
        if lock is not None:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return []
        listed = _host_file("made-folders", "r+")
        with _MADE_LOCK:
            folders = set(MADE_FOLDERS)
            MADE_FOLDERS.clear()
        if listed is not None:
            with listed:
                folders.update(line.strip() for line in listed if line.strip())
                listed.truncate(0)
        removed = []
        for folder in sorted(folders, key=len, reverse=True):
            try:
                os.rmdir(folder)
                removed.append(folder)
            except OSError:
                pass
        return removed
    finally:
        if lock is not None:
            lock.close()


def wrap(argv: list[str], binds: list[tuple[str, str]]) -> list[str]:
    """argv under a mount namespace of its own with the binds made (private propagation:
    nothing leaks back to this machine); argv unchanged when there is nothing to bind."""
    if not binds:
        return list(argv)
    flat = [word for pair in mount_order(binds) for word in pair]
    program = shutil.which(argv[0]) or argv[0]
    if any(_covers(target, os.path.abspath(program)) for _, target in binds):
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", MOUNT_SCRIPT_KEEP_PROGRAM,
                "kubelet-mounts", program, *flat, "--", *argv]
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", MOUNT_SCRIPT,
            "kubelet-mounts", *flat, "--", *argv]


def _covers(target: str, path: str) -> bool:
    return path == target or path.startswith(target.rstrip("/") + "/")


def mount_order(binds: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Binds in an order where no mount hides a source still to be bound (Argo mounts an
    emptyDir on /tmp, and the pod's folder may be under /tmp): a bind whose target covers
    another's source comes after it."""
    left, out = list(binds), []
    while left:
        free = [b for b in left if not any(_covers(b[1], other[0]) for other in left if other is not b)]
        chosen = free[0] if free else left[0]
        out.append(chosen)
        left.remove(chosen)
    return out
