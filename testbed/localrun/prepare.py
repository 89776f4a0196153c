"""Prepare phase: the Plan (torchdag's pipeline: load -> validate -> plan) -> the local
tasks to run, one per node, named as the node's DAG task (`node-<rank>`).

Each node's command, args and env are the Plan's own for that node
(torchdag.plan.node_container: its rank, NIC and address, the restart number), through
Kubernetes' `$(VAR)` expansion and the local mappings (testbed.runtime). What a cluster
does besides (the gang, the scheduling watch, the pod network's Service, the helpers'
ConfigMap, the host check) is named in one `ignored:` note each. A Job prepares its tasks
again for restart n (TORCHDAG_RESTART = n): every node's (recovery job), or one node's
(recovery node).
"""

from __future__ import annotations

import os
import random
import string
from dataclasses import dataclass, field
from typing import Callable

from testbed.runtime import (
    DEVICE_FILES,
    Options,
    kube_command,
    kube_container_env,
    local_devices,
    localize,
    process_env,
)
from torchdag import plan_model
from torchdag.plan import NodePlan, Plan, node_container

from .errors import EXIT_INVALID, LocalRunError


@dataclass
class LocalTask:
    name: str  # the node's DAG task, node-<rank>
    host: str  # the node's name (nodes[].name): the hostname it would run on
    rank: int
    devices: int  # processes on the node (--nproc_per_node), from the Plan
    argv: list[str]  # command + args, as the container would exec them (after mapping)
    env: list[tuple[str, str]]  # the container's env list (after expansion and mapping)
    cwd: str
    device: str  # cpu | cuda | npu, what the node computes on
    notes: list[str] = field(default_factory=list)  # what was changed for running here
    prefix: list[str] = field(default_factory=list)
    restart: int = 0  # TORCHDAG_RESTART: the job's restart, or under node recovery the node's own
    elastic: bool = False  # an elastic member (elastic.minNodes): the job goes on without it

    def process_env(self, base: dict[str, str], bin_dir: str) -> dict[str, str]:
        return process_env(base, bin_dir, self.env)


def _seconds_text(seconds: float) -> str:
    return f"{round(seconds, 2):g} s"


@dataclass(frozen=True)
class RetryPolicy:
    """Restarts of the whole job (recovery job) or of each node on its own (recovery node): up
    to `limit`, the wait before restart n `duration * factor^(n-1)`, at most `cap` (Argo's
    backoff formula, which the Plan's retryStrategy asks for)."""

    limit: int
    duration: float = 0.0  # seconds before the first restart
    factor: int = 1
    cap: float | None = None
    recovery: str = "job"  # job | node

    @classmethod
    def from_plan(cls, policy: plan_model.RetryPolicy | None) -> RetryPolicy | None:
        """From the typed Plan's retry policy (torchdag/plan_model.py), in seconds."""
        if policy is None:
            return None
        cap = float(policy.cap_seconds) if policy.cap_seconds is not None else None
        return cls(policy.limit, float(policy.backoff_seconds), policy.factor, cap, policy.recovery)

    def delay(self, restart: int) -> float:
        """Seconds to wait before restart n (1-based), before any --backoff-scale."""
        wait = self.duration * self.factor ** (restart - 1)
        return min(wait, self.cap) if self.cap is not None else wait

    def of_limit(self, restart: int) -> str:
        """`1/2`"""
        return f"{restart}/{self.limit}"

    def refusal(self, restart: int) -> str | None:
        """Why restart n does not happen after a failure (None: it does)."""
        return f"no restarts left (limit {self.limit})" if restart > self.limit else None

    def describe(self, scale: float = 1.0) -> str:
        """`failurePolicy (recovery job): restarts up to 2, backoff 10 s x2 (waits 10, 20 s)`;
        under recovery node `restarts up to 2 per node, ...`"""
        each = " per node" if self.recovery == "node" else ""
        text = f"failurePolicy (recovery {self.recovery}): restarts up to {self.limit}{each}"
        if self.duration:
            text += f", backoff {_seconds_text(self.duration)} x{self.factor}"
            shown = min(self.limit, 3)
            waits = ", ".join(f"{round(self.delay(n) * scale, 2):g}" for n in range(1, shown + 1))
            more = ", ..." if self.limit > shown else ""
            scaled = f"; x{scale:g} by --backoff-scale" if scale != 1 else ""
            if waits:
                text += f" (waits {waits}{more} s{scaled})"
        else:
            text += ", no backoff"
        if self.cap is not None:
            text += f", at most {_seconds_text(self.cap)} each"
        return text


