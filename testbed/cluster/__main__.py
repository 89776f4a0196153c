"""python -m testbed.cluster up|down|nodes VALUES|stop-nodes NAME...|register VALUES|kubelet|
schedulers NAME... (the Makefile's cluster-* targets)."""

from __future__ import annotations

import argparse
import sys

from torchdag.errors import run_command

from ..node.nodes import RealNodes, specs_from_values
from .layout import Layout
from .nodes import DEFAULT_CAPACITY, node_objects, register
from .procs import ports
from .schedulers import KNOWN as GANG_SCHEDULERS
from .up import PORTS, Cluster, ClusterError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.cluster",
        description="A local Kubernetes control plane with Argo's workflow-controller, as processes on 127.0.0.1.",
        epilog="Exit status: 0 ok, 1 the cluster failed (the message names the log), 2 invalid values or usage.",
    )
    parser.add_argument("--dir", help="the cluster's state directory (default: $TORCHDAG_CLUSTER_DIR or .cluster)")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start every component not running and wait until all are ready")
    up.add_argument("--schedulers", default="", help="comma-separated real gang schedulers to run too "
                                                     f"({', '.join(GANG_SCHEDULERS)})")
    gang = commands.add_parser("schedulers", help="start real gang schedulers in the cluster (with their CRDs, "
                                                  "webhooks and a ClusterQueue); `up` restarts them after a reboot")
    gang.add_argument("names", nargs="+", choices=GANG_SCHEDULERS)
    commands.add_parser("down", help="stop every component (SIGTERM, then SIGKILL) and remove the state directory")
    commands.add_parser("kubelet", help="start the process kubelet in the background for every Node "
                                                  "`register` registers; extra words go to it (e.g. --cpu)")
    nodes = commands.add_parser("nodes", help="start a real node (kubelet, containerd, runc) for each node of the "
                                              "values file not running yet: docs/nodes.md")
    nodes.add_argument("values", help="a torchdag values file, e.g. examples/local.yaml")
    stop = commands.add_parser("stop-nodes", help="stop real nodes as machines that go away (their containers too)")
    stop.add_argument("names", nargs="+", help="node names")
    register = commands.add_parser("register", help="register the values file's nodes as Ready Node objects only, "
                                                    "for the process kubelet and the scale bench (no kubelet runs)")
    register.add_argument("values", help="a torchdag values file, e.g. examples/local.yaml")
    for key, value in DEFAULT_CAPACITY.items():
        register.add_argument(f"--{key}", default=value, help=f"each Node's {key} (default {value})")
    return parser


def _body(args: argparse.Namespace) -> int:
    cluster = Cluster(Layout.of(args.dir))
    if args.command == "up":
        cluster.up(gang_schedulers=tuple(name for name in args.schedulers.split(",") if name))
    elif args.command == "schedulers":
        if not cluster.layout.kubeconfig.exists():
            raise ClusterError(f"no cluster at {cluster.layout.root}: run `make cluster-up` first")
        cluster.up(gang_schedulers=tuple(args.names))
    elif args.command == "down":
        cluster.down()
    elif args.command == "kubelet":
        cluster.kubelet(args.kubelet_args)
    elif args.command in ("nodes", "stop-nodes"):
        specs = specs_from_values(args.values) if args.command == "nodes" else []
        if not cluster.layout.kubeconfig.exists():
            raise ClusterError(f"no cluster at {cluster.layout.root}: run `make cluster-up` first")
        real = RealNodes(cluster.layout)
        if args.command == "stop-nodes":
            for name in args.names:
                real.stop(name)
            print(f"stopped {', '.join(args.names)}")
            return 0
        running = [spec.name for spec in specs if spec.name in real.nodes() and real.running(spec.name)]
        if running:
            print(f"running already: {', '.join(running)}")
        real.start(specs)  # the running ones only get the images they lack
    else:
        nodes = node_objects(args.values, {key: getattr(args, key) for key in DEFAULT_CAPACITY})
        if not cluster.layout.kubeconfig.exists():
            raise ClusterError(f"no cluster at {cluster.layout.root}: run `make cluster-up` first")
        cluster.port = ports(cluster.layout, PORTS)
        register(cluster, nodes)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "kubelet":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.kubelet_args = extra  # the kubelet's own options, checked by the kubelet
    return run_command(lambda: _body(args), "testbed.cluster")


if __name__ == "__main__":
    sys.exit(main())
