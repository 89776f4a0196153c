"""Plan phase: from valid, default-filled values to every list the templates print.

The plan decides ranks, the master, the backend and, for compactness, the node *shapes*:
nodes that differ only in hostname, rank, NIC and address share one container template,
and those per-node facts travel as DAG task arguments. For each shape it computes the
container's command, args, env, resources and volume mounts as the strings the Workflow
will hold, so templates/workflow.yaml.j2 only prints them.

What goes into a container is data (catalog.yaml `container`): this module computes the
facts those lists are conditioned on and filled from. chart/templates/_plan.tpl is its
twin: the same facts under the same names, the same catalogue.

The job-wide parts follow (pod volumes, the containers' securityContext). Restarts as Argo
has them are recovery.py's, the gang's parts gang.py's, the pod network's network.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .access import ascend_pod_security
from .catalog import (
    accelerator,
    all_items,
    argo_parameter,
    catalog,
    fill,
    hccl_exec_timeout,
    hccl_limit,
    is_ipv4,
    items,
    node_accelerator,
    node_name,
    resource_name,
)
from .gang import gang
from .network import is_pod, master_address, network_plan, node_depends, node_nic, rendezvous_wait
from .plan_agents import agents_plan
from .plan_model import TypedPlan, retry_policy, typed_plan
from .recovery import argo_retry, node_recovery
from .watch import elastic_from, host_check, scheduling_watch
from .yamlout import dollar_escape, quantity, quote


@dataclass(frozen=True)
class Shape:
    """One container template: everything two nodes must agree on to share it."""

    name: str
    accelerator: str
    device: str  # npu | cuda | cpu, what the trainer computes on
    devices: int  # processes on the node (--nproc_per_node)
    parameters: tuple[str, ...]  # the template's input parameters
    command: tuple[str, ...]  # as written in the Workflow (Kubernetes' $ escaping applied)
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    field_env: tuple[tuple[str, str], ...]  # (name, fieldPath): env from the downward API
    resources: dict  # {"requests": {...}, "limits": {...}}, sections only when non-empty
    mounts: tuple[dict, ...]  # volumeMounts entries
    set_env: bool  # the command starts with the set_env.sh wrapper
    pod_security: tuple[str, ...] = ()  # the template's securityContext lines (torchdag/access.py), () for none
    if_ip: bool = False  # its nodes' address goes to HCCL_IF_IP (the hasIfIp fact)
    labels: tuple[tuple[str, str], ...] = ()  # its nodes' own pod labels (nodes[].labels), sorted by key


@dataclass(frozen=True)
class NodePlan:
    index: int  # position in values nodes[]
    rank: int
    name: str
    address: str
    nic: str  # "" when not set
    accelerator: str
    devices: int
    shape: Shape
    arguments: tuple[tuple[str, str], ...]

    @property
    def task(self) -> str:
        return node_name(self.rank)


@dataclass(frozen=True)
class NodeLoop:
    """A DAG task fanned out over machines of one shape (`withItems`), in place of their
    one task each when a flat DAG would pass the full CRDs' 200 tasks (catalog `nodeLoops`)."""

    task: str
    shape: Shape
    arguments: tuple[tuple[str, str], ...]  # the shape's parameters from `{{item.<key>}}` (and `{{retries}}`)
    items: tuple[str, ...]  # one flow mapping per machine, in rank order: its parameters' values by key
    elastic: bool = False  # every machine in it is an elastic member (elastic.minNodes)


