"""Plan phase: from valid, default-filled values to every list the templates print.

The plan decides ranks, the master, the backend and, for compactness, the node *shapes*:
nodes that differ only in hostname, rank, NIC and address share one container template,
and those per-node facts travel as DAG task arguments. For each shape it computes the
container's command, args, env, resources and volume mounts as the strings the Workflow
will hold, so templates/workflow.yaml.j2 (and the chart's copy of this logic in
chart/templates/_plan.tpl) only print them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .catalog import accelerator, catalog, hccl_exec_timeout, is_ipv4, resource_name
from .jobparts import container_security, gang, retry_strategy, volumes
from .yamlout import dollar_escape, quantity

# Argo fills this in a template with a retryStrategy: 0 on the first attempt, then 1, 2...
ARGO_RETRIES = "{{retries}}"


# Argo placeholders, filled per DAG task.
def argo_parameter(name: str) -> str:
    return "{{inputs.parameters." + name + "}}"


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
    resources: dict  # {"requests": {...}, "limits": {...}}, sections only when non-empty
    mounts: tuple[dict, ...]  # volumeMounts entries
    set_env: bool  # the command starts with the set_env.sh wrapper


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
        return f"node-{self.rank}"


@dataclass
class Plan:
    values: dict
    nodes: list[NodePlan]  # in rank order: the master first
    shapes: list[Shape]
    volumes: list[dict]  # the pod volumes, in print order
    retry: dict | None  # the train DAG's retryStrategy (failurePolicy), or None
    gang: dict | None  # gang scheduling (scheduling.gang): pod fields and the PodGroup manifest, or None
    security: dict  # every container's securityContext (containerSecurity)
    backend: str
    backend_reason: str
    world_size: int
    master: NodePlan = field(init=False)

    def __post_init__(self) -> None:
        self.master = self.nodes[0]

    @property
    def labels(self) -> dict:
        """The job's labels: torchdag's own first, then the user's (validation keeps the
        `torchdag.io/` prefix for torchdag)."""
        return {"torchdag.io/job": self.values["name"], **self.values.get("labels", {})}


def _resources(node: dict, values: dict) -> dict:
    chosen = node["resources"] if "resources" in node else values.get("resources") or {}
    out: dict = {}
    for section in ("requests", "limits"):
        given = chosen.get(section) or {}
        items = {key: quantity(given[key]) for key in ("cpu", "memory") if key in given}
        if items:
            out[section] = items
    name = resource_name(node.get("accelerator", "cpu"), values)
    if name:  # extended resources take their request from the limit
        out.setdefault("limits", {})[name] = str(int(node.get("devices", 1)))
    return out


def resolve_backend(values: dict) -> tuple[str, str]:
    backend = values.get("backend") or "auto"
    if backend != "auto":
        return backend, "set in the values file"
    kind = values["nodes"][0].get("accelerator", "cpu")  # validation leaves one kind under auto
    entry = accelerator(kind)
    if entry["backend"] == "hccl" and entry["hccl"] != "cluster":
        if entry["hccl"] == "none":
            return "gloo", f"auto: {kind} has no HCCL collectives, so gloo"
        if len(values["nodes"]) > 1:
            return "gloo", f"auto: HCCL on {kind} works within one server only, so gloo across nodes"
        if not (values.get("ascend") or {}).get("duoCard"):
            return "gloo", f"auto: HCCL on {kind} needs an Atlas 300I Duo card (ascend.duoCard), so gloo"
    return entry["backend"], f"auto: {kind} nodes"


def _nic_mode(nic: str) -> str:
    return "none" if not nic else ("auto" if nic == "auto" else "named")


def _shape_names(shapes: list[dict]) -> None:
    """Name each shape `<accelerator>-x<devices>`. Where several shapes share that base,
    each also says what sets it apart, so a reader sees why two templates exist:
    `-nic-auto`, `-no-nic`, `-no-if-ip` (an Ascend node addressed by DNS name, without
    HCCL_IF_IP), `-own-resources`; a counter only where all of that is equal too."""
    by_base: dict[str, int] = {}
    for shape in shapes:
        by_base[shape["base"]] = by_base.get(shape["base"], 0) + 1
    taken: dict[str, int] = {}
    for shape in shapes:
        name = shape["base"]
        if by_base[name] > 1:
            name = "-".join([name, *shape["features"]])
        taken[name] = taken.get(name, 0) + 1
        shape["name"] = name if taken[name] == 1 else f"{name}-{taken[name]}"


class _ShapeBuilder:
    """Computes one shape's container lists; the job-wide parts are computed once."""

    def __init__(self, values: dict, backend: str, master_address: str, nnodes: int, mounts_driver: bool):
        self.v = values
        self.backend = backend
        self.master_address = master_address
        self.nnodes = nnodes
        self.mounts_driver = mounts_driver
        timeouts = values.get("timeouts") or {}
        self.rendezvous = timeouts.get("rendezvous")
        self.pg_timeout = timeouts.get("processGroup")
        self.hccl_connect = timeouts.get("hcclConnect")
        self.user_env = sorted((values.get("env") or {}).items())  # Helm cannot see the file's order
        launcher = values.get("launcher") or {}
        # torchrun passes the script and its arguments through string.Template for its
        # ${local_rank} macro, which turns $$ into $: write $ as $$ so they arrive as written.
        self.script_args = [dollar_escape(word) for word in [values["script"], *values.get("args", [])]]
        self.extra_args = list(launcher.get("extraArgs") or [])
        self.restarts = int((values.get("failurePolicy") or {}).get("maxRestarts") or 0)

    def launcher_words(self) -> list[str]:
        launcher = self.v.get("launcher") or {}
        if launcher.get("type") == "launch":
            return [launcher.get("python") or "python3", "-m", "torch.distributed.launch"]
        return ["torchrun"]

    def command(self, entry: dict, devices: int, nic_mode: str) -> list[str]:
        ascend = self.v.get("ascend") or {}
        preflight = self.v.get("preflight") or {}
        words: list[str] = []
        if entry["ascend"] and ascend.get("setEnvScript"):
            words += ["/bin/bash", "-c", catalog()["setEnvWrapper"], "torchdag-set-env", ascend["setEnvScript"]]
        if preflight.get("enabled") or nic_mode == "auto":
            words += list(preflight.get("command") or [])
            words += [
                f"--master-addr={self.master_address}",
                f"--master-port={int(self.v['port'])}",
                f"--node-rank={argo_parameter('node-rank')}",
                f"--nproc-per-node={devices}",
            ]
            if nic_mode == "named":
                words.append(f"--nic={argo_parameter('nic')}")
            elif nic_mode == "auto":
                words.append("--nic=auto")
            words += [f"--device={entry['device']}", f"--timeout={int(preflight.get('timeout') or 120)}", "--exec"]
        words += self.launcher_words()
        # The wrapper's own words are bash syntax, not Kubernetes': escape only from the script path on.
        fixed = 3 if words[:1] == ["/bin/bash"] else 0
        return words[:fixed] + [dollar_escape(word) for word in words[fixed:]]

    def args(self, devices: int) -> list[str]:
        launcher = self.v.get("launcher") or {}
        words = [
            f"--nnodes={self.nnodes}",
            f"--node_rank={argo_parameter('node-rank')}",
            f"--nproc_per_node={devices}",
            f"--master_addr={self.master_address}",
            f"--master_port={int(self.v['port'])}",
        ]
        if launcher.get("maxRestarts") is not None:
            words.append(f"--max_restarts={int(launcher['maxRestarts'])}")
        if self.rendezvous:
            words.append(f"--rdzv_conf=timeout={int(self.rendezvous)}")
        return [dollar_escape(word) for word in words + self.extra_args] + [dollar_escape(word) for word in self.script_args]

    def env(self, entry: dict, nic_mode: str, has_if_ip: bool) -> list[tuple[str, str]]:
        ascend = self.v.get("ascend") or {}
        env = [("PYTHONUNBUFFERED", "1"), ("TORCHDAG_BACKEND", self.backend), ("TORCHDAG_DEVICE", entry["device"])]
        if self.pg_timeout:
            env.append(("TORCHDAG_PG_TIMEOUT", str(int(self.pg_timeout))))
        if self.restarts:
            env.append(("TORCHDAG_RESTART", argo_parameter("restart")))
        env += [(name, value) for name, value in entry["env"]]
        if nic_mode == "named":
            env += [(name, prefix + argo_parameter("nic")) for name, prefix in entry["nicEnv"]]
        if entry["ascend"]:
            if has_if_ip:
                env.append((entry["addressEnv"], argo_parameter("if-ip")))
            if self.hccl_connect:
                env.append(("HCCL_CONNECT_TIMEOUT", str(int(self.hccl_connect))))
            if self.pg_timeout:
                env.append(("HCCL_EXEC_TIMEOUT", str(hccl_exec_timeout(self.pg_timeout))))
            if ascend.get("whitelistDisable"):
                env.append(("HCCL_WHITELIST_DISABLE", "1"))
        env += [(name, dollar_escape(value)) for name, value in self.user_env]
        return env

    def mounts(self, entry: dict) -> list[dict]:
        out = []
        if self.v.get("shmSize"):
            out.append({"name": catalog()["shmVolume"]["name"], "mountPath": catalog()["shmVolume"]["mountPath"]})
        if entry["ascend"] and self.mounts_driver:
            out += [{"name": m["name"], "mountPath": m["mountPath"], "readOnly": True} for m in catalog()["ascendMounts"]]
        for volume in self.v.get("volumes") or []:
            mount = {"name": volume["name"], "mountPath": volume["mountPath"]}
            if volume.get("readOnly"):
                mount["readOnly"] = True
            out.append(mount)
        return out


