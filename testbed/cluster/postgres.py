"""The database Argo's controller offloads node status to (persistence, nodeStatusOffLoad):
Debian's PostgreSQL 15 (`make cluster-up` installs it with apt-get when missing), one server
per cluster with its own data directory, listening on 127.0.0.1 only.

PostgreSQL refuses to run as root, so it runs as the package's `postgres` user, and its data
directory lies in a world-traversable place (/tmp), not in the cluster's directory, whose
parents may be private to root (pytest's). The directory's path is kept in the cluster's.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from torchdag.errors import TorchdagError

from . import procs
from .layout import Layout

PG_BIN = Path("/usr/lib/postgresql/15/bin")
POSTGRES = PG_BIN / "postgres"
USER = "postgres"  # the system user Debian's package makes
DATABASE = "postgres"
ROLE = "argo"  # the database role Argo's controller logs in as
# Argo's own settings for PostgreSQL (manifests/components/postgres/overlays/
# workflow-controller-configmap.yaml), without the archive: only node status is offloaded.
TABLE = "argo_workflows"
SECRET = "argo-postgres-config"


class PostgresError(TorchdagError):
    """PostgreSQL could not be set up (torchdag/errors.py prints it; exit status 1)."""


def installed() -> bool:
    return POSTGRES.is_file()


def _data_dir(layout: Layout) -> Path:
    return Path((layout.root / "postgres.dir").read_text().strip())


def _as_postgres(argv: list[str]) -> list[str]:
    # setpriv execs (runuser would stay as a parent): the pid file then names postgres itself.
    return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", "--", *argv]


def password(layout: Layout) -> str:
    return (layout.root / "postgres.password").read_text().strip()


def start(layout: Layout, port: int) -> None:
    """initdb once (role `argo` with a random password, scram-sha-256 over TCP), then the
    server on 127.0.0.1:port unless it runs; returns when it accepts connections."""
    if not installed():
        raise PostgresError(f"PostgreSQL 15 is not installed ({POSTGRES} is missing): `make cluster-up` installs "
                            "it (apt-get install postgresql-15)")
    if procs.running(layout, "postgres", POSTGRES) is not None:
        return
    marker = layout.root / "postgres.dir"
    if not marker.exists():
        data = Path(tempfile.mkdtemp(prefix="torchdag-postgres-"))
        account = pwd.getpwnam(USER)
        os.chown(data, account.pw_uid, account.pw_gid)
        secret = secrets.token_hex(16)
        pwfile = data / "pwfile"
        pwfile.write_text(secret + "\n")
        os.chown(pwfile, account.pw_uid, account.pw_gid)
        done = subprocess.run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(data / "db"), "-U", ROLE,
                                            f"--pwfile={pwfile}", "--auth=scram-sha-256", "--no-sync"]),
                              capture_output=True, text=True, cwd=data)
        pwfile.unlink()
        if done.returncode:
            raise PostgresError(f"initdb failed: {done.stderr.strip()[-500:]}")
        (layout.root / "postgres.password").write_text(secret + "\n")
        marker.write_text(f"{data}\n")
    data = _data_dir(layout)
    pid = procs.start(layout, "postgres", _as_postgres([
        str(POSTGRES), "-D", str(data / "db"), "-p", str(port), "-k", str(data),
        "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]))
    deadline = time.monotonic() + 60
    while subprocess.run([str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                         capture_output=True).returncode:
        # Alive by pid, not procs.running: until setpriv has exec'd postgres (slow on a loaded
        # machine), the process is setpriv, which running() would take for a stale pid file.
        if not procs.alive(pid) or time.monotonic() > deadline:
            raise PostgresError(f"PostgreSQL did not start; see {layout.log('postgres')}")
        time.sleep(0.3)


def stop(layout: Layout) -> str:
    """Stop the server and remove its data directory: what procs.stop says ("" if not running)."""
    how = procs.stop(layout, "postgres", POSTGRES, grace=10.0)
    marker = layout.root / "postgres.dir"
    if marker.exists():
        shutil.rmtree(_data_dir(layout), ignore_errors=True)
    return how


def persistence(port: int) -> str:
    """The controller configmap's `persistence` key: node status offloaded to this server."""
    return (f"nodeStatusOffLoad: true\narchive: false\npostgresql:\n  host: 127.0.0.1\n  port: {port}\n"
            f"  database: {DATABASE}\n  tableName: {TABLE}\n"
            f"  userNameSecret: {{name: {SECRET}, key: username}}\n"
            f"  passwordSecret: {{name: {SECRET}, key: password}}\n")