@dataclass
class Plan:
    values: dict
    nodes: list[NodePlan]  # in rank order: the master first
    shapes: list[Shape]
    volumes: list[dict]  # the pod volumes, in print order
    retry: dict | None  # the train DAG's retryStrategy (failurePolicy recovery job), or None
    node_retry: dict | None  # each node's own retryStrategy (recovery node), or None
    elastic_from: int  # the first elastic member's rank (elastic.minNodes); the node count when none
    gang: dict | None  # gang scheduling (scheduling.gang): pod fields and the PodGroup manifest, or None
    watch: dict  # the task bounding scheduling (scheduling.timeout): its name and command
    host_check: dict | None  # node recovery: the task bounding each retried pod's scheduling, or None
    network: dict | None  # the pod network (network_plan below), or None on the host network
    depends: str  # what every node task waits for ("" for nothing)
    loops: list[NodeLoop] | None  # the nodes' loop tasks past argoFullCrdMaxItems tasks; None: a task per node
    master_address: str  # --master_addr: the master's host address, or its DNS name on the pod network
    security: dict  # every container's securityContext (containerSecurity)
    backend: str
    backend_reason: str
    world_size: int
    agents: dict | None = None  # the helpers' ConfigMap (torchdag/plan_agents.py), or None: the image has them
    catalog: dict = field(default_factory=catalog, repr=False, compare=False)  # the one it was planned with
    master: NodePlan = field(init=False)
    typed: TypedPlan = field(init=False)  # what consumers read (torchdag/plan_model.py)

    def __post_init__(self) -> None:
        self.master = self.nodes[0]
        self.typed = typed_plan(self.values, self.catalog, self)

    @property
    def scheduler_name(self) -> str:
        """The training pods' scheduler: scheduling.schedulerName, with or without a gang;
        under a gang its default is the gang scheduler's (catalogue `gangs`)."""
        return self.gang["scheduler_name"] if self.gang else self.values["scheduling"]["schedulerName"]

    @property
    def dependencies(self) -> list[str]:
        """The tasks every node task and the scheduling watch wait for, as `dependencies`, not
        `depends`: Argo refuses `continueOn` beside `depends`, and the watch (always) and an
        elastic member (elastic.minNodes) carry one."""
        return self.depends.split(" && ") if self.depends else []

    def task_template(self, shape: Shape) -> str:
        """The template a node task calls: under node recovery the shape's retry wrapper."""
        return fill(self.catalog["container"]["retryWrapper"], {"name": shape.name}) if self.node_retry else shape.name

    def task_arguments(self, arguments: tuple) -> tuple:
        """A node task's arguments; under node recovery the wrapper passes `restart` itself."""
        return tuple(pair for pair in arguments if not (self.node_retry and pair[0] in self.argo_arguments))

    @property
    def argo_arguments(self) -> dict:
        """What a node template's caller passes for the parameters no node fact gives."""
        return self.catalog["container"]["argoArguments"]

    @property
    def labels(self) -> dict:
        """The job's labels: torchdag's own first, then the user's (validation keeps the
        `torchdag.io/` prefix for torchdag)."""
        return {self.catalog["labels"]["job"]: self.values["name"], **self.values["labels"]}


def _resources(node: dict, values: dict) -> dict:
    chosen = (node["resources"] if "resources" in node else values["resources"]) or {}
    out: dict = {}
    for section in ("requests", "limits"):
        given = chosen.get(section) or {}
        quantities = {key: quantity(given[key]) for key in ("cpu", "memory") if key in given}
        if quantities:
            out[section] = quantities
    name = resource_name(node_accelerator(node), values)
    if name:  # extended resources take their request from the limit
        out.setdefault("limits", {})[name] = str(int(node.get("devices", 1)))
    return out


def resolve_backend(values: dict, cat: dict) -> tuple[str, str]:
    """Rule backend-auto: the backend, and the reason the summary gives for it."""
    reasons = cat["backendReasons"]
    if values["backend"] != "auto":
        return values["backend"], reasons["set"]
    kind = node_accelerator(values["nodes"][0])  # validation leaves one kind under auto
    backend = accelerator(kind)["backend"]
    limit = hccl_limit(kind, len(values["nodes"]), values["ascend"]["duoCard"]) if backend == "hccl" else None
    if limit:
        return "gloo", fill(limit["auto"], {"kind": kind})
    return backend, fill(reasons["auto"], {"kind": kind})


def _number(value) -> str:
    return str(int(value)) if value else ""


def job_facts(values: dict, backend: str, master_address: str, cat: dict) -> dict:
    """The facts every shape shares (catalog.yaml lists them all)."""
    timeouts, launcher = values["timeouts"], values["launcher"]
    return {
        "backend": backend,
        "nnodes": str(len(values["nodes"])),
        "masterAddress": master_address,
        "port": str(int(values["port"])),
        "python": launcher["python"],
        "preflightTimeout": str(int(values["preflight"]["timeout"])),
        "rendezvous": _number(timeouts["rendezvous"]),
        "launcherMaxRestarts": "" if launcher["maxRestarts"] is None else str(int(launcher["maxRestarts"])),
        "pgTimeout": _number(timeouts["processGroup"]),
        "hcclConnect": _number(timeouts["hcclConnect"]),
        "hcclExecTimeout": str(hccl_exec_timeout(timeouts["processGroup"])) if timeouts["processGroup"] else "",
        "restarts": bool(values["failurePolicy"]["maxRestarts"]),
        "recovery": values["failurePolicy"]["recovery"] if node_recovery(values) else "job",
        "nodeRecovery": node_recovery(values),
        "maxRestarts": str(int(values["failurePolicy"]["maxRestarts"])),
        "minNodes": str(elastic_from(values)),
        "rejoinSeconds": str(int(values["elastic"]["rejoinSeconds"])),
        "run": cat["network"]["run"],
        "whitelistDisable": bool(values["ascend"]["whitelistDisable"]),
        "podNetwork": is_pod(values),
        "rendezvousWait": rendezvous_wait(values),
        **{f"input:{name}": argo_parameter(name) for name in all_items(cat["container"]["parameters"])},
    }


