"""Real nodes for the local cluster: the kubelet, containerd and runc, one set per node on this
machine (nodes.py), their network (network.py), configuration (configs.py, containerd.py) and
the kubernetes Service's proxy (forward.py). docs/nodes.md says what is real and what is not."""
