"""Prepare phase: a rendered Workflow -> the local tasks to run, one per DAG task.

Each task's container command + args and env go through Argo's `{{...}}` substitution
(task arguments in the DAG's scope, `{{retries}}` there when the DAG has a
retryStrategy; then the template's inputs), Kubernetes' `$(VAR)` expansion, and the
local mappings of mapping.py. A Job keeps what is needed to prepare the tasks again for
restart n (`{{retries}}` = n) under the same workflow name.
"""

from __future__ import annotations

import os
import random
import re
import string
from dataclasses import dataclass, field
from typing import Callable

from .errors import EXIT_INVALID, LocalRunError
from .expand import UnresolvedTag, argo_substitute, kube_command, kube_container_env
from .mapping import device_problems, localize, missing_scripts
from .retry import RetryPolicy, retry_policy

# What a pod would not inherit from this shell: a stray GLOO_SOCKET_IFNAME or RANK here
# would silently change what the rendered Workflow means.
_NOT_INHERITED = re.compile(
    r"^(TORCHDAG_|GLOO_|NCCL_|HCCL_|TP_SOCKET_|TORCHELASTIC_|PET_|MASTER_ADDR$|MASTER_PORT$|RANK$|"
    r"WORLD_SIZE$|LOCAL_RANK$|LOCAL_WORLD_SIZE$|GROUP_RANK$|ROLE_RANK$|NODE_RANK$|ASCEND_|CUDA_VISIBLE_DEVICES$|TORCH_DEVICE_BACKEND_AUTOLOAD$)"
)


@dataclass
class Options:
    maps: list[tuple[str, str]] = field(default_factory=list)  # user --map, before DEFAULT_MAPS
    address: str | None = "127.0.0.1"  # None: keep the rendered addresses (netns tests)
    nic: str | None = "lo"  # None: keep the rendered NIC names
    port: int | None = None  # rendezvous port override
    cpu: bool = False  # run GPU/NPU nodes on CPU instead of refusing them
    only: list[str] = field(default_factory=list)  # run only these tasks
    exec_prefix: Callable[["LocalTask"], list[str]] | None = None  # e.g. `ip netns exec NS ...`
    workflow_name: str | None = None  # default: metadata.name, or generateName + 5 random characters
    checkout_map: bool = True  # DEFAULT_MAPS last; False: a pod has only what its image and Workflow give it


@dataclass
class LocalTask:
    name: str  # the DAG task, e.g. node-0
    template: str
    params: dict[str, str]
    argv: list[str]  # command + args, as the container would exec them (after mapping)
    env: list[tuple[str, str]]  # the container's env list (after substitution, expansion, mapping)
    cwd: str
    device: str  # cpu | cuda | npu, what the node computes on
    notes: list[str] = field(default_factory=list)  # what was changed for running here
    prefix: list[str] = field(default_factory=list)

    def process_env(self, base: dict[str, str], bin_dir: str) -> dict[str, str]:
        return process_env(base, bin_dir, self.env)


def process_env(base: dict[str, str], bin_dir: str, env: list[tuple[str, str]]) -> dict[str, str]:
    """A container's process environment here: this shell's, less what a pod would not
    inherit, bin_dir (the venv: torchrun, python) first on PATH, then the container's env."""
    out = {k: v for k, v in base.items() if not _NOT_INHERITED.match(k)}
    out["PATH"] = os.pathsep.join([bin_dir] + [p for p in base.get("PATH", "").split(os.pathsep) if p and p != bin_dir])
    out.update(env)
    return out


@dataclass
class Job:
    """A prepared Workflow: its tasks for the first attempt, and for any restart."""

    doc: dict
    options: Options
    workflow: str
    tasks: list[LocalTask]  # restart 0
    retry: RetryPolicy | None = None  # the entrypoint DAG's retryStrategy
    deadline: float | None = None  # spec.activeDeadlineSeconds
    ignored: list[str] = field(default_factory=list)  # DAG tasks not run here, one note each

    def tasks_for(self, restart: int) -> list[LocalTask]:
        """The tasks of restart n (`{{retries}}` = n); restart 0 is self.tasks."""
        if restart == 0:
            return self.tasks
        return prepare_tasks(self.doc, self.options, workflow_scope(self.doc, self.options, self.workflow), restart)


def workflow_scope(doc: dict, options: Options, name: str | None = None) -> dict[str, str]:
    meta = doc.get("metadata") or {}
    name = name or options.workflow_name
    if not name and doc.get("kind") != "WorkflowTemplate":
        name = meta.get("name")
    if not name:  # Argo appends five random characters to generateName (`argo submit --from`: the template's name)
        stem = meta.get("generateName") or (f"{meta['name']}-" if meta.get("name") else "workflow-")
        name = stem + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
    scope = {
        "workflow.name": name,
        "workflow.namespace": meta.get("namespace") or "default",
        "workflow.serviceAccountName": (doc.get("spec") or {}).get("serviceAccountName") or "default",
        "workflow.uid": "local-" + name,
    }
    for param in ((doc.get("spec") or {}).get("arguments") or {}).get("parameters") or []:
        if "value" in param:
            scope[f"workflow.parameters.{param['name']}"] = str(param["value"])
    return scope


