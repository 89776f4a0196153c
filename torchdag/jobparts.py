"""The job-wide parts of the plan (torchdag/plan.py): the pod volumes, the containers'
securityContext, whole-job restarts (Argo's retryStrategy) and gang scheduling. Each
takes the valid, default-filled values and returns what the templates print."""

from __future__ import annotations

from .catalog import catalog, fill, items, resource_name
from .yamlout import dollar_escape, quantity, quote


def volumes(values: dict, mounts_driver: bool) -> list[dict]:
    out: list[dict] = []
    if values.get("shmSize"):
        out.append({"name": catalog()["shmVolume"]["name"],
                    "emptyDir": {"medium": "Memory", "sizeLimit": quantity(values["shmSize"])}})
    if mounts_driver:
        driver = values["ascend"]["driverPath"].rstrip("/")  # the schema's default, or the user's
        for mount in catalog()["ascendMounts"]:
            out.append({"name": mount["name"],
                        "hostPath": {"path": fill(mount["hostPath"], {"driver": driver}), "type": mount["type"]}})
    for volume in values.get("volumes") or []:
        if volume.get("hostPath"):
            host = {"path": volume["hostPath"]["path"]}
            if volume["hostPath"].get("type"):
                host["type"] = volume["hostPath"]["type"]
            out.append({"name": volume["name"], "hostPath": host})
        else:
            claim = {"claimName": volume["persistentVolumeClaim"]["claimName"]}
            if volume.get("readOnly"):
                claim["readOnly"] = True
            out.append({"name": volume["name"], "persistentVolumeClaim": claim})
    return out


def container_security(values: dict) -> dict:
    """The containers' securityContext in print order; empty parts left out."""
    wanted = values.get("containerSecurity") or {}
    out: dict = {"allowPrivilegeEscalation": bool(wanted.get("allowPrivilegeEscalation"))}
    capabilities = {}
    if wanted.get("dropAllCapabilities"):
        capabilities["drop"] = ["ALL"]
    if wanted.get("addCapabilities"):
        capabilities["add"] = list(wanted["addCapabilities"])
    if capabilities:
        out["capabilities"] = capabilities
    if wanted.get("seccompProfile"):
        out["seccompProfile"] = wanted["seccompProfile"]
    return out


def retry_strategy(values: dict) -> dict | None:
    """Whole-job restarts: Argo retries the `train` DAG as a whole when any task fails or
    its pod is lost (retryPolicy Always covers both), so every node starts again."""
    policy = values.get("failurePolicy") or {}
    limit = int(policy.get("maxRestarts") or 0)
    if not limit:
        return None
    backoff = {"duration": f"{int(policy['backoffSeconds'])}s", "factor": "2"}
    if not (values.get("timeouts") or {}).get("workflowDeadline"):
        # No deadline bounds the doubling waits: Argo's cap does (catalogue restartBackoffCapSeconds).
        backoff["cap"] = f"{max(int(catalog()['restartBackoffCapSeconds']), int(policy['backoffSeconds']))}s"
    return {"limit": str(limit), "retryPolicy": "Always", "backoff": backoff}


# The gang's name: one per Workflow run (a retried DAG keeps it).
GANG_NAME = "{{workflow.name}}"


def gang(values: dict, nodes: list) -> dict | None:
    """What every training pod carries to join the job's one gang, and the PodGroup
    manifest (lines of YAML) the Workflow creates before the pods, if the scheduler has one
    (catalogue `gangs`)."""
    scheduling = values["scheduling"]
    if scheduling["gang"] == "none":
        return None
    entry = catalog()["gangs"][scheduling["gang"]]
    fields = {"group": GANG_NAME, "count": str(len(nodes)), "queue": scheduling["queue"] or ""}
    watch = [*scheduling["watchCommand"], f"--workflow={GANG_NAME}", "--namespace={{workflow.namespace}}",
             f"--pods={len(nodes)}", f"--timeout={int(scheduling['timeout'])}"]
    gang = {
        "kind": scheduling["gang"],
        "scheduler_name": scheduling["schedulerName"] or entry["schedulerName"],
        "labels": [(key, fill(value, fields)) for key, value in sorted(entry["podLabels"].items())],
        "annotations": [(key, fill(value, fields)) for key, value in sorted(entry["podAnnotations"].items())],
        "watch": [dollar_escape(word) for word in watch],
        "manifest": None,
        "role_annotation": entry.get("roleAnnotation"),  # printed with each template's name
    }
    group = entry["podGroup"]
    if group:
        # The watch deletes it when it stops the job: it lives as long as the Workflow and
        # may hold queue capacity otherwise.
        gang["watch"].append(f"--podgroup={group['apiVersion']}/{group['resource']}/{GANG_NAME}")
        priority = values["workflow"]["priorityClassName"]
        facts = {"count": str(len(nodes)), "timeout": str(int(scheduling["timeout"])),
                 "queue": quote(scheduling["queue"]) if scheduling["queue"] else "",
                 "priorityClassName": quote(priority) if priority else ""}
        spec = [f"{key}: {value}" for key, value in items(group["spec"], facts)]
        totals: dict[str, int] = {}
        for node in nodes if group["minResources"] else []:
            name = resource_name(node.accelerator, values)
            if name:
                totals[name] = totals.get(name, 0) + node.devices
        if totals:
            spec += ["minResources:",
                     *[f"  {quote(name)}: {quote(str(count))}" for name, count in sorted(totals.items())]]
        gang["manifest"] = [f"apiVersion: {quote(group['apiVersion'])}", 'kind: "PodGroup"', "metadata:",
                            f"  name: {quote(GANG_NAME)}", "spec:", *[f"  {line}" for line in spec]]
    return gang
