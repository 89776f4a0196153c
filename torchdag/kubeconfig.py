"""Which cluster a command talks to, found as kubectl finds it, through the official
`kubernetes` client's own kubeconfig loader (kubernetes.config.kube_config: its merger and
loader, with exec and auth-provider plugins), not a parser of ours:

- `--kubeconfig FILE`: that one file, which must exist;
- else `$KUBECONFIG`: a list of files (`:`-separated), merged as kubectl merges them (the
  first file that names a cluster, user or context wins; files that do not exist are
  skipped; current-context is the first file's that sets one);
- else `~/.kube/config`;
- else, in a pod, its ServiceAccount (in-cluster config); `--context` picks a context.

Whatever makes it unusable is one line naming the file and what is wrong (`ClusterUnusable`,
exit 2): a directory, not YAML, not a mapping, bad CA or client certificate data, a server
that is not an http(s) URL, a credential plugin that is missing or fails (which the client
would only log, as a stray `ERROR:root:` line). `torchdag status/logs/diagnose` use it
(torchdag/diagnose/cluster.py), and so may any command that reads the cluster.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from .errors import TorchdagError

CLUSTER_INSTALL = "pip install '.[cluster]'"  # the wheel's extra, installed from a checkout of torchdag
INSTALL_HINT = f"{CLUSTER_INSTALL} in a checkout of torchdag (or pip install kubernetes)"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
AUTH_PROVIDERS = ("oidc", "gcp")  # the auth-provider names kubernetes.config.kube_config loads tokens for


class ClusterUnusable(TorchdagError):
    """One line for the user (no traceback); exit status 2."""

    exit_code = 2
    prog = "torchdag"

    def lines(self) -> list[str]:
        return [f"{self.prog}: error: {self}"]


@dataclass
class Connection:
    """A loaded client configuration: `settings` is a kubernetes.client.Configuration."""

    settings: object
    namespace: str | None  # the context's (or the pod's) namespace, None when it names none
    source: str  # what it came from, for messages: "kubeconfig a:b (context c)" or "in-cluster"

    def bearer_token(self) -> str | None:
        """The token the API server gets ("Bearer ..."), when the credentials are one."""
        settings = self.settings
        if settings.refresh_api_key_hook is not None:
            settings.refresh_api_key_hook(settings)
        return (settings.api_key or {}).get("BearerToken") or (settings.api_key or {}).get("authorization")


def kubernetes_client():
    """The `kubernetes` package, or one line saying how to install it."""
    try:
        import kubernetes  # imported here: `torchdag render` must not need it
    except ImportError:
        raise ClusterUnusable(f"this command needs the Kubernetes Python client: {INSTALL_HINT}") from None
    return kubernetes


def kubeconfig_files(kubeconfig: str | None) -> tuple[list[str], str]:
    """The files to merge, in order, and how they were chosen (for messages)."""
    if kubeconfig is not None:
        path = os.path.expanduser(kubeconfig)
        if not path:
            raise ClusterUnusable("--kubeconfig: empty file name")
        if not os.path.lexists(path):
            raise ClusterUnusable(f"kubeconfig {kubeconfig}: no such file")
        return [path], "--kubeconfig"
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        named = [os.path.expanduser(p) for p in listed.split(os.pathsep) if p]
        return [p for p in named if os.path.lexists(p)], "KUBECONFIG"
    default = os.path.expanduser("~/.kube/config")
    return ([default] if os.path.lexists(default) else []), "~/.kube/config"


def connect(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """The client configuration kubectl would use, or ClusterUnusable."""
    kubernetes_client()
    from kubernetes import client

    files, chosen_by = kubeconfig_files(kubeconfig)
    settings = client.Configuration()
    if not files:
        if context is not None:
            raise ClusterUnusable(f"--context {context}: no kubeconfig to take it from ({_none_found(chosen_by)})")
        if not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise ClusterUnusable(f"no cluster to talk to: {_none_found(chosen_by)}, and this is not a pod "
                                  "(pass --kubeconfig FILE or set KUBECONFIG)")
        return _in_cluster(settings)
    namespace, source, cluster_where = _from_files(files, context, settings)
    _check_settings(settings, cluster_where)
    settings.retries = 0  # an unreachable API server: one line, now (set before a pool is made)
    return Connection(settings, namespace, source)


def _none_found(chosen_by: str) -> str:
    if chosen_by == "KUBECONFIG":
        return f"none of the files KUBECONFIG names exists ({os.environ.get('KUBECONFIG')})"
    return "no ~/.kube/config"


def _in_cluster(settings) -> Connection:
    from kubernetes import config

    try:
        config.load_incluster_config(client_configuration=settings)
    except config.ConfigException as err:
        raise ClusterUnusable(f"in-cluster config (the pod's ServiceAccount): {err}") from None
    settings.retries = 0
    ns_file = SERVICE_ACCOUNT / "namespace"
    namespace = ns_file.read_text().strip() if ns_file.is_file() else None
    return Connection(settings, namespace or None, "in-cluster config")


def _from_files(files: list[str], context: str | None, settings) -> tuple[str | None, str, str]:
    """The chosen context's namespace, a description of the source, and the file that
    names the context's cluster (for what is wrong with the cluster's fields)."""
    from kubernetes.config import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

    for path in files:  # each file alone first, so that what is wrong names its file
        _readable(path)
    shown = os.pathsep.join(files)
    try:
        merger = KubeConfigMerger(shown)
    except Exception as err:  # noqa: BLE001 -- every file read alone above: what is left is the merge
        raise ClusterUnusable(f"kubeconfig {shown}: cannot merge these files: {err}") from None
    merged = merger.config.value
    contexts = {_name_of(c): c for c in merged.get("contexts") or []}
    # kubectl: the first file that sets current-context wins (the client's merger keeps the last)
    current = next((doc.get("current-context") for doc in (merger.config_files.get(p) or {} for p in merger.paths)
                    if doc.get("current-context")), None)
    name = context or current
    if not name:
        raise ClusterUnusable(f"kubeconfig {shown}: no current-context; pass --context "
                              f"({_choices(contexts)})")
    if name not in contexts:
        which = f"--context {name}" if context else f"current-context {name!r}"
        raise ClusterUnusable(f"kubeconfig {shown}: {which}: no such context ({_choices(contexts)})")
    source = f"kubeconfig {shown} (context {name})"
    ctx = getattr(contexts[name], "value", contexts[name]).get("context") or {}
    where = _path_of(contexts[name], shown)
    cluster_file = _path_of(_named(merged, "clusters", ctx.get("cluster")), where)
    user_file = _path_of(_named(merged, "users", ctx.get("user")), where)
    user = getattr(_named(merged, "users", ctx.get("user")), "value", None) or {}
    provider = ((user.get("user") or {}).get("auth-provider") or {}).get("name")
    if provider and provider not in AUTH_PROVIDERS:  # the client would send no credentials, silently
        raise ClusterUnusable(f"kubeconfig {user_file}: users[{ctx.get('user')}].user.auth-provider {provider!r} is "
                              f"not one the client runs ({', '.join(AUTH_PROVIDERS)}); kubectl dropped it too "
                              "(Kubernetes 1.26): use its exec credential plugin (e.g. kubelogin)")
    captured = _Captured()
    root = logging.getLogger()
    root.addHandler(captured)  # the client logs a failed credential plugin and goes on: say it instead
    try:
        loader = KubeConfigLoader(config_dict=merger.config, active_context=name, config_base_path=None,
                                  config_persister=merger.save_changes)
        loader.load_and_set(settings)
    except ConfigException as err:
        raise ClusterUnusable(f"kubeconfig {where}: context {name}: {_config_problem(err)}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as err:  # e.g. base64 that is not (binascii.Error)
        raise ClusterUnusable(f"kubeconfig {cluster_file if cluster_file == user_file else where}: "
                              f"context {name}: {_data_problem(err, ctx, merged)}") from None
    finally:
        root.removeHandler(captured)
    if captured.messages:
        user = ctx.get("user") or "?"
        raise ClusterUnusable(f"kubeconfig {user_file}: user {user}'s credential plugin failed: "
                              f"{_plugin_problem(captured.messages[0], merged, user)}")
    return (ctx.get("namespace") or None), source, f"kubeconfig {cluster_file}: cluster {ctx.get('cluster')}"


class _Captured(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _readable(path: str) -> None:
    """One file as the client reads it (KubeConfigMerger: open, yaml.safe_load, merge), or
    one line saying what is wrong with it."""
    import yaml
    from kubernetes.config import ConfigException
    from kubernetes.config.kube_config import KubeConfigMerger

    if os.path.isdir(path):
        raise ClusterUnusable(f"kubeconfig {path}: is a directory, not a file")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as err:
        raise ClusterUnusable(f"kubeconfig {path}: cannot read it: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ClusterUnusable(f"kubeconfig {path}: not a kubeconfig: not UTF-8 text (byte {err.start} is "
                              f"0x{raw[err.start]:02x}; a binary file?)") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ClusterUnusable(f"kubeconfig {path}: not valid YAML{where}: {problem}") from None
    if doc is None:
        raise ClusterUnusable(f"kubeconfig {path}: is empty")
    if not isinstance(doc, dict):
        raise ClusterUnusable(f"kubeconfig {path}: not a kubeconfig: the file is a YAML {_kind(doc)}, where "
                              "kubectl expects a mapping (apiVersion, kind: Config, clusters, users, contexts)")
    for section in ("clusters", "users", "contexts"):
        items = doc.get(section)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ClusterUnusable(f"kubeconfig {path}: {section}: a {_kind(items)}, where a list is expected")
        for index, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item.get("name"):
                raise ClusterUnusable(f"kubeconfig {path}: {section}[{index}]: an entry without a name "
                                      f"(each is a mapping with name and {section[:-1]})")
    try:
        KubeConfigMerger(path)  # the client's own reading of it
    except ConfigException as err:
        raise ClusterUnusable(f"kubeconfig {path}: {_config_problem(err)}") from None
    except Exception as err:  # noqa: BLE001 -- whatever else the client trips on, as one line naming the file
        raise ClusterUnusable(f"kubeconfig {path}: not a kubeconfig the client can read: "
                              f"{type(err).__name__}: {err}") from None


def _kind(value) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean", dict: "mapping"}.get(
        type(value), type(value).__name__)


def _name_of(node) -> str:
    value = getattr(node, "value", node)
    return value.get("name", "") if isinstance(value, dict) else ""


def _named(merged: dict, section: str, name: str | None):
    return next((item for item in merged.get(section) or [] if _name_of(item) == name), None)


def _path_of(node, fallback: str) -> str:
    return getattr(node, "path", None) or fallback


def _choices(contexts: dict) -> str:
    return "its contexts: " + ", ".join(sorted(contexts)) if contexts else "it has no contexts"


def _config_problem(err: Exception) -> str:
    text = " ".join(str(err).split())
    for prefix in ("Invalid kube-config file. ", "Invalid kube-config. "):
        text = text.removeprefix(prefix)
    return text


def _data_problem(err: Exception, ctx: dict, merged: dict) -> str:
    """What a base64 field or the like the client could not decode was."""
    text = " ".join(str(err).split())
    cluster = getattr(_named(merged, "clusters", ctx.get("cluster")), "value", None) or {}
    user = getattr(_named(merged, "users", ctx.get("user")), "value", None) or {}
    fields = [f"clusters[{ctx.get('cluster')}].{k}" for k in (cluster.get("cluster") or {}) if k.endswith("-data")]
    fields += [f"users[{ctx.get('user')}].{k}" for k in (user.get("user") or {}) if k.endswith("-data")]
    if "base64" in text.lower() or "padding" in text.lower():
        return f"{' or '.join(fields) or 'a *-data field'} is not base64 ({text})"
    return f"the client cannot use it: {type(err).__name__}: {text}"


def _plugin_problem(message: str, merged: dict, user: str) -> str:
    found = getattr(_named(merged, "users", user), "value", None) or {}
    command = ((found.get("user") or {}).get("exec") or {}).get("command")
    text = " ".join(message.split())
    if command and ("No such file or directory" in text or "Errno 2" in text):
        return (f"its exec command {command!r} is not installed or not on PATH (users[{user}].user.exec.command; "
                "kubectl fails the same way)")
    if command and ("Permission denied" in text or "Errno 13" in text):
        return f"its exec command {command!r} is not executable ({text})"
    return text


def _check_settings(settings, source: str) -> None:
    """What the client would only find out at the first request: a server that is not an
    http(s) URL, CA or client certificate data that are not PEM."""
    from urllib3.util import parse_url

    host = settings.host or ""
    try:
        url = parse_url(host)
    except ValueError as err:
        raise ClusterUnusable(f"{source}: server {host!r} is not a URL ({err})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ClusterUnusable(f"{source}: server {host!r} is not an http(s) URL with a host "
                              "(e.g. https://10.0.0.1:6443)")
    if not host.startswith("https"):
        return
    try:
        context = ssl.create_default_context(cafile=settings.ssl_ca_cert) if settings.ssl_ca_cert else None
    except (ssl.SSLError, OSError, ValueError) as err:
        raise ClusterUnusable(f"{source}: certificate-authority(-data) is not a PEM CA certificate "
                              f"({_ssl_reason(err)})") from None
    if settings.cert_file or settings.key_file:
        try:
            (context or ssl.create_default_context()).load_cert_chain(settings.cert_file, settings.key_file)
        except (ssl.SSLError, OSError, ValueError, TypeError) as err:
            raise ClusterUnusable(f"{source}: client-certificate(-data) and client-key(-data) are not a PEM "
                                  f"certificate and its key ({_ssl_reason(err)})") from None


def _ssl_reason(err: Exception) -> str:
    return getattr(err, "reason", None) or getattr(err, "strerror", None) or " ".join(str(err).split())