def _dag(doc: dict) -> tuple[dict, dict, dict[str, dict]]:
    spec = doc.get("spec") or {}
    templates = {t["name"]: t for t in spec.get("templates") or []}
    entry = templates.get(spec.get("entrypoint"))
    if not entry or "dag" not in entry:
        raise LocalRunError(f"entrypoint {spec.get('entrypoint')!r} is not a DAG template; "
                            "localrun runs torchdag's DAG only")
    return entry, entry["dag"], templates


def _prepare_task(task: dict, template: dict, dag_scope: dict[str, str], options: Options) -> LocalTask:
    name = task["name"]
    if "container" not in template:
        raise LocalRunError(f"{name}: template {template['name']!r} has no container; "
                            "localrun runs container templates only")
    container = template["container"]
    notes: list[str] = []
    env_entries = []
    for entry in container.get("env") or []:
        field = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if "value" in entry:
            env_entries.append(entry)
        elif field == "status.podIP":  # the pod network's HCCL_IF_IP: this machine stands in for the pod
            notes.append(f"env {entry['name']}: the pod's IP (status.podIP) -> 127.0.0.1")
            env_entries.append({"name": entry["name"], "value": "127.0.0.1"})
        else:
            raise LocalRunError(f"{name}: env {entry.get('name')}: valueFrom cannot be resolved outside Kubernetes")

    # Argo: task arguments are resolved in the DAG's scope, then fill the inputs;
    # the container sees the workflow's variables and its inputs (not {{retries}}).
    declared = (template.get("inputs") or {}).get("parameters") or []
    params = {p["name"]: str(p["value"]) for p in declared if "value" in p}
    try:
        for p in (task.get("arguments") or {}).get("parameters") or []:
            params[p["name"]] = argo_substitute(str(p.get("value", "")), dag_scope)
        scope = {k: v for k, v in dag_scope.items() if k.startswith("workflow.")}
        scope.update({f"inputs.parameters.{k}": v for k, v in params.items()})
        command = [argo_substitute(str(w), scope) for w in container.get("command") or []]
        args = [argo_substitute(str(w), scope) for w in container.get("args") or []]
        raw_env = [(e["name"], argo_substitute(str(e["value"]), scope)) for e in env_entries]
        working_dir = argo_substitute(str(container["workingDir"]), scope) if container.get("workingDir") else None
    except UnresolvedTag as err:
        raise LocalRunError(f"{name}: {err} (Argo would fail this workflow)", EXIT_INVALID) from None

    # Kubernetes: env values see earlier entries; command and args see the whole env.
    env_list = kube_container_env(raw_env)
    command, args = kube_command(command, dict(env_list)), kube_command(args, dict(env_list))

    if params.get("host"):
        notes.append(f"node affinity kubernetes.io/hostname={params['host']} ignored: runs on this machine")
    mapped, env_out, cwd, device = localize(command, args, env_list, working_dir, container, options, notes)
    local = LocalTask(name, template["name"], params, mapped, env_out, cwd, device, notes)
    if options.exec_prefix is not None:
        local.prefix = list(options.exec_prefix(local))
    return local


def prepare_tasks(doc: dict, options: Options, scope: dict[str, str], restart: int) -> list[LocalTask]:
    entry, dag, templates = _dag(doc)
    dag_scope = dict(scope)
    if entry.get("retryStrategy"):  # Argo puts the retry count in the retried template's scope
        dag_scope["retries"] = str(restart)
    tasks = dag.get("tasks") or []
    names = [t["name"] for t in tasks]
    unknown = [n for n in options.only if n not in names]
    if unknown:
        raise LocalRunError(f"--only {', '.join(unknown)}: no such task (tasks: {', '.join(names)})", EXIT_INVALID)
    skipped = {t["name"] for t in tasks if gang_task(t, templates)}
    out = []
    for task in tasks:
        if task["name"] in skipped:
            continue
        depends = set(task.get("dependencies") or []) | set((task.get("depends") or "").split(" && ")) - {""}
        if depends - skipped:
            raise LocalRunError(f"{task['name']}: has dependencies; localrun starts every task at once, "
                                "as torchdag renders them")
        if options.only and task["name"] not in options.only:
            continue
        if task.get("template") not in templates:
            raise LocalRunError(f"{task['name']}: template {task.get('template')!r} is not in the Workflow",
                                EXIT_INVALID)
        for item_task, item_scope in _items(task):
            out.append(_prepare_task(item_task, templates[task["template"]], {**dag_scope, **item_scope}, options))
    return out