def make_plan(values: dict) -> Plan:
    nodes = values["nodes"]
    master_index = next((i for i, node in enumerate(nodes) if node.get("master")), 0)
    order = [master_index] + [i for i in range(len(nodes)) if i != master_index]
    master = nodes[master_index]
    master_address = master.get("address") or master["name"]
    backend, reason = resolve_backend(values)
    kinds = {node.get("accelerator", "cpu") for node in nodes}
    mounts_driver = bool((values.get("ascend") or {}).get("mountDriver")) and any(accelerator(kind)["ascend"] for kind in kinds)
    builder = _ShapeBuilder(values, backend, master_address, len(nodes), mounts_driver)

    specs: dict[tuple, dict] = {}  # shape key -> the shape's fields, in first-seen order
    placed = []
    for rank, index in enumerate(order):
        node = nodes[index]
        kind = node.get("accelerator", "cpu")
        entry = accelerator(kind)
        devices = int(node.get("devices", 1))
        address = node.get("address") or node["name"]
        nic = node.get("nic") or ""
        nic_mode = _nic_mode(nic)
        has_if_ip = bool(entry["addressEnv"]) and is_ipv4(address)
        resources = _resources(node, values)
        key = (kind, devices, repr(resources), nic_mode, has_if_ip)
        if key not in specs:
            features = [{"auto": "nic-auto", "none": "no-nic"}[nic_mode]] if nic_mode != "named" else []
            features += ["no-if-ip"] if entry["ascend"] and not has_if_ip else []
            features += ["own-resources"] if "resources" in node else []
            specs[key] = dict(
                base=f"{kind}-x{devices}",
                features=features,
                accelerator=kind,
                device=entry["device"],
                devices=devices,
                parameters=tuple(["host", "node-rank"] + (["nic"] if nic_mode == "named" else []) + (["if-ip"] if has_if_ip else [])
                                 + (["restart"] if builder.restarts else [])),
                command=tuple(builder.command(entry, devices, nic_mode)),
                args=tuple(builder.args(devices)),
                env=tuple(builder.env(entry, nic_mode, has_if_ip)),
                resources=resources,
                mounts=tuple(builder.mounts(entry)),
                set_env=bool(entry["ascend"] and (values.get("ascend") or {}).get("setEnvScript")),
            )
        placed.append((rank, index, node, kind, devices, address, nic, key))

    _shape_names(list(specs.values()))
    shapes = {key: Shape(**{k: v for k, v in spec.items() if k not in ("base", "features")}) for key, spec in specs.items()}
    planned = []
    for rank, index, node, kind, devices, address, nic, key in placed:
        shape = shapes[key]
        facts = {"host": node["name"], "node-rank": str(rank), "nic": nic, "if-ip": address, "restart": ARGO_RETRIES}
        arguments = tuple((name, facts[name]) for name in shape.parameters)
        planned.append(NodePlan(index, rank, node["name"], address, nic, kind, devices, shape, arguments))

    return Plan(
        values=values,
        nodes=planned,
        shapes=list(shapes.values()),
        volumes=volumes(values, mounts_driver),
        retry=retry_strategy(values),
        gang=gang(values, planned),
        security=container_security(values),
        backend=backend,
        backend_reason=reason,
        world_size=sum(node.devices for node in planned),
    )
