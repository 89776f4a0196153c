"""The process kubelet: runs the pods a real scheduler binds to its Nodes as local processes
and reports them to the API server as a kubelet would (docs/kubelet.md)."""
