"""A local Kubernetes control plane with Argo's real workflow-controller, as processes on loopback.

    python -m testbed.cluster up [--dir DIR]            # make cluster-up
    python -m testbed.cluster nodes VALUES [--dir DIR]  # make cluster-nodes VALUES=...
    python -m testbed.cluster down [--dir DIR]          # make cluster-down

Every binary is built from Go modules at pinned versions into .tools/bin by the Makefile
(tools/cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the
certificate helper; tools/argo: workflow-controller, argoexec). Nothing runs in a container
and nothing listens beyond 127.0.0.1. The state lives in one directory (default .cluster/):
pki/, etcd/, logs/<component>.log, <component>.pid, state.json (the ports) and kubeconfig.
No kubelet runs here: Nodes are registered by `nodes` (Ready, untainted) and the pods bound
to them are run by the process kubelet (testbed/kubelet). See docs/e2e.md.

Modules: layout.py (where things are), procs.py (starting, finding and stopping the
processes), manifests.py (kubeconfig, configs, CRDs), up.py (bring up and wait), nodes.py
(Nodes from a values file), __main__.py (command line).
"""