def shape_facts(job: dict, kind: str, devices: int, nic: str, address: str, own_resources: bool, cat: dict) -> dict:
    entry = accelerator(kind)
    return {
        **job,
        **{device: device == entry["device"] for device in cat["devices"]},
        "accelerator": kind,
        "device": entry["device"],
        "devices": str(devices),
        "ascend": entry["ascend"],
        "hasIfIp": entry["ifIp"] and not job["podNetwork"] and is_ipv4(address),
        "ifIpDevice": entry["ifIp"],
        "nicNamed": nic not in ("", "auto"),
        "nicAuto": nic == "auto",
        "nicNone": nic == "",
        "ownResources": own_resources,
    }


def _command(values: dict, facts: dict, cat: dict) -> list[str]:
    container = cat["container"]
    words: list[str] = []
    set_env = facts["ascend"] and values["ascend"]["setEnvScript"]
    if set_env:
        wrapper = {"wrapper": cat["setEnvWrapper"]}
        words += [fill(word, wrapper) for word in cat["setEnvCommand"]] + [set_env]
    if values["preflight"]["enabled"] or facts["nicAuto"] or facts["podNetwork"]:
        words += values["preflight"]["command"] + items(container["preflightArgs"], facts)
    words += items(container["launchers"][values["launcher"]["type"]], facts)
    # The wrapper's own words are bash syntax, not Kubernetes': escape only from the script path on.
    fixed = len(cat["setEnvCommand"]) if set_env else 0
    return words[:fixed] + [dollar_escape(word) for word in words[fixed:]]


def runs_agent(command: list[str], cat: dict) -> bool:
    """Whether a command runs a file from the helpers' folder (catalog agents.path)."""
    folder = cat["agents"]["path"].rstrip("/") + "/"
    return any(word.startswith(folder) for word in command)


def recorder(values: dict, cat: dict) -> list[str]:
    """launcher.recordErrors: the runner that records a child's exception for torchrun, as [path] or []."""
    agents = cat["agents"]
    if not values["launcher"]["recordErrors"] or set(values["launcher"]["extraArgs"]) & set(agents["notPython"]):
        return []
    return [f"{agents['path']}/{agents['recorder']}"]


def _args(values: dict, facts: dict, cat: dict) -> list[str]:
    # torchrun passes the script and its arguments through string.Template for its
    # ${local_rank} macro, which turns $$ into $: they are escaped twice (that, and Kubernetes).
    script = [dollar_escape(word) for word in [*recorder(values, cat), values["script"], *values["args"]]]
    words = items(cat["container"]["launcherArgs"], facts) + values["launcher"]["extraArgs"] + script
    return [dollar_escape(word) for word in words]


def _env(values: dict, facts: dict, cat: dict) -> list[tuple[str, str]]:
    env = [tuple(pair) for pair in items(cat["container"]["env"], facts)]
    # sorted: Helm cannot see the file's order
    return env + [(name, dollar_escape(value)) for name, value in sorted(values["env"].items())]


def _mounts(values: dict, facts: dict, mounts_driver: bool, cat: dict) -> list[dict]:
    out = []
    if values["shmSize"]:
        out.append({"name": cat["shmVolume"]["name"], "mountPath": cat["shmVolume"]["mountPath"]})
    if facts["ascend"] and mounts_driver:
        out += [{"name": m["name"], "mountPath": m["mountPath"], "readOnly": True} for m in cat["ascendMounts"]]
    for volume in values["volumes"]:
        out.append({"name": volume["name"], "mountPath": volume["mountPath"],
                    **({"readOnly": True} if volume.get("readOnly") else {})})
    return out


