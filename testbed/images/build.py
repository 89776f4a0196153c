"""Building the images with Debian's mmdebstrap and buildah, in a containers-storage of the
image cache's own (`<cache>/buildah`): each recipe (recipes.py) becomes
`localhost/torchdag-build/<name>:<key>` there, built only when no image of that key exists.

Build steps run as root in buildah containers with chroot isolation and the host's network
(apt and pip reach their registries as the host does, the host's pip settings included).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from torchdag import REPO_ROOT

from .recipes import ARGOEXEC, DOCKERFILE, Recipe, apt_sources, host_pip_settings

BUILDAH = "buildah"
MMDEBSTRAP = "mmdebstrap"
BUILD_REF = "localhost/torchdag-build"


class BuildError(RuntimeError):
    pass


def build_ref(name: str, key: str) -> str:
    return f"{BUILD_REF}/{name}:{key}"


class Builder:
    def __init__(self, home: Path, say=lambda line: print(line, flush=True)):
        self.home = home
        self.say = say
        self.storage = ["--root", str(home / "buildah" / "root"), "--runroot", str(home / "buildah" / "run"),
                        "--storage-driver", "overlay"]
        # buildah copies a layer it cannot reuse (torch's: 4.8 GB) to a temporary file first,
        # /var/tmp by default; here it is under the cache, and `clean()` removes what a failed
        # push leaves behind, which a full /var/tmp otherwise keeps.
        self.tmp = home / "buildah" / "tmp"
        self.env = {**os.environ, "TMPDIR": str(self.tmp)}

    def clean(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _failed(self, what: str, detail: str) -> BuildError:
        free = shutil.disk_usage(self.home).free / 2**30
        return BuildError(f"{what} ({free:.1f} GiB free on the cache's disk):\n{detail}")

    def buildah(self, *args: str, timeout: float = 3600, log: Path | None = None) -> str:
        argv = [BUILDAH, *self.storage, *args]
        self.tmp.mkdir(parents=True, exist_ok=True)
        if log:
            with open(log, "ab") as out:
                done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      timeout=timeout, env=self.env)
            if done.returncode:
                # The end of the log, where buildah's own error is, not the build's chatter before it.
                raise self._failed(f"buildah {' '.join(args[:2])} failed (exit {done.returncode}); {log} ends",
                                   log.read_text(errors="replace")[-1500:])
            return ""
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                              env=self.env)
        if done.returncode:
            raise self._failed(f"buildah {' '.join(args[:2])} failed", done.stderr.strip() or done.stdout.strip())
        return done.stdout.strip()

    def has(self, ref: str) -> bool:
        done = subprocess.run([BUILDAH, *self.storage, "inspect", "--type", "image", ref], capture_output=True,
                              stdin=subprocess.DEVNULL)
        return done.returncode == 0

    def layers(self, ref: str) -> list[str]:
        """The image's layers (uncompressed digests), base first."""
        return json.loads(self.buildah("inspect", "--type", "image", ref))["OCIv1"]["rootfs"]["diff_ids"]

    def build(self, recipe: Recipe, key: str, parent_key: str | None) -> str:
        ref = build_ref(recipe.name, key)
        if self.has(ref):
            return ref
        parent = build_ref(recipe.parent, parent_key) if recipe.parent else None
        log = self.home / "logs" / f"{recipe.name}-{key}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self.say(f"images: building {recipe.name} ({key}); log {log}")
        getattr(self, "_" + recipe.name.replace("-", "_"))(recipe, ref, parent, log)
        self.say(f"images: {recipe.name} built in {time.monotonic() - started:.0f}s")
        return ref

    # -- the recipes --------------------------------------------------------------------------
    def _commit(self, container: str, ref: str, log: Path) -> None:
        self.buildah("commit", "--rm", "--quiet", container, ref, log=log)

    def _base(self, recipe: Recipe, ref: str, parent: str | None, log: Path) -> None:
        source, _ = apt_sources()
        with tempfile.TemporaryDirectory(dir=self.home) as tmp:
            rootfs = Path(tmp) / "rootfs.tar"
            excludes = [f"--dpkgopt=path-exclude={p}" for p in recipe.inputs["exclude"]]
            argv = [MMDEBSTRAP, "--variant=minbase", "--mode=root", "--format=tar",
                    f"--include={','.join(recipe.inputs['include'])}", *excludes,
                    "--dpkgopt=path-include=/usr/share/doc/*/copyright", recipe.inputs["suite"], str(rootfs), source]
            with open(log, "ab") as out:
                # stdin closed: mmdebstrap reads sources from stdin when it is not a terminal
                done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      timeout=3600)
            if done.returncode:
                raise BuildError(f"mmdebstrap failed (exit {done.returncode}); {log} ends:\n"
                                 + log.read_text(errors="replace")[-3000:])
            container = self.buildah("from", "--quiet", "scratch")
            self.buildah("add", container, str(rootfs), "/", log=log)
        self.buildah("config", "--cmd", '["/bin/bash"]', "--env",
                     "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", container)
        self._commit(container, ref, log)

    def _run(self, parent: str, ref: str, log: Path, command: str, env: dict[str, str] | None = None,
             mounts: list[tuple[str, str]] | None = None) -> None:
        container = self.buildah("from", "--quiet", "--pull-never", parent)
        try:
            options = ["--isolation", "chroot", "--network", "host"]
            for name, value in (env or {}).items():
                options += ["--env", f"{name}={value}"]
            for host, inside in mounts or []:
                options += ["--volume", f"{host}:{inside}:ro"]
            self.buildah("run", *options, container, "--", "sh", "-c", command, log=log)
            self._commit(container, ref, log)
        except BaseException:
            subprocess.run([BUILDAH, *self.storage, "rm", container], capture_output=True)
            raise

    def _python3(self, recipe: Recipe, ref: str, parent: str | None, log: Path) -> None:
        packages = " ".join(recipe.inputs["apt"])
        self._run(parent, ref, log, "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                                    f"--no-install-recommends {packages} && rm -rf /var/lib/apt/lists/*")

    def _pytorch(self, recipe: Recipe, ref: str, parent: str | None, log: Path) -> None:
        env, mounts = host_pip_settings()
        # Debian marks its python3 externally managed (PEP 668); an image's own pip owns it here.
        self._run(parent, ref, log, "python3 -m pip install --no-cache-dir --break-system-packages "
                                    f"--root-user-action=ignore {' '.join(recipe.inputs['pip'])}", env, mounts)

    def _torchdag(self, recipe: Recipe, ref: str, parent: str | None, log: Path) -> None:
        args = [arg for name, value in recipe.inputs["build-args"].items()
                for arg in ("--build-arg", f"{name}={value}")]
        # The Dockerfile pip-installs the trainer's own packages: RUN steps reach PyPI as the host
        # does (its network; its CA bundle, if it names one, where the base's pip looks).
        _, mounts = host_pip_settings()
        volumes = [arg for host, _ in mounts for arg in ("--volume", f"{host}:/etc/ssl/certs/ca-certificates.crt:ro")]
        # --format docker: the Dockerfile's SHELL instruction is docker's (OCI images have none).
        self.buildah("bud", "--quiet", "--format", "docker", "--isolation", "chroot", "--network", "host",
                     "--pull-never", *volumes, "--build-arg", f"BASE={parent}", *args, "-f", str(DOCKERFILE),
                     "-t", ref, str(REPO_ROOT), log=log)

    def _no_python(self, recipe: Recipe, ref: str, parent: str | None, log: Path) -> None:
        self.buildah("tag", parent, ref)

    def _argoexec(self, recipe: Recipe, ref: str, parent: str | None, log: Path) -> None:
        if not ARGOEXEC.is_file():
            raise BuildError(f"{ARGOEXEC} is not built: run `make go-tools`")
        container = self.buildah("from", "--quiet", "--pull-never", parent)
        self.buildah("copy", "--chmod", "0755", container, str(ARGOEXEC), "/bin/argoexec", log=log)
        self.buildah("config", "--entrypoint", '["argoexec"]', "--cmd", "[]", container)
        self._commit(container, ref, log)

    def _pause(self, recipe: Recipe, ref: str, parent: str | None, log: Path) -> None:
        container = self.buildah("from", "--quiet", "--pull-never", parent)
        self.buildah("config", "--cmd", json.dumps(recipe.inputs["cmd"]), container)
        self._commit(container, ref, log)
