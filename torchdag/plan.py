"""Plan phase: from valid values to the facts the templates print.

Ranks, the master, the backend and, for compactness, the node *shapes*: nodes that
differ only in hostname, rank, NIC and address share one container template, and those
per-node facts travel as DAG task arguments.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .validate import ASCEND, ACCELERATOR_BACKEND, is_ipv4

RESOURCE_NAME = {
    "ascend310p": "huawei.com/Ascend310P",
    "ascend310": "huawei.com/Ascend310",
    "ascend910": "huawei.com/Ascend910",
    "nvidia": "nvidia.com/gpu",
}
DEVICE_KIND = {"ascend310p": "npu", "ascend310": "npu", "ascend910": "npu", "nvidia": "cuda", "cpu": "cpu"}


@dataclass(frozen=True)
class Shape:
    """One container template: everything two nodes must agree on to share it."""

    name: str
    accelerator: str
    device: str  # npu | cuda | cpu, what the trainer computes on
    devices: int  # processes on the node (--nproc_per_node)
    resources: dict  # requests/limits, accelerator limit included
    nic_mode: str  # none | named | auto
    has_if_ip: bool  # Ascend node with an IPv4 address: HCCL_IF_IP is set

    @property
    def ascend(self) -> bool:
        return self.accelerator in ASCEND

    @property
    def parameters(self) -> list[str]:
        names = ["host", "node-rank"]
        if self.nic_mode == "named":
            names.append("nic")
        if self.has_if_ip:
            names.append("if-ip")
        return names


@dataclass(frozen=True)
class NodePlan:
    index: int  # position in values nodes[]
    rank: int
    name: str
    address: str
    nic: str | None
    accelerator: str
    devices: int
    shape: Shape

    @property
    def task(self) -> str:
        return f"node-{self.rank}"

    @property
    def arguments(self) -> list[tuple[str, str]]:
        values = {"host": self.name, "node-rank": str(self.rank), "nic": self.nic, "if-ip": self.address}
        return [(name, values[name]) for name in self.shape.parameters]


@dataclass
class Plan:
    values: dict
    nodes: list[NodePlan]  # in rank order: the master first
    shapes: list[Shape]
    backend: str
    backend_reason: str
    world_size: int
    master: NodePlan = field(init=False)

    def __post_init__(self) -> None:
        self.master = self.nodes[0]

    @property
    def any_ascend(self) -> bool:
        return any(shape.ascend for shape in self.shapes)


def quantity(value: Any) -> str:
    """Quantities are printed as strings; 4.0 and 4 both become "4" (as Helm prints them)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _resources(node: dict, values: dict) -> dict:
    chosen = node["resources"] if "resources" in node else values.get("resources") or {}
    out: dict = {}
    for section in ("requests", "limits"):
        items = {key: quantity(chosen[section][key]) for key in ("cpu", "memory") if key in (chosen.get(section) or {})}
        if items:
            out[section] = items
    accelerator = node.get("accelerator", "cpu")
    if accelerator in RESOURCE_NAME:
        # Extended resources take their request from the limit.
        out.setdefault("limits", {})[RESOURCE_NAME[accelerator]] = str(int(node.get("devices", 1)))
    return out


def resolve_backend(values: dict) -> tuple[str, str]:
    backend = values.get("backend") or "auto"
    kinds = sorted({node.get("accelerator", "cpu") for node in values["nodes"]})
    if backend != "auto":
        return backend, "set in the values file"
    kind = kinds[0]  # validation guarantees one kind under auto
    if kind in ("ascend310p", "ascend310") and len(values["nodes"]) > 1:
        return "gloo", f"auto: HCCL on {kind} works within one server only, so gloo across nodes"
    return ACCELERATOR_BACKEND[kind], f"auto: {kind} nodes"


def make_plan(values: dict) -> Plan:
    nodes = values["nodes"]
    master_index = next((i for i, node in enumerate(nodes) if node.get("master")), 0)
    order = [master_index] + [i for i in range(len(nodes)) if i != master_index]

    shapes: dict[tuple, Shape] = {}
    names_taken: dict[str, int] = {}
    planned = []
    for rank, index in enumerate(order):
        node = nodes[index]
        accelerator = node.get("accelerator", "cpu")
        devices = int(node.get("devices", 1))
        address = node.get("address", node["name"])
        nic = node.get("nic")
        nic_mode = "none" if not nic else ("auto" if nic == "auto" else "named")
        has_if_ip = accelerator in ASCEND and is_ipv4(address)
        resources = _resources(node, values)
        key = (accelerator, devices, json.dumps(resources, sort_keys=True), nic_mode, has_if_ip)
        if key not in shapes:
            base = f"{accelerator}-x{devices}"
            names_taken[base] = names_taken.get(base, 0) + 1
            name = base if names_taken[base] == 1 else f"{base}-{names_taken[base]}"
            shapes[key] = Shape(name, accelerator, DEVICE_KIND[accelerator], devices, resources, nic_mode, has_if_ip)
        planned.append(NodePlan(index, rank, node["name"], address, nic if nic_mode == "named" else None, accelerator, devices, shapes[key]))

    backend, reason = resolve_backend(values)
    return Plan(
        values=values,
        nodes=planned,
        shapes=list(shapes.values()),
        backend=backend,
        backend_reason=reason,
        world_size=sum(node.devices for node in planned),
    )