def _items(task: dict) -> list[tuple[dict, dict[str, str]]]:
    """A task fanned out with withItems (torchdag's loop tasks past 200 nodes) as Argo expands
    it: one task per item, named `task(index:key:value,...)` with the keys sorted
    (operator.go processItem), `{{item.<key>}}` in its scope; any other task as it is."""
    if "withItems" not in task:
        return [(task, {})]
    out = []
    for index, item in enumerate(task["withItems"]):
        if not isinstance(item, dict):
            raise LocalRunError(f"{task['name']}: withItems[{index}] is not a mapping; localrun expands "
                                "torchdag's loop tasks only", EXIT_INVALID)
        given = {key: str(value) for key, value in item.items()}
        described = ",".join(sorted(f"{key}:{value}" for key, value in given.items()))
        name = f"{task['name']}({index}:{described.replace('(', '').replace(')', '')})"
        out.append(({**task, "name": name}, {f"item.{key}": value for key, value in given.items()}))
    return out


# The pod network's headless Service (network.mode: pod), skipped like the gang's tasks.
SERVICE_TASK = "creates the run's headless Service"
AGENTS_TASK = "creates the helpers' ConfigMap"  # agents.fromWorkflow; here /opt/torchdag maps to the checkout


def gang_task(task: dict, templates: dict[str, dict]) -> str | None:
    """What a DAG task of gang scheduling does on a cluster (scheduling.gang), or None for a
    training task: the resource template that creates the PodGroup, or the gang watch."""
    template = templates.get(task.get("template")) or {}
    manifest = (template.get("resource") or {}).get("manifest") or ""
    if "\nkind: \"PodGroup\"\n" in "\n" + manifest:
        return "creates the gang's PodGroup"
    if "\nkind: \"Service\"\n" in "\n" + manifest:
        return SERVICE_TASK
    if "\nkind: \"ConfigMap\"\n" in "\n" + manifest:
        return AGENTS_TASK
    role = ((template.get("metadata") or {}).get("labels") or {}).get("torchdag.io/role")
    if role == "gang-watch":
        return "watches that the gang is placed in time"
    if role == "schedule-watch":  # every job without a gang (scheduling.timeout)
        return "watches that every pod is scheduled in time"
    return None


def _gang_notes(doc: dict) -> list[str]:
    """What gang scheduling would do on a cluster, and that this runner does not."""
    _, dag, templates = _dag(doc)
    notes = [f"ignored: task {t['name']} ({gang_task(t, templates)}: " + (
             "every pod name is 127.0.0.1 here)" if gang_task(t, templates) == SERVICE_TASK else
             "scheduling is not simulated; every node starts here at once)" if t["name"] == "schedule-watch" else
             "the checkout's trainer/agents/ serve here)" if gang_task(t, templates) == AGENTS_TASK else
             "gang scheduling is not simulated; every node starts here at once)")
             for t in dag.get("tasks") or [] if gang_task(t, templates)]
    for template in templates.values():
        metadata = template.get("metadata") or {}
        marks = {**(metadata.get("labels") or {}), **(metadata.get("annotations") or {})}
        fields = [f"schedulerName {template['schedulerName']}"] if template.get("schedulerName") else []
        fields += [f"Pending timeout {template['timeout']}"] if template.get("timeout") else []
        fields += [f"{key}={value}" for key, value in marks.items() if not key.startswith("torchdag.io/")]
        watch = (metadata.get("labels") or {}).get("torchdag.io/role") == "gang-watch"
        if "container" in template and fields and not watch:
            notes.append(f"ignored: template {template['name']}: {', '.join(fields)} "
                         "(placement is the cluster's business)")
    return notes


def prepare_job(doc: dict, options: Options) -> Job:
    """The Workflow prepared to run here; LocalRunError if it cannot run faithfully."""
    entry, _, _ = _dag(doc)
    retry = retry_policy(doc, entry)
    scope = workflow_scope(doc, options)
    tasks = prepare_tasks(doc, options, scope, 0)
    problems = ([] if options.cpu else device_problems(tasks)) + missing_scripts(tasks)
    if problems:
        raise LocalRunError("\n".join(problems))
    deadline = (doc.get("spec") or {}).get("activeDeadlineSeconds")
    return Job(doc, options, scope["workflow.name"], tasks, retry, float(deadline) if deadline else None,
               _gang_notes(doc))


def prepare(doc: dict, options: Options) -> tuple[str, list[LocalTask]]:
    """(workflow name, the tasks of the first attempt); see prepare_job."""
    job = prepare_job(doc, options)
    return job.workflow, job.tasks
