"""The image cache (`~/.cache/torchdag/images`, or $TORCHDAG_IMAGES_DIR) and the image store the nodes clone.

One cache per machine, as pip's and Go's build caches are: every checkout (a CI clone included)
uses the images another built, and torch's 4.6 GB layer is on the disk once, not once a checkout.

- `export/`: an OCI layout holding every image built (uncompressed layers), each named
  `localhost/torchdag-store/<recipe>:<key>`: the build cache. A layer already there is found
  by its digest, so a rebuilt child image does not write torch's layer again.
- `store/root`: a containerd root (overlayfs) with those images imported into the CRI's
  namespace and unpacked. Its layer blobs are hard links to `export/`'s: the torch layer is on
  the disk once as a tar (export) and once unpacked (the store's snapshot).
- a node's containerd root is a hard-link copy of the store's (`cp -al`; the bolt databases
  are copied): images imported and unpacked once serve every node of every cluster at no
  disk cost; a container writes only to its own upper layer. The node then names the images
  as pods ask for them (`ctr images tag`), from the keys of its own checkout.
- `buildah/`: the build's containers-storage, holding the images of the last build's keys.

One build at a time (an exclusive lock on `lock`); nodes copy the store under a shared lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import filecmp
import hashlib
import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from ..node.containerd import Containerd
from . import recipes as recipes_module
from .build import BUILD_REF, Builder, build_ref

STORE_REF = "localhost/torchdag-store"
# Files of a containerd root that a running containerd writes in place: a node gets copies.
MUTABLE = ("io.containerd.metadata.v1.bolt/meta.db", "io.containerd.snapshotter.v1.overlayfs/metadata.db")
CONTENT = "io.containerd.content.v1.content/blobs/sha256"
PRUNE_AFTER_DAYS = 7


def default_home() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("TORCHDAG_IMAGES_DIR") or cache / "torchdag" / "images")


def store_ref(name: str, key: str) -> str:
    return f"{STORE_REF}/{name}:{key}"


class Store:
    def __init__(self, home: Path | None = None, say=lambda line: print(line, flush=True)):
        self.home = (home or default_home()).resolve()
        self.say = say
        self.export = self.home / "export"
        self.root = self.home / "store" / "root"

    @contextlib.contextmanager
    def lock(self, exclusive: bool):
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- what is there ------------------------------------------------------------------------
    def _listed(self) -> dict[str, str]:
        path = self.home / "store" / "images.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def _exported(self) -> set[str]:
        index = self.export / "index.json"
        if not index.exists():
            return set()
        manifests = json.loads(index.read_text()).get("manifests", [])
        return {m.get("annotations", {}).get("org.opencontainers.image.ref.name", "") for m in manifests}

    def wanted(self) -> tuple[dict[str, recipes_module.Recipe], dict[str, str]]:
        all_recipes = recipes_module.recipes()
        return all_recipes, recipes_module.keys(all_recipes)

    def names(self) -> dict[str, str]:
        """Each name pods use -> the store's image for this checkout."""
        all_recipes, keys = self.wanted()
        return {public: store_ref(name, keys[name]) for name, recipe in all_recipes.items() for public in recipe.public}

    # -- building -----------------------------------------------------------------------------
    def ensure(self) -> dict[str, str]:
        """Build and import what this checkout's images need and the store lacks; the names map."""
        names = self.names()
        self._mark_used(names.values())
        with self.lock(exclusive=False):
            if set(names.values()) <= set(self._listed()):
                return names
        with self.lock(exclusive=True):
            missing = sorted(set(names.values()) - set(self._listed()))
            if missing:
                started = time.monotonic()
                self._build_and_import(missing)
                self.say(f"images: store ready in {time.monotonic() - started:.0f}s ({self.home})")
                self._prune(set(names.values()))
        return names

    def _used_file(self, ref: str) -> Path:
        return self.home / "store" / "used" / ref.replace("/", "_").replace(":", "@")

    def _mark_used(self, refs) -> None:
        """When a checkout last used each image (a file's time): what no checkout used for
        PRUNE_AFTER_DAYS leaves the cache at the next build."""
        for ref in refs:
            path = self._used_file(ref)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()

    def _prune(self, keep: set[str]) -> None:
        """Images no checkout used for PRUNE_AFTER_DAYS days: out of the store (containerd's
        garbage collection removes their snapshots) and the export (their blobs no other image
        names). Under the exclusive lock."""
        cutoff = time.time() - PRUNE_AFTER_DAYS * 86400
        listed = self._listed()
        old = [ref for ref in listed if ref not in keep and (
            not self._used_file(ref).exists() or self._used_file(ref).stat().st_mtime < cutoff)]
        if not old:
            return
        containerd = Containerd(self.home / "store" / "importer", self.home / "store" / "importer.sock", root=self.root)
        with containerd:
            containerd.ctr("images", "rm", "--sync", *old, check=False)
        index_path = self.export / "index.json"
        index = json.loads(index_path.read_text())
        index["manifests"] = [m for m in index["manifests"]
                              if m.get("annotations", {}).get("org.opencontainers.image.ref.name") not in old]
        tmp = index_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(index))
        os.replace(tmp, index_path)
        named = {digest.split(":", 1)[1] for digest in self._closure(index["manifests"])}
        for blob in (self.export / "blobs" / "sha256").iterdir():
            if blob.name not in named:
                blob.unlink()
        remaining = {ref: when for ref, when in listed.items() if ref not in old}
        (self.home / "store" / "images.json").write_text(json.dumps(remaining, indent=1, sort_keys=True) + "\n")
        for ref in old:
            self._used_file(ref).unlink(missing_ok=True)
        self.say(f"images: pruned {len(old)} image(s) no checkout used for {PRUNE_AFTER_DAYS} days")

    def _build_and_import(self, missing: list[str]) -> None:
        all_recipes, keys = self.wanted()
        by_ref = {store_ref(name, keys[name]): name for name in all_recipes}
        if not recipes_module.ARGOEXEC.is_file():
            raise RuntimeError(f"{recipes_module.ARGOEXEC} is not built: run `make go-tools` first")
        builder = Builder(self.home, self.say)
        exported = self._exported()
        try:
            for ref in missing:
                self._export(builder, all_recipes, keys, by_ref[ref], exported)
            self._import(missing)
        finally:
            subprocess.run(["buildah", *builder.storage, "rm", "--all"], capture_output=True)
            builder.clean()
            # This checkout's images stay in buildah's storage: a changed trainer/ rebuilds
            # torchdag's layers on them at once (pulling torch's 4.6 GB back from the export
            # took minutes). Images of other keys go (the export still has them).
            current = {build_ref(name, keys[name]) for name in all_recipes}
            listed = subprocess.run(["buildah", *builder.storage, "images", "--format",
                                     "{{.Name}}:{{.Tag}}"], capture_output=True, text=True).stdout.split()
            stale = [ref for ref in listed if ref.startswith(BUILD_REF) and ref not in current]
            if stale:
                subprocess.run(["buildah", *builder.storage, "rmi", "--force", *stale], capture_output=True)

    def _export(self, builder: Builder, all_recipes, keys, name: str, exported: set[str]) -> None:
        ref = store_ref(name, keys[name])
        if ref in exported:
            return
        self._in_buildah(builder, all_recipes, keys, name, exported)
        self._push(builder, name, keys[name], exported)

    def _push(self, builder: Builder, name: str, key: str, exported: set[str]) -> None:
        ref = store_ref(name, key)
        if ref in exported:
            return
        started = time.monotonic()
        # Uncompressed: a layer already in the export is then found by its digest and not
        # written again (torch's, under each new torchdag image); compressing 4.6 GB again took
        # 3 to 13 minutes on the loaded 2-core machine.
        builder.buildah("push", "--quiet", "--disable-compression", build_ref(name, key),
                        f"oci:{self.export}:{ref}", log=self.home / "logs" / f"{name}-{key}.log")
        self.say(f"images: {name} exported in {time.monotonic() - started:.0f}s")
        exported.add(ref)

    def _in_buildah(self, builder: Builder, all_recipes, keys, name: str, exported: set[str]) -> None:
        """The recipe's image in buildah's storage: there already, taken from the export, or built
        (its parent first)."""
        ref = build_ref(name, keys[name])
        if builder.has(ref):
            return
        exported_ref = store_ref(name, keys[name])
        if exported_ref in exported:
            # buildah names an image pulled from an OCI layout after the layout's path, which must
            # then be a valid image name: `.tools` is not, so it goes through a link of such a name.
            link = Path(f"/tmp/torchdag-export-{os.getpid()}")
            link.unlink(missing_ok=True)
            link.symlink_to(self.export)
            try:
                image = builder.buildah("pull", "--quiet", f"oci:{link}:{exported_ref}").splitlines()[-1]
            finally:
                link.unlink(missing_ok=True)
            builder.buildah("tag", image, ref)
            return
        recipe = all_recipes[name]
        if recipe.parent:
            self._in_buildah(builder, all_recipes, keys, recipe.parent, exported)
        builder.build(recipe, keys[name], keys[recipe.parent] if recipe.parent else None)
        # Every image built goes to the export at once, parents too: a later failure loses none.
        self._push(builder, name, keys[name], exported)

    def _import(self, refs: list[str]) -> None:
        """Import the export's images `refs` into the store (unpacked, CRI namespace), then
        turn the store's copies of layer blobs into hard links to the export's."""
        containerd = Containerd(self.home / "store" / "importer", self.home / "store" / "importer.sock", root=self.root)
        with containerd:
            for ref in refs:
                self.say(f"images: importing {ref} into the store")
            self._stream(containerd, refs, self.home / "store" / "import")
            shared = self._share_with_buildah(containerd)
            if shared:
                self.say(f"images: {shared / 2**30:.1f} GiB of unpacked layers shared with buildah's storage")
        for blob in (self.root / CONTENT).iterdir():
            source = self.export / "blobs" / "sha256" / blob.name
            if source.exists() and source.stat().st_ino != blob.stat().st_ino:
                tmp = blob.with_name(blob.name + ".link")
                os.link(source, tmp)
                os.replace(tmp, blob)
        listed = {**self._listed(), **{ref: time.strftime("%Y-%m-%dT%H:%M:%S") for ref in refs}}
        (self.home / "store" / "images.json").write_text(json.dumps(listed, indent=1, sort_keys=True) + "\n")

    def _stream(self, containerd: Containerd, refs: list[str], staging: Path) -> None:
        """`ctr images import` into a running containerd of the export's images `refs`, through an
        archive of them holding only the blobs that containerd's root lacks: a layer it holds
        already (torch's, under a new torchdag image) is not sent again."""
        index = json.loads((self.export / "index.json").read_text())
        chosen = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name")
                  in refs]
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "blobs" / "sha256").mkdir(parents=True)
        try:
            (staging / "oci-layout").write_text((self.export / "oci-layout").read_text())
            (staging / "index.json").write_text(json.dumps({**index, "manifests": chosen}))
            held = containerd.root / CONTENT
            for digest in self._closure(chosen):
                hexdigest = digest.split(":", 1)[1]
                if not (held / hexdigest).exists():
                    os.link(self.export / "blobs" / "sha256" / hexdigest, staging / "blobs" / "sha256" / hexdigest)
            tar = subprocess.Popen(["tar", "-C", str(staging), "-cf", "-", "."], stdout=subprocess.PIPE)
            done = subprocess.run(["ctr", "--address", str(containerd.socket), "--namespace", "k8s.io", "images",
                                   "import", "--snapshotter", "overlayfs", "-"], stdin=tar.stdout,
                                  capture_output=True, text=True, timeout=3600)
            tar.wait()
            if done.returncode or tar.returncode:
                raise RuntimeError(f"ctr images import: {done.stderr.strip() or done.stdout.strip()}")
            present = set(containerd.ctr("images", "ls", "-q").stdout.split())
            absent = [ref for ref in refs if ref not in present]
            if absent:
                raise RuntimeError(f"ctr images import did not name {absent}; it made {sorted(present)}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def load_into(self, containerd: Containerd, names: dict[str, str]) -> None:
        """A running node's containerd gets the store's images it lacks (a checkout's changed
        trainer/ after the node started: only the new layers travel), then their names."""
        have = set(containerd.ctr("images", "ls", "-q").stdout.split())
        wanted = sorted(set(names.values()) - have)
        if wanted:
            with self.lock(exclusive=False):
                self._stream(containerd, wanted, containerd.home / "import")
        self.tag(containerd, names)

    def _closure(self, descriptors: list[dict]) -> set[str]:
        """The digests of these manifests (or indexes) and every blob they name."""
        found: set[str] = set()
        for descriptor in descriptors:
            found.add(descriptor["digest"])
            if descriptor["mediaType"].endswith(("manifest.v1+json", "manifest.v2+json", "index.v1+json",
                                                 "manifest.list.v2+json")):
                blob = self.export / "blobs" / "sha256" / descriptor["digest"].split(":", 1)[1]
                body = json.loads(blob.read_text())
                children = [*body.get("manifests", []), *([body["config"]] if "config" in body else []),
                            *body.get("layers", [])]
                found |= self._closure(children)
        return found

    def _share_with_buildah(self, containerd: Containerd) -> int:
        """Hard-link the store's unpacked layers to buildah's copies of the same layers: torch's
        4.6 GB unpacked once for both. A file is shared when its path, size, owner, mode, time
        and bytes are the same; both trees are committed layers, which nothing writes to again.
        Returns the bytes now shared."""
        layers_json = self.home / "buildah" / "root" / "overlay-layers" / "layers.json"
        if not layers_json.exists():
            return 0
        buildah = {layer["diff-digest"]: self.home / "buildah" / "root" / "overlay" / layer["id"] / "diff"
                   for layer in json.loads(layers_json.read_text()) if layer.get("diff-digest")}
        chains: dict[str, str] = {}  # chainID -> diffID, for every layer of every stored image
        listing = containerd.ctr("images", "ls").stdout.splitlines()[1:]
        for line in listing:
            manifest = json.loads(containerd.ctr("content", "get", line.split()[2]).stdout)
            if "config" not in manifest:
                continue
            config = json.loads(containerd.ctr("content", "get", manifest["config"]["digest"]).stdout)
            chain = ""
            for diff in config["rootfs"]["diff_ids"]:
                chain = diff if not chain else "sha256:" + hashlib.sha256(f"{chain} {diff}".encode()).hexdigest()
                chains[chain] = diff
        shared = 0
        for chain, diff in chains.items():
            if diff not in buildah or not buildah[diff].is_dir():
                continue
            view = f"torchdag-share-{os.getpid()}"
            made = containerd.ctr("snapshots", "--snapshotter", "overlayfs", "view", "--mounts", view, chain,
                                  check=False)
            if made.returncode:
                continue
            try:
                (mount,) = json.loads(made.stdout)  # overlay (lowerdir=top:...:bottom), or bind for one layer
                options = [o for o in mount.get("Options") or [] if o.startswith("lowerdir=")]
                top = options[0].split("=", 1)[1].split(":")[0] if options else mount["Source"]
                shared += _link_same_files(buildah[diff], Path(top))
            finally:
                containerd.ctr("snapshots", "--snapshotter", "overlayfs", "rm", view, check=False)
        return shared

    # -- a node's copy ------------------------------------------------------------------------
    def clone(self, dest: Path) -> None:
        """A node's containerd root: hard links to the store's files, copies of its databases."""
        if dest.exists():
            raise FileExistsError(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with self.lock(exclusive=False):
            done = subprocess.run(["cp", "-al", str(self.root), str(dest)], capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"cp -al {self.root} {dest}: {done.stderr.strip()}")
            for relative in MUTABLE:
                copy = dest / relative
                if copy.exists():
                    copy.unlink()
                    shutil.copy2(self.root / relative, copy)
        # Each containerd makes its own identity.
        (dest / "io.containerd.grpc.v1.introspection" / "uuid").unlink(missing_ok=True)

    @staticmethod
    def tag(containerd: Containerd, names: dict[str, str]) -> None:
        for public, ref in names.items():
            containerd.ctr("images", "tag", "--force", ref, public)


def _link_same_files(source: Path, target: Path) -> int:
    """Replace each regular file under `target` by a hard link to the same file under `source`
    when the two are alike in every way a container can see; the bytes so shared."""
    shared = 0
    for root, _, files in os.walk(target):
        for name in files:
            mine = Path(root) / name
            theirs = source / mine.relative_to(target)
            try:
                a, b = mine.lstat(), theirs.lstat()
            except OSError:
                continue
            if (not stat.S_ISREG(a.st_mode) or a.st_ino == b.st_ino or (a.st_size, a.st_mode, a.st_uid, a.st_gid,
                                                                       a.st_mtime_ns) !=
                    (b.st_size, b.st_mode, b.st_uid, b.st_gid, b.st_mtime_ns) or a.st_dev != b.st_dev):
                continue
            if os.listxattr(mine, follow_symlinks=False) != os.listxattr(theirs, follow_symlinks=False):
                continue
            if not filecmp.cmp(mine, theirs, shallow=False):
                continue
            tmp = mine.with_name(mine.name + ".torchdag-link")
            os.link(theirs, tmp)
            os.replace(tmp, mine)
            shared += a.st_size
    return shared
