"""What a real node's kubelet and CNI read. Every setting that differs from a kubelet's
defaults says why: most are what this machine needs (cgroup v1, no systemd, one disk and one
memory shared by all nodes), the rest keep nodes of one machine apart."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .network import Slot


def kubelet_config(*, slot: Slot, address: str, port: int, healthz_port: int, runtime_socket: Path,
                   cgroup_root: str, client_ca: Path) -> str:
    """The node's KubeletConfiguration. The kubelet runs in the node's mount namespace
    (testbed/node/nodes.py), where /var/lib/kubelet, /var/log/pods and /var/log/containers
    are the node's own: its root dir and log folders keep their defaults."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The kubelet API (logs, exec) on the node's own address, where the API server reaches it
        # (the Node's InternalIP); a port of its own, since every node is on this machine.
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        # Only the API server's client certificate (signed by the cluster CA) and tokens it
        # vouches for get in; what they may do is the API server's RBAC (SubjectAccessReview).
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(client_ca)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        # This machine mounts cgroup v1 hierarchies (a hybrid layout) and runs no systemd:
        # cgroupfs, and cgroup v1 allowed (Kubernetes refuses it unless told otherwise).
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        # Each node's pods under a cgroup root of its own: a kubelet removes pod cgroups it does
        # not know under its root, so nodes sharing /kubepods would stop each other's pods.
        "cgroupRoot": cgroup_root,
        "cgroupsPerQOS": True,
        # Nodes share the machine: no node may fence off the machine's CPUs and memory for itself.
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        # Lowering a process's oom_score_adj needs CAP_SYS_RESOURCE, which this machine withholds.
        "oomScoreAdj": 0,
        # One disk for all nodes and every other user of the machine: pods are not evicted, nor
        # images collected, because someone else filled the disk (only when it is really full).
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
                         "imagefs.available": "1%", "imagefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # Pods' DNS: the cluster's CoreDNS; no resolver of this machine is handed to pods
        # (dnsPolicy Default gets none), so no pod asks a server outside the cluster.
        "clusterDNS": [slot.dns_ip],
        "clusterDomain": "cluster.local",
        "resolvConf": "",
        # FlexVolume plugins under the node's own /var/lib/kubelet, not the machine's /usr/libexec.
        "volumePluginDir": "/var/lib/kubelet/volume-plugins",
        # iptables is the machine's, not the node's: nothing here needs the kubelet's hint chain.
        "makeIPTablesUtilChains": False,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
    }
    return yaml.safe_dump(config, sort_keys=False)


def cni_conflist(*, slot: Slot, k: int, bridge: str, ipam_dir: Path) -> str:
    """The CNI bridge plugin on the node's bridge, host-local addresses of the node's pod subnet.
    The bridge already has the gateway address (testbed/node/network.py): isGateway would have
    the plugin switch on forwarding for the whole machine."""
    subnet = slot.pod_subnet(k)
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": "torchdag",
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": False,
            "ipMasq": False,
            "hairpinMode": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": str(subnet), "gateway": slot.pod_gateway(k)}]],
                     "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(ipam_dir)},
        }],
    }, indent=1) + "\n"


def corefile(*, slot: Slot, kubeconfig: Path) -> str:
    """CoreDNS for the cluster (tools/coredns: its kubernetes plugin) on the DNS service address."""
    return (f"cluster.local:53 {{\n  bind {slot.dns_ip}\n  errors\n"
            f"  kubernetes cluster.local {{\n    kubeconfig {kubeconfig}\n  }}\n}}\n")
