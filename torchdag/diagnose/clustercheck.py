"""`torchdag check FILE --cluster`: whether the live cluster can run the job, read and never
changed. One line per finding (`ok`, `warning` or `error`); exit 1 when an error says the job
cannot run. What it looks at (clustercheck.yaml names the objects and words the findings):
Argo's Workflow CRD, full or minimal, and whether the DAG fits its caps; the controller's node
status offload when the job needs it; each named host's Node (Ready, not cordoned, allocatable
accelerators, taints, nodeSelector labels); the gang scheduler's CRDs and Deployment; the
controller's resourceRateLimit and parallelism for a large job; the pods' ServiceAccount's
rights for the features the job uses (SubjectAccessReview, else SelfSubjectAccessReview as
the ServiceAccount). A finding it may not read (403) is a warning that says so."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import yaml

from .. import pipeline
from ..catalog import catalog, fill
from ..rbac import roles
from ..render import check_documents, json_size, status_budget
from .cluster import Cluster, ClusterUnusable, _explain
from .views import HOST_LABEL

FILE = Path(__file__).with_name("clustercheck.yaml")
EXTENDED = ("cpu", "memory", "ephemeral-storage", "pods")  # not accelerators: the node check skips them


@functools.lru_cache(maxsize=None)
def facts() -> dict:
    return yaml.safe_load(FILE.read_text(encoding="utf-8"))


class Forbidden(Exception):
    """A read the kubeconfig's user may not make: the finding is a warning, not the end."""


class Reader:
    """GET and POST of plain JSON through the official client's transport."""

    def __init__(self, cluster: Cluster):
        self.cluster, self.client = cluster, cluster.api

    def call(self, method: str, path: str, body: dict | None = None, query: dict | None = None,
             headers: dict | None = None) -> dict | None:
        """The answer; None for 404; Forbidden for 403; anything else is ClusterUnusable (exit 2)."""
        from kubernetes.client.exceptions import ApiException

        heads = {"Accept": "application/json", **({"Content-Type": "application/json"} if body else {}),
                 **(headers or {})}
        try:
            _, url, heads, data, _ = self.client.param_serialize(method, path, query_params=list((query or {}).items()),
                                                                 header_params=heads, body=body,
                                                                 auth_settings=["BearerToken"])
            resp = self.client.call_api(method, url, heads, data, _request_timeout=self.cluster.timeout)
            text = resp.read()
            if resp.status == 404:
                return None
            if not 200 <= resp.status <= 299:
                raise ApiException(status=resp.status, reason=resp.reason, http_resp=resp)
            return json.loads(text)
        except ApiException as err:
            if err.status == 403:
                raise Forbidden(json.loads(err.body or "{}").get("message") or err.reason) from None
            raise _explain(err, path, self.cluster.namespace, self.client.configuration.host) from None
        except Exception as err:  # noqa: BLE001 -- a connection failure: one line, exit 2
            raise _explain(err, path, self.cluster.namespace, self.client.configuration.host) from None

    def crd(self, name: str) -> dict | None:
        return self.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")

    def nodes(self) -> list[dict]:
        found, more = [], ""
        while True:
            page = self.call("GET", "/api/v1/nodes", query={"limit": 500, **({"continue": more} if more else {})})
            found += page.get("items") or []
            more = (page.get("metadata") or {}).get("continue")
            if not more:
                return found


def say(finding: str, **fields) -> str:
    return fill(facts()["say"][finding], fields)