def _shape(values: dict, facts: dict, resources: dict, mounts_driver: bool, cat: dict) -> dict:
    """One shape's fields, and its base name and suffixes (named once all are known)."""
    container = cat["container"]
    return {
        "base": fill(container["shapeName"], facts),
        "suffixes": items(container["shapeSuffixes"], facts),
        "accelerator": facts["accelerator"],
        "device": facts["device"],
        "devices": int(facts["devices"]),
        "parameters": tuple(items(container["parameters"], facts)),
        "command": tuple(_command(values, facts, cat)),
        "args": tuple(_args(values, facts, cat)),
        "env": tuple(_env(values, facts, cat)),
        "field_env": tuple(tuple(pair) for pair in items(container["fieldEnv"], facts)),
        "resources": resources,
        "mounts": tuple(_mounts(values, facts, mounts_driver, cat)),
        "set_env": bool(facts["ascend"] and values["ascend"]["setEnvScript"]),
        "pod_security": ascend_pod_security(values, facts["ascend"]),
        "if_ip": bool(facts["hasIfIp"]),
    }


def _shape_names(shapes: list[dict]) -> None:
    """Name each shape by its base; where several share a base, add what sets each apart
    (catalog `shapeSuffixes`), and a counter only where all of that is equal too."""
    by_base: dict[str, int] = {}
    for shape in shapes:
        by_base[shape["base"]] = by_base.get(shape["base"], 0) + 1
    taken: dict[str, int] = {}
    for shape in shapes:
        name = shape["base"]
        if by_base[name] > 1:
            name = "-".join([name, *shape["suffixes"]])
        taken[name] = taken.get(name, 0) + 1
        shape["name"] = name if taken[name] == 1 else f"{name}-{taken[name]}"


def flat_tasks(nodes: int, gang: dict | None, network: dict | None, agents: dict | None = None) -> int:
    """The DAG's tasks with one task per node: the nodes, the watch, the gang's PodGroup, the Service,
    the helpers."""
    return nodes + 1 + (1 if gang and gang["manifest"] else 0) + (1 if network else 0) + (1 if agents else 0)


def node_loops(nodes: list[NodePlan], shapes: list[Shape], first_elastic: int, cat: dict) -> list[NodeLoop]:
    """Each shape's machines, in rank order, as loop tasks of at most maxItems items. An
    item holds what the flat shape gives each node task as arguments, except what all the
    shape's machines share (a NIC name, say, and `{{retries}}`), which the task passes as
    it is; the naming keys are always there, as Argo names each pod's node after its item.
    A loop task holds either no elastic member or only elastic members (first_elastic on)."""
    entry = cat["nodeLoops"]
    keys, size = entry["keys"], int(entry["maxItems"])
    loops: list[NodeLoop] = []
    for shape in shapes:
        ranks = [node.rank for node in nodes if node.shape is shape]
        members = [dict(node.arguments) for node in nodes if node.shape is shape]
        varying = [name for name in sorted(keys, key=keys.get) if name in members[0]
                   and (name in entry["naming"] or len({given[name] for given in members}) > 1)]
        arguments = tuple((name, "{{item." + keys[name] + "}}" if name in varying else value)
                          for name, value in members[0].items())
        chunks: list[list[int]] = []
        for position, rank in enumerate(ranks):
            elastic = rank >= first_elastic
            if not chunks or len(chunks[-1]) == size or elastic != (ranks[chunks[-1][0]] >= first_elastic):
                chunks.append([])
            chunks[-1].append(position)
        for chunk in chunks:
            texts = tuple("{" + ", ".join(f"{quote(keys[name])}: {quote(members[at][name])}" for name in varying) + "}"
                          for at in chunk)
            loops.append(NodeLoop(fill(entry["task"], {"index": len(loops)}), shape, arguments, texts,
                                  ranks[chunk[0]] >= first_elastic))
    return loops


