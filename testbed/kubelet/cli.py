"""`python -m testbed.kubelet --kubeconfig .cluster/kubeconfig --nodes a,b` (docs/kubelet.md)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from ..kube import Kube
from ..runtime import CHECKOUT, Options, parse_map, torchdag_image_maps
from .kubelet import Kubelet, Recorder
from .logs import LogServer
from .sandbox import can_mount
from .workflows import WorkflowWatch

DEFAULT_ARGOEXEC = CHECKOUT / ".tools" / "bin" / "argoexec"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m testbed.kubelet",
        description="A kubelet that runs the pods bound to its Nodes as local processes (docs/kubelet.md).")
    p.add_argument("--kubeconfig", required=True, help="kubeconfig of the API server (e.g. .cluster/kubeconfig)")
    nodes = p.add_mutually_exclusive_group(required=True)
    nodes.add_argument("--nodes", help="comma-separated Node names this kubelet serves")
    nodes.add_argument("--selector", help="serve every Node matching this label selector (looked up every 10 s)")
    p.add_argument("--state-dir", default=None,
                   help="pods' files and logs/<namespace>/<pod>/<container>.log "
                        "(default: the kubeconfig's folder, e.g. .cluster)")
    p.add_argument("--map", dest="maps", action="append", default=[], type=parse_map, metavar="SRC=DST",
                   help="map an image path prefix to DST (repeatable; /opt/torchdag=<this checkout> is always last, "
                        "unless --no-checkout-map)")
    p.add_argument("--no-checkout-map", action="store_true",
                   help="do not map /opt/torchdag onto this checkout: a pod runs only what its Workflow and --map give")
    p.add_argument("--torchdag-image", action="store_true",
                   help="map what torchdag's training image holds (the Dockerfile's COPY lines: trainer/, the "
                        "catalogue) onto this checkout, and nothing else of it; with --no-checkout-map, what a pod of "
                        "that image runs on a real node")
    p.add_argument("--cpu", action="store_true",
                   help="as `make smoke --cpu`: GPU/NPU pods train on CPU (gloo, no set_env wrapper), said in the log")
    p.add_argument("--keep-addresses", action="store_true",
                   help="keep the rendered master address and NIC names (default: 127.0.0.1 and lo, as make smoke)")
    p.add_argument("--argoexec", default=str(DEFAULT_ARGOEXEC),
                   help="Argo's executor, built from Argo's module (default: %(default)s)")
    p.add_argument("--wait", choices=("report", "real"), default="report",
                   help="Argo's wait sidecar: 'report' = not run, reported exit 0 with a message saying so "
                        "(default); 'real' = run `argoexec wait` (needs RBAC for workflowtaskresults)")
    p.add_argument("--no-exec", action="store_true",
                   help="benchmarks: report every pod Running, then Succeeded, without starting processes")
    p.add_argument("--record", metavar="FILE",
                   help="with --no-exec: append each container's process as it would start (argv, env, cwd; "
                        "JSON lines) to FILE")
    p.add_argument("--no-exec-seconds", type=float, default=0.0, metavar="S",
                   help="with --no-exec: seconds between Running and Succeeded (default 0; SIGUSR1 ends them all now)")
    p.add_argument("--no-exec-hold", metavar="LABEL", default=None,
                   help="with --no-exec-seconds: hold only the pods carrying this label key (the training pods: "
                        "torchdag.io/node-rank); the others end at once, as a real job's watch and host check do")
    p.add_argument("--serve-port", type=int, default=0, metavar="PORT",
                   help="the kubelet API (container logs for kubectl logs) on 127.0.0.1:PORT (default: any free "
                        "port, published in each Node's status)")
    p.add_argument("--lease-every", type=float, default=10.0, metavar="S",
                   help="renew every Node's Lease each S seconds (kubelet: 10)")
    return p


def resolve_nodes(api: Kube, args) -> list[str]:
    if args.nodes:
        return [n.strip() for n in args.nodes.split(",") if n.strip()]
    listed = api.request("GET", "/api/v1/nodes", query={"labelSelector": args.selector})
    return [n["metadata"]["name"] for n in listed["items"]]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.record and not args.no_exec:
        parser.error("--record goes with --no-exec")
    api = Kube(args.kubeconfig)
    nodes = resolve_nodes(api, args)
    if not nodes and not args.selector:
        print(f"error: no Nodes to serve ({args.nodes or args.selector!r})", file=sys.stderr)
        return 2
    state_dir = Path(args.state_dir) if args.state_dir else Path(args.kubeconfig).resolve().parent
    maps = list(args.maps) + (torchdag_image_maps() if args.torchdag_image else [])
    options = Options(maps=maps, cpu=args.cpu, checkout_map=not args.no_checkout_map)
    if args.keep_addresses:
        options.address, options.nic = None, None
    argoexec = args.argoexec if Path(args.argoexec).exists() else None
    kubelet = Kubelet(api, nodes, state_dir=state_dir, options=options, argoexec=argoexec, wait=args.wait,
                      no_exec=args.no_exec, no_exec_seconds=args.no_exec_seconds,
                      no_exec_hold=args.no_exec_hold, lease_every=args.lease_every,
                      record=Recorder(args.record) if args.record else None)
    missing = kubelet.keeper.load()
    if missing:
        print(f"error: no such Node: {', '.join(missing)} (register them first: "
              "python -m testbed.cluster register VALUES)", file=sys.stderr)
        return 2
    say = kubelet.say
    if api.cfg.ssl_ca_cert:  # the API server's client certificate is checked against the cluster's CA
        server = LogServer(kubelet.log_path, kubelet.pod_running, api.cfg.ssl_ca_cert, state_dir / "kubelet-pki",
                           args.serve_port)
        server.start()
        kubelet.keeper.serving_port = server.port
        say(f"kubelet API (container logs) on https://127.0.0.1:{server.port}")
    say(f"serving {len(nodes)} node(s): {', '.join(nodes[:8])}{' ...' if len(nodes) > 8 else ''}; "
        f"API server {api.cfg.host}; logs in {kubelet.logs_dir}")
    if args.no_exec:
        say("--no-exec: pods are reported Running, then Succeeded; no process is started")
    else:
        say("stand-ins: " + "; ".join([
            "addresses -> 127.0.0.1, NICs -> lo" if not args.keep_addresses else "addresses and NICs as rendered",
            "GPU/NPU pods on CPU (gloo, TORCHDAG_DEVICE=cpu, no set_env wrapper)" if args.cpu
            else "GPU/NPU pods need the devices here",
            f"/opt/torchdag -> {CHECKOUT}" if not args.no_checkout_map else "/opt/torchdag not mapped",
            *(["torchdag's image: " + ", ".join(f"{src} -> {dst}" for src, dst in torchdag_image_maps())]
              if args.torchdag_image else []),
            f"Argo's wait sidecar: {args.wait}",
            f"argoexec: {argoexec or 'not built (argoexec pods fail to start)'}",
            "per-pod mounts (unshare --mount)" if can_mount() else "not root: no per-pod mounts"]))
    begin = time.monotonic()
    failed = kubelet.keeper.beat_all(status=True)
    say(f"first heartbeat round (Ready status and Lease of {len(nodes)} node(s)): {time.monotonic() - begin:.1f} s"
        f"{f', {failed} failed' if failed else ''}")
    threads = [threading.Thread(target=kubelet.keeper.run, name="heartbeats", daemon=True),
               threading.Thread(target=kubelet.watch_pods, name="pod watch", daemon=True)]
    if args.selector:
        threads.append(threading.Thread(target=kubelet.follow_selector, args=(args.selector,), name="nodes",
                                        daemon=True))
    if not args.no_exec:
        flows = WorkflowWatch(kubelet)
        threads += [threading.Thread(target=flows.watch, name="workflow watch", daemon=True),
                    threading.Thread(target=flows.tick, name="deadlines", daemon=True)]
    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # The scale bench's "done measuring": every pod held Running by --no-exec-seconds ends now
    # (pods that start later are held as ever: the next job's).
    # In a thread of its own: the handler runs on the main thread, which may hold the kubelet's lock.
    signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=kubelet.release, daemon=True).start())
    for thread in threads:
        thread.start()
    stop.wait()
    say("stopping: every process started here is stopped")
    kubelet.shutdown()
    return 0