class Check:
    def __init__(self, rendered: pipeline.Rendered, reader: Reader, argo_namespace: str):
        self.rendered, self.plan, self.reader = rendered, rendered.plan, reader
        self.job, self.argo = rendered.plan.typed.job, argo_namespace
        self.findings: list[tuple[str, str]] = []
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        self.workflow = next(d for d in yaml.load_all(rendered.text, Loader=loader) if d and "spec" in d)

    def add(self, level: str, line: str) -> None:
        self.findings.append((level, line))

    def guarded(self, what: str, step) -> None:
        try:
            step()
        except Forbidden as err:
            self.add("warning", say("forbidden", what=what, who="this kubeconfig's user", error=err))

    # -- Argo -------------------------------------------------------------------------------
    def crds(self) -> None:
        kind = self.job.kind
        name = facts()["workflowCrd"][kind]
        crd = self.reader.crd(name)
        if crd is None:
            self.add("error", say("crd-missing", crd=name))
            return
        version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
        spec = (((version.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties") or {}).get("spec") or {}
        templates = (spec.get("properties") or {}).get("templates") or {}
        if "maxItems" not in templates:
            self.add("ok", say("crd-minimal", crd=name))
            return
        tasks = (((templates.get("items") or {}).get("properties") or {}).get("dag") or {}).get("properties") or {}
        cap_tasks = (tasks.get("tasks") or {}).get("maxItems")
        have = self.workflow["spec"]["templates"]
        most = max((len((t.get("dag") or {}).get("tasks") or []) for t in have), default=0)
        fits = len(have) <= templates["maxItems"] and (cap_tasks is None or most <= cap_tasks)
        self.add("ok" if fits else "error", say("crd-full", crd=name, templates=templates["maxItems"], tasks=cap_tasks,
                                                kind=kind, have_templates=len(have), have_tasks=most))

    def controller_config(self) -> dict | None:
        """The controller's configmap as Argo reads it (config/controller.go parseConfigMap: one
        `config` key, or each key a field)."""
        name = facts()["controllerConfigMap"]
        found = self.reader.call("GET", f"/api/v1/namespaces/{self.argo}/configmaps/{name}")
        if found is None:
            return None
        data = found.get("data") or {}
        parsed = yaml.safe_load(data["config"]) if "config" in data else {k: yaml.safe_load(v) for k, v in data.items()}
        return parsed or {}

    def controller(self) -> None:
        where = f"{self.argo}/{facts()['controllerConfigMap']}"
        config = self.controller_config()
        if config is None:
            self.add("warning", f"no ConfigMap {where}: name the controller's namespace with --argo-namespace")
            return
        (document,) = check_documents(self.rendered.text)
        limit = catalog()["argoStatus"]["maxBytes"]
        total = json_size(document) + status_budget(self.plan, offloaded=False)[1]
        on = bool((config.get("persistence") or {}).get("nodeStatusOffLoad"))
        if total > limit:
            self.add("ok" if on else "error", say("offload-needed-on" if on else "offload-needed-off", limit=limit,
                                                  configmap=where))
        else:
            self.add("ok", say("offload-not-needed", bytes=total, limit=limit))
        count = self.plan.typed.job.nnodes
        if count > facts()["largeJob"]:
            rate = config.get("resourceRateLimit") or {}
            if rate.get("limit"):
                self.add("ok", say("rate-set", count=count, limit=rate["limit"], seconds=round(count / rate["limit"])))
            else:
                self.add("warning", say("rate-none", count=count, configmap=where, large=facts()["largeJob"],
                                        recommended=facts()["recommendedRateLimit"]))
        for key in ("parallelism", "namespaceParallelism"):
            if config.get(key):
                self.add("warning", say("parallelism", value=config[key], key=key, configmap=where))

    # -- hosts ------------------------------------------------------------------------------
    def hosts(self) -> None:
        by_host = {}
        for node in self.reader.nodes():
            meta = node["metadata"]
            by_host.setdefault((meta.get("labels") or {}).get(HOST_LABEL, meta["name"]), node)
        tolerations, selector = self.job.tolerations, self.job.node_selector
        found: dict[str, list[str]] = {}
        limits = {}
        for shape in self.plan.typed.shapes:
            given = shape.resources
            limits[shape.name] = {**given.limits, **({given.accelerator_resource: str(given.accelerator_count)}
                                                    if given.accelerator_resource else {})}
        for planned in self.plan.typed.nodes:
            node = by_host.get(planned.host)
            fields = {"host": planned.host, "rank": planned.rank}
            for key, extra in self.host_problems(node, limits[planned.shape], tolerations, selector):
                found.setdefault(key, []).append(say(key, **fields, **extra))
        for lines in found.values():
            for line in lines[:10]:
                self.add("error", line)
            if len(lines) > 10:
                self.add("error", say("host-more", count=len(lines) - 10))
        if not found:
            self.add("ok", say("hosts-ok", count=len(self.plan.typed.nodes)))

    @staticmethod
    def host_problems(node: dict | None, limits: dict[str, str], tolerations, selector: dict):
        if node is None:
            yield "host-missing", {}
            return
        name, status, spec = node["metadata"]["name"], node.get("status") or {}, node.get("spec") or {}
        labels = node["metadata"].get("labels") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        if ready.get("status") != "True":
            yield "host-not-ready", {"node": name, "reason": ready.get("reason") or "no Ready condition"}
        if spec.get("unschedulable"):
            yield "host-cordoned", {"node": name}
        allocatable = status.get("allocatable") or {}
        for resource, want in limits.items():
            if resource not in EXTENDED and "/" in resource and _count(allocatable.get(resource, "0")) < _count(want):
                yield "host-short", {"node": name, "resource": resource, "want": want,
                                     "have": allocatable.get(resource, "0")}
        for taint in spec.get("taints") or []:
            if (taint.get("effect") in ("NoSchedule", "NoExecute") and taint["key"] not in facts()["taintsOfConditions"]
                    and not any(_tolerates(t, taint) for t in tolerations)):
                text = f"{taint['key']}={taint.get('value', '')}:{taint['effect']}"
                yield "host-taint", {"node": name, "taint": text}
        for key, value in selector.items():
            if labels.get(key) != value:
                yield "host-label", {"node": name, "label": f"{key}={value}"}

    # -- gang, rights -----------------------------------------------------------------------
    def gang(self) -> None:
        if self.plan.typed.gang is None:
            return
        kind = self.plan.typed.gang.kind
        entry = facts()["gangs"][kind]
        missing = [crd for crd in entry["crds"] if self.reader.crd(crd) is None]
        for crd in missing:
            self.add("error", say("gang-crd", gang=kind, crd=crd))
        namespace, name = entry["scheduler"].split("/")
        deployment = self.reader.call("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        ready = ((deployment or {}).get("status") or {}).get("readyReplicas") or 0
        if not ready:
            state = "not found" if deployment is None else "no ready replica"
            self.add("error", say("gang-scheduler", gang=kind, deployment=entry["scheduler"], state=state))
        elif not missing:
            self.add("ok", say("gang-ok", gang=kind, deployment=entry["scheduler"]))

    def rights(self) -> None:
        """Each verb of the Roles the job's features need (catalogue `rbac`, docs/rbac/), for the pods' account."""
        namespace, rbac = self.reader.cluster.namespace, catalog()["rbac"]
        account = self.job.service_account or "default"
        checked, missing = 0, False
        for role in roles(self.plan):
            grant = rbac["grants"][role]
            for rule in grant["rules"]:
                for group, resource in ((g, r) for g in rule["apiGroups"] for r in rule["resources"]):
                    checked += len(rule["verbs"])
                    refused = [verb for verb in rule["verbs"] if not self.allowed(namespace, account, verb, group,
                                                                                 resource)]
                    if refused:
                        missing = True
                        level = "warning" if resource in facts()["rightsWarnOnly"] else "error"
                        self.add(level, say("right-missing", namespace=namespace, account=account, why=grant["why"],
                                            verbs=", ".join(refused), resource=resource, group=f".{group}" if group
                                            else "", file=f"{rbac['folder']}/{role}.yaml"))
        if not missing:
            self.add("ok", say("rights-ok", namespace=namespace, account=account, count=checked))

    def allowed(self, namespace: str, account: str, verb: str, group: str, resource: str) -> bool:
        attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
        user = f"system:serviceaccount:{namespace}:{account}"
        review = {"apiVersion": "authorization.k8s.io/v1", "spec": {"resourceAttributes": attributes}}
        try:
            spec = {**review["spec"], "user": user, "groups": ["system:serviceaccounts",
                                                              f"system:serviceaccounts:{namespace}",
                                                              "system:authenticated"]}
            answer = self.reader.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                      {**review, "kind": "SubjectAccessReview", "spec": spec})
        except Forbidden:  # no right to ask about others: ask as the ServiceAccount (impersonation)
            answer = self.reader.call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                                      {**review, "kind": "SelfSubjectAccessReview"},
                                      headers={"Impersonate-User": user})
        return bool((answer.get("status") or {}).get("allowed"))

    def run(self) -> list[tuple[str, str]]:
        self.guarded(f"Argo's CRD {facts()['workflowCrd'][self.job.kind]}", self.crds)
        self.guarded(f"the controller's settings ({self.argo}/{facts()['controllerConfigMap']})", self.controller)
        self.guarded("the hosts (Nodes)", self.hosts)
        self.guarded("the gang scheduler", self.gang)
        self.guarded("the ServiceAccount's rights", self.rights)
        return self.findings


def _count(quantity) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' ToleratesTaint: the effect (empty: any), the key (empty with Exists: any), the value."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return str(toleration.get("value", "")) == str(taint.get("value", ""))


def check_cluster(args, prog: str) -> int:
    """Validate and render as `check` does (a bad file: exit 2), then read the cluster."""
    rendered = pipeline.run(args.files)
    ClusterUnusable.prog = prog
    cluster = Cluster(args.kubeconfig, rendered.plan.typed.job.namespace or args.namespace, args.context)
    findings = Check(rendered, Reader(cluster), args.argo_namespace or facts()["argoNamespace"]).run()
    for level, line in findings:
        print(f"{level}: {line}")
    return 1 if any(level == "error" for level, _ in findings) else 0