@dataclass
class Job:
    """The Plan prepared to run here: its tasks for the first attempt, and for any restart."""

    plan: Plan
    options: Options
    workflow: str  # the run's name: the job's name + 5 random characters, as Argo names a generateName
    tasks: list[LocalTask]  # restart 0
    retry: RetryPolicy | None = None  # failurePolicy: whole-job restarts, or each node's own
    deadline: float | None = None  # timeouts.workflowDeadline
    ignored: list[str] = field(default_factory=list)  # what a cluster does and this runner does not
    only: list[str] = field(default_factory=list)  # run only these tasks
    exec_prefix: Callable[[LocalTask], list[str]] | None = None  # e.g. `ip netns exec NS ...`

    @property
    def node_recovery(self) -> bool:
        """failurePolicy.recovery node: a failed node restarts alone, the others keep running."""
        return self.retry is not None and self.retry.recovery == "node"

    def tasks_for(self, restart: int) -> list[LocalTask]:
        """The tasks of restart n; restart 0 is self.tasks."""
        if restart == 0:
            return self.tasks
        return [self.node_task(node, restart) for node in self.nodes_to_run()]

    def task_again(self, name: str, restart: int) -> LocalTask:
        """One node's task for its own restart n (node recovery: Argo's `{{retries}}` of its retry wrapper)."""
        return self.node_task(next(node for node in self.plan.nodes if node.task == name), restart)

    def policy_lines(self, scale: float = 1.0) -> list[str]:
        """What the runner does on a failure, as the Plan has it (none without restarts)."""
        if self.retry is None:
            return []
        lines = [self.retry.describe(scale)]
        members = [task.name for task in self.tasks if task.elastic]
        if members:
            job = self.plan.typed.job
            lines.append(f"elastic.minNodes {job.min_nodes}: {', '.join(members)} may be left behind "
                         f"once out of restarts, and the others go on without them (torchrun --nnodes="
                         f"{job.min_nodes}:{job.nnodes})")
        return lines

    def nodes_to_run(self) -> list[NodePlan]:
        return [node for node in self.plan.nodes if not self.only or node.task in self.only]

    def node_task(self, node: NodePlan, restart: int) -> LocalTask:
        command, args, env = node_container(self.plan, node, restart, self.workflow)
        notes = [f"node affinity kubernetes.io/hostname={node.name} ignored: runs on this machine"]
        pod_ip = self.options.address or node.address
        fields = []
        for name, path in node.shape.field_env:  # the downward API: the pod's IP, which this machine stands in for
            notes.append(f"env {name}: the pod's IP ({path}) -> {pod_ip}")
            fields.append((name, pod_ip))
        # Kubernetes: env values see earlier entries; command and args see the whole env.
        env_list = kube_container_env(fields + env)
        command, args = kube_command(command, dict(env_list)), kube_command(args, dict(env_list))
        argv, env_out, cwd, device = localize(command, args, env_list, self.plan.typed.job.working_dir,
                                              node.shape.device, self.options, notes)
        task = LocalTask(node.task, node.name, node.rank, node.devices, argv, env_out, cwd, device, notes,
                         restart=restart, elastic=self.plan.typed.nodes[node.rank].elastic)
        if self.exec_prefix is not None:
            task.prefix = list(self.exec_prefix(task))
        return task


