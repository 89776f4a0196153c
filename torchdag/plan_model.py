"""The typed Plan: the job as names, numbers and units, one record per node and per shape.

torchdag/plan.py decides (ranks, addresses, NICs, shapes, the backend) and keeps, beside these
records, the strings the Workflow will hold; this module is what every other consumer reads
(the summary, the local runner, the size guard, `torchdag plan FILE --json`). Durations are
whole seconds in fields named `*_seconds`; the printer (plan.py, templates/) turns them into
Argo's strings ("10s"), and nothing turns them back.

Built once per Plan by `typed_plan`, from validated, default-filled values and the catalogue
passed in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryPolicy:
    """Restarts (failurePolicy): of the whole job (recovery job: Argo retries the train DAG) or
    of each node on its own (recovery node: each node task's retry wrapper). The wait before
    restart n is backoff_seconds * factor^(n-1), at most cap_seconds (Argo's backoff)."""

    limit: int  # restarts after the first attempt
    recovery: str  # job | node
    retry_policy: str  # Argo's retryPolicy (Always: a failed task and a lost pod alike)
    backoff_seconds: int
    factor: int
    cap_seconds: int | None  # None: timeouts.workflowDeadline bounds the doubling instead

    def delay_seconds(self, restart: int) -> float:
        """Seconds Argo waits before restart n (1-based)."""
        wait = self.backoff_seconds * self.factor ** (restart - 1)
        return min(wait, self.cap_seconds) if self.cap_seconds is not None else wait


@dataclass(frozen=True)
class Resources:
    """A shape's container resources as printed quantities (the values' own units: "8", "64Gi");
    the accelerator's extended resource as a count."""

    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)
    accelerator_resource: str | None = None  # e.g. huawei.com/Ascend310P; None on CPU nodes
    accelerator_count: int = 0


@dataclass(frozen=True)
class ShapeSpec:
    """One container template, shared by the nodes whose ranks it lists."""

    name: str
    accelerator: str
    device: str  # npu | cuda | cpu
    devices: int  # processes per node (--nproc_per_node)
    resources: Resources
    ranks: tuple[int, ...]
    set_env_script: str | None  # Ascend's set_env.sh the command sources first, or None
    labels: dict[str, str]  # its nodes' own pod labels (nodes[].labels)


@dataclass(frozen=True)
class Node:
    """One machine of the job. `address` is the one name for how the others reach it (the
    Workflow prints it as the `if-ip` argument and HCCL_IF_IP where `if_ip` holds)."""

    rank: int
    index: int  # position in the values' nodes[]
    task: str  # its DAG task, and on the pod network its pod's hostname
    host: str  # nodes[].name: the Kubernetes node it is pinned to
    address: str  # nodes[].address or the host; on the pod network its pod's DNS name
    nic: str | None  # a named NIC, "auto" (preflight picks it), or None
    shape: str  # its container template
    accelerator: str
    device: str
    devices: int
    master: bool
    elastic: bool  # an elastic member (elastic.minNodes): the job may go on without it
    if_ip: bool  # the Workflow sets HCCL_IF_IP to `address` (Ascend, host network, IPv4)
    labels: dict[str, str]  # its pod's own labels (nodes[].labels), beside the job's


@dataclass(frozen=True)
class Gang:
    """Gang scheduling (scheduling.gang): every pod in one group, placed all at once or not."""

    kind: str  # volcano | kueue | coscheduling
    scheduler_name: str
    group: str
    count: int  # pods in the gang
    min_member: int  # the fewest it may run with (elastic.minNodes, else count)
    queue: str | None
    timeout_seconds: int  # scheduling.timeout
    pod_group: bool  # the Workflow creates a PodGroup object first


@dataclass(frozen=True)
class Network:
    mode: str  # host | pod
    cluster_domain: str
    service: bool  # the run's headless Service (pod network)
    default_nic: str | None  # network.nic, the pod network's NIC for nodes naming none


@dataclass(frozen=True)
class Helpers:
    """The pod helpers (torchdag/agents/): shipped in a ConfigMap by the Workflow, or the image's."""

    from_workflow: bool
    path: str  # where the containers find them
    files: tuple[str, ...]  # those the Workflow ships (empty: the image's own)


@dataclass(frozen=True)
class PodSecurity:
    """The pods' securityContext (securityContext) under the Pod Security level asked for
    (podSecurity: none | baseline | restricted). None: not set."""

    level: str
    run_as_user: int | None
    run_as_group: int | None
    fs_group: int | None
    run_as_non_root: bool | None  # restricted sets it unless the values do
    supplemental_groups: tuple[int, ...] | None

    @property
    def restricted(self) -> bool:
        return self.level == "restricted"

    @property
    def pod_context(self) -> bool:
        """Whether the Workflow sets a pod securityContext at all."""
        return self.restricted or any(value is not None for value in (
            self.run_as_user, self.run_as_group, self.fs_group, self.run_as_non_root, self.supplemental_groups))


@dataclass(frozen=True)
class Job:
    name: str
    kind: str  # Workflow | WorkflowTemplate
    namespace: str | None  # None: the one kubectl or argo submits to
    service_account: str | None  # the pods' ServiceAccount (None: the namespace's default)
    executor_service_account: str | None  # Argo's executor's (None: the pods' own)
    automount_service_account_token: bool
    node_selector: dict[str, str]  # every pod's, beside its host
    tolerations: tuple[dict, ...]  # every pod's
    annotations: dict[str, str]  # the Workflow's and every pod's
    image: str
    image_pull_policy: str
    image_pull_secrets: tuple[str, ...]
    security: PodSecurity
    ttl_seconds_after_finished: int | None  # None: the finished Workflow is kept
    pod_gc: str | None  # Argo's podGC strategy; None: pods are kept
    priority_class_name: str | None
    script: str
    args: tuple[str, ...]
    working_dir: str | None
    labels: dict[str, str]  # the job's labels, torchdag's first
    backend: str
    backend_reason: str
    nnodes: int
    world_size: int  # processes in all
    min_nodes: int  # the first elastic member's rank; nnodes when none
    port: int
    master_host: str
    master_address: str
    scheduler_name: str | None
    deadline_seconds: int | None  # timeouts.workflowDeadline
    rendezvous_seconds: int | None  # timeouts.rendezvous (None: torchrun's default)
    process_group_seconds: int | None  # timeouts.processGroup
    scheduling_timeout_seconds: int
    node_status_offload: bool


@dataclass(frozen=True)
class TypedPlan:
    job: Job
    nodes: tuple[Node, ...]  # in rank order: the master first
    shapes: tuple[ShapeSpec, ...]
    retry: RetryPolicy | None
    gang: Gang | None
    network: Network
    helpers: Helpers

    def to_json(self) -> dict:
        """`torchdag plan FILE --json`: the fields as they are, units in their names."""
        return dataclasses.asdict(self)


def _seconds(value) -> int | None:
    return int(value) if value else None


def pod_security(values: dict) -> PodSecurity:
    """securityContext as numbers; podSecurity restricted asks runAsNonRoot unless the values say."""
    context, level = values.get("securityContext") or {}, values["podSecurity"]
    non_root = context.get("runAsNonRoot", True if level == "restricted" else None)
    groups = context.get("supplementalGroups")
    return PodSecurity(level, context.get("runAsUser"), context.get("runAsGroup"), context.get("fsGroup"), non_root,
                       tuple(groups) if groups is not None else None)


def retry_policy(values: dict, cat: dict) -> RetryPolicy | None:
    """failurePolicy as numbers; None without restarts. With no Workflow deadline Argo's cap
    bounds the doubling waits (catalogue restartBackoffCapSeconds, or the first wait if longer)."""
    policy = values["failurePolicy"]
    limit = int(policy["maxRestarts"] or 0)
    if not limit:
        return None
    backoff = int(policy["backoffSeconds"])
    cap = None if values["timeouts"]["workflowDeadline"] else max(int(cat["restartBackoffCapSeconds"]), backoff)
    strategy = cat["restartStrategy"]
    return RetryPolicy(limit, policy["recovery"], strategy["retryPolicy"], backoff, int(strategy["factor"]), cap)


def _resources(printed: dict, accelerator_resource: str | None) -> Resources:
    limits = dict(printed.get("limits", {}))
    count = int(limits.pop(accelerator_resource)) if accelerator_resource in limits else 0
    return Resources(dict(printed.get("requests", {})), limits, accelerator_resource if count else None, count)


def typed_plan(values: dict, cat: dict, plan) -> TypedPlan:
    """The typed record of a plan.Plan's decisions (its nodes, shapes, gang and network), with
    the values' numbers as numbers. `plan` is the plan.Plan being built (its typed fields only)."""
    nodes = plan.nodes
    resource_names = values.get("resourceNames") or {}

    def resource_of(kind: str) -> str | None:
        return resource_names.get(kind) or cat["accelerators"][kind].get("resource") or None

    ranks: dict[str, list[int]] = {}
    for node in nodes:  # one pass: 4,096 machines over up to 200 shapes
        ranks.setdefault(node.shape.name, []).append(node.rank)
    shapes = tuple(ShapeSpec(shape.name, shape.accelerator, shape.device, shape.devices,
                             _resources(shape.resources, resource_of(shape.accelerator)),
                             tuple(ranks.get(shape.name, ())),
                             values["ascend"]["setEnvScript"] if shape.set_env else None, dict(shape.labels))
                   for shape in plan.shapes)
    typed_nodes = tuple(Node(node.rank, node.index, node.task, node.name, node.address, node.nic or None,
                             node.shape.name, node.accelerator, node.shape.device, node.devices, node.rank == 0,
                             node.rank >= plan.elastic_from, node.shape.if_ip, dict(node.shape.labels))
                        for node in nodes)
    scheduling, timeouts = values["scheduling"], values["timeouts"]
    gang = None
    if plan.gang:
        gang = Gang(plan.gang["kind"], plan.gang["scheduler_name"], cat["gangName"], len(nodes), plan.elastic_from,
                    scheduling["queue"] or None, int(scheduling["timeout"]), plan.gang["manifest"] is not None)
    network = Network("pod" if plan.network else "host", values["network"]["clusterDomain"], bool(plan.network),
                      values["network"]["nic"] if plan.network else None)
    helpers = Helpers(bool(values["agents"]["fromWorkflow"]), cat["agents"]["path"],
                      tuple(plan.agents["files"]) if plan.agents else ())
    workflow = values["workflow"]
    job = Job(name=values["name"], kind=values["kind"], namespace=values.get("namespace") or None,
              service_account=values.get("serviceAccountName") or None,
              executor_service_account=values.get("executorServiceAccountName") or None,
              automount_service_account_token=bool(values["automountServiceAccountToken"]),
              node_selector=dict(values.get("nodeSelector") or {}),
              tolerations=tuple(dict(t) for t in values.get("tolerations") or ()),
              annotations=dict(values.get("annotations") or {}), image=values["image"],
              image_pull_policy=values["imagePullPolicy"],
              image_pull_secrets=tuple(values.get("imagePullSecrets") or ()), security=pod_security(values),
              ttl_seconds_after_finished=_seconds(workflow.get("ttlSecondsAfterFinished")),
              pod_gc=workflow.get("podGC") or None,
              priority_class_name=workflow.get("priorityClassName") or None,
              script=values["script"], args=tuple(values["args"]), working_dir=values["workingDir"] or None,
              labels=dict(plan.labels), backend=plan.backend, backend_reason=plan.backend_reason, nnodes=len(nodes),
              world_size=plan.world_size, min_nodes=plan.elastic_from, port=int(values["port"]),
              master_host=plan.master.name, master_address=plan.master_address,
              scheduler_name=plan.scheduler_name or None, deadline_seconds=_seconds(timeouts["workflowDeadline"]),
              rendezvous_seconds=_seconds(timeouts["rendezvous"]),
              process_group_seconds=_seconds(timeouts["processGroup"]),
              scheduling_timeout_seconds=int(scheduling["timeout"]),
              node_status_offload=bool(workflow["nodeStatusOffload"]))
    return TypedPlan(job, typed_nodes, shapes, retry_policy(values, cat), gang, network, helpers)