def make_plan(values: dict, cat: dict | None = None) -> Plan:
    """The Plan of valid, default-filled values, with the catalogue passed in (default: catalog.yaml)."""
    cat = catalog() if cat is None else cat
    nodes = values["nodes"]
    master_index = next((i for i, node in enumerate(nodes) if node.get("master")), 0)
    order = [master_index] + [i for i in range(len(nodes)) if i != master_index]
    master = nodes[master_index]
    backend, reason = resolve_backend(values, cat)
    kinds = {node_accelerator(node) for node in nodes}
    mounts_driver = bool(values["ascend"]["mountDriver"]) and any(accelerator(kind)["ascend"] for kind in kinds)
    pod = is_pod(values)
    job = job_facts(values, backend, master_address(values) if pod else master.get("address") or master["name"], cat)

    runs_preflight = values["preflight"]["enabled"] or pod or any(
        node_nic(node, values) == "auto" for node in nodes)
    agents = agents_plan(values, {"recorder": bool(recorder(values, cat)), "preflight": runs_preflight,
                                  "watch": runs_agent(values["scheduling"]["watchCommand"], cat)})

    specs: dict[tuple, dict] = {}  # shape key -> the shape's fields, in first-seen order
    placed = []
    for rank, index in enumerate(order):
        node = nodes[index]
        kind = node_accelerator(node)
        devices = int(node.get("devices", 1))
        # On the pod network a node is reached by its pod's name, through the pod's own NIC.
        address = node_name(rank) if pod else node.get("address") or node["name"]
        nic = node_nic(node, values)
        resources = _resources(node, values)
        facts = shape_facts(job, kind, devices, nic, address, "resources" in node, cat)
        labels = tuple(sorted((node.get("labels") or {}).items()))
        shared = {"accelerator": kind, "devices": devices, "resources": repr(resources), "hasIfIp": facts["hasIfIp"],
                  "nicMode": nic if nic in ("", "auto") else "named", "labels": labels}
        key = tuple(shared[name] for name in cat["container"]["shapeKey"])
        if key not in specs:
            specs[key] = {**_shape(values, facts, resources, mounts_driver, cat), "labels": labels}
        placed.append((rank, index, node, kind, devices, address, nic, key))

    _shape_names(list(specs.values()))
    for spec in specs.values() if agents else ():
        spec["mounts"] += (agents["mount"],)
    shapes = {key: Shape(**{k: v for k, v in spec.items() if k not in ("base", "suffixes")}) for key,
              spec in specs.items()}
    planned = []
    for rank, index, node, kind, devices, address, nic, key in placed:
        shape = shapes[key]
        facts = {"host": node["name"], "node-rank": str(rank), "nic": nic, "if-ip": address,
                 "restart": cat["container"]["argoArguments"]["restart"]}
        arguments = tuple((name, facts[name]) for name in shape.parameters if name in facts)
        planned.append(NodePlan(index, rank, node["name"], address, nic, kind, devices, shape, arguments))

    gang_plan, network = gang(values, planned), network_plan(values)
    loops = None
    if flat_tasks(len(planned), gang_plan, network, agents) > cat["argoFullCrdMaxItems"]:
        loops = node_loops(planned, list(shapes.values()), elastic_from(values), cat)
    return Plan(
        values=values,
        nodes=planned,
        shapes=list(shapes.values()),
        volumes=volumes(values, mounts_driver, cat) + ([agents["volume"]] if agents else []),
        retry=argo_retry(retry_policy(values, cat)) if not node_recovery(values) else None,
        node_retry=argo_retry(retry_policy(values, cat)) if node_recovery(values) else None,
        elastic_from=elastic_from(values),
        gang=gang_plan,
        watch=scheduling_watch(values, planned, gang_plan),
        host_check=host_check(values, gang_plan) if node_recovery(values) else None,
        network=network,
        depends=" && ".join(filter(None, [node_depends(gang_plan, network), agents and agents["task"]])),
        loops=loops,
        master_address=job["masterAddress"],
        security=container_security(values),
        backend=backend,
        backend_reason=reason,
        world_size=sum(node.devices for node in planned),
        agents=agents,
        catalog=cat,
    )


def node_container(plan: Plan, node: NodePlan, restart: int = 0, run: str | None = None) -> tuple[list, list, list]:
    """One node's (command, args, env) as its pod runs them: the lists of its shape with the
    node's own facts where the template has its input parameters (on a cluster Argo fills
    those from the node's task arguments), `restart` for the restart count Argo passes and,
    when given, `run` for the run's name (node recovery's rendezvous id). Kubernetes' `$`
    escaping is kept (Kubernetes undoes it). The test bed's local runner (`make smoke`)
    starts these."""
    values = plan.values
    cat = plan.catalog
    facts = shape_facts(job_facts(values, plan.backend, plan.master_address, cat), node.accelerator, node.devices,
                        node.nic, node.address, "resources" in values["nodes"][node.index], cat)
    given = {**dict(node.arguments), "restart": str(restart), "rdzv-host": str(node.rank == 0).lower()}
    facts.update({f"input:{name}": value for name, value in given.items()})
    if run is not None:
        facts["run"] = run
    return _command(values, facts, cat), _args(values, facts, cat), _env(values, facts, cat)


# --- job-wide parts ---------------------------------------------------------------------------

def volumes(values: dict, mounts_driver: bool, cat: dict) -> list[dict]:
    out: list[dict] = []
    if values.get("shmSize"):
        shm, size = cat["shmVolume"], quantity(values["shmSize"])
        out.append({"name": shm["name"], "emptyDir": {"medium": shm["medium"], "sizeLimit": size}})
    if mounts_driver:
        driver = values["ascend"]["driverPath"].rstrip("/")  # the schema's default, or the user's
        for mount in cat["ascendMounts"]:
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