def device_problems(tasks: list[LocalTask]) -> list[str]:
    """GPU/NPU nodes this machine cannot hold (all nodes share it, so their devices add up)."""
    problems = []
    for kind in ("cuda", "npu"):
        needing = [t for t in tasks if t.device == kind]
        need = sum(t.devices for t in needing)
        have = local_devices(kind) if needing else 0
        if needing and have < need:
            folder, pattern, label = DEVICE_FILES[kind]
            problems.append(
                f"{', '.join(t.name for t in needing)}: need{'s' if len(needing) == 1 else ''} {need} {label}(s) "
                f"and this machine has {have} ({folder}/{pattern.pattern.strip('^$')}); "
                f"run with --cpu to train those nodes on CPU instead"
            )
    return problems


def missing_scripts(tasks: list[LocalTask]) -> list[str]:
    """Python scripts a node would start (script, preflight) that do not exist once mapped."""
    missing: dict[str, list[str]] = {}
    for task in tasks:
        for word in task.argv:
            path = word.partition("=")[2] if word.startswith("-") else word
            if path.startswith("/") and path.endswith(".py") and not os.path.exists(path):
                missing.setdefault(path, []).append(task.name)
    return [f"{', '.join(names)}: {path} does not exist here; map the image path into this machine with --map SRC=DST"
            for path, names in missing.items()]


def cluster_notes(plan: Plan) -> list[str]:
    """What the cluster does around the nodes, and that this runner does not."""
    notes = []
    everyone_here = "every node starts here at once"
    if plan.gang and plan.gang["manifest"]:
        notes.append(f"ignored: task gang (creates the gang's PodGroup: gang scheduling is not simulated; "
                     f"{everyone_here})")
    if plan.gang:
        notes.append(f"ignored: task {plan.watch['task']} (watches that the gang is placed in time: "
                     f"gang scheduling is not simulated; {everyone_here})")
    else:
        notes.append(f"ignored: task {plan.watch['task']} (watches that every pod is scheduled in time: "
                     f"scheduling is not simulated; {everyone_here})")
    if plan.network:
        notes.append("ignored: task service (creates the run's headless Service: every pod name is 127.0.0.1 here)")
    if plan.agents:
        notes.append(f"ignored: task {plan.agents['task']} (creates the helpers' ConfigMap: "
                     "the checkout's torchdag/agents/ serve here)")
    if plan.host_check:
        notes.append("ignored: template host-check (a retried node's pod must be scheduled in time: "
                     "every host is this machine)")
    gang = plan.gang or {"labels": [], "annotations": [], "role_annotation": None}
    for shape in plan.shapes:
        marks = [f"schedulerName {plan.scheduler_name}"] if plan.scheduler_name else []
        marks += [f"{key}={value}" for key, value in gang["labels"] + gang["annotations"]]
        marks += [f"{gang['role_annotation']}={shape.name}"] if gang["role_annotation"] else []
        if marks:
            notes.append(f"ignored: template {shape.name}: {', '.join(marks)} (placement is the cluster's business)")
    return notes


def run_name(plan: Plan) -> str:
    """The job's name and five random characters, as Argo completes the Workflow's generateName."""
    return f"{plan.typed.job.name}-" + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))


def prepare_job(plan: Plan, options: Options, *, only: list[str] | tuple = (),
                exec_prefix: Callable[[LocalTask], list[str]] | None = None) -> Job:
    """The Plan prepared to run here; LocalRunError if it cannot run faithfully."""
    names = [node.task for node in plan.nodes]
    unknown = [name for name in only if name not in names]
    if unknown:
        raise LocalRunError(f"--only {', '.join(unknown)}: no such task (tasks: {', '.join(names)})", EXIT_INVALID)
    deadline = plan.typed.job.deadline_seconds
    job = Job(plan, options, run_name(plan), [], RetryPolicy.from_plan(plan.typed.retry),
              float(deadline) if deadline is not None else None, cluster_notes(plan), list(only), exec_prefix)
    job.tasks = [job.node_task(node, 0) for node in job.nodes_to_run()]
    problems = ([] if options.cpu else device_problems(job.tasks)) + missing_scripts(job.tasks)
    if problems:
        raise LocalRunError("\n".join(problems))
    return job
