"""The fixtures of the e2e tests here: `job` and `kubelet_job` (e2e_helpers.py: a test's
namespace with its jobs on the local cluster's real nodes, or on the process kubelet) and
`real_nodes` (realnodes_helpers.py: the nodes made of the kubelet, containerd and runc), all
on tests/cluster_helpers.py's `local_cluster`."""

from e2e_helpers import job, kubelet_job  # noqa: F401 (fixtures, for every test in this folder)
from realnodes_helpers import real_nodes, real_nodes_cordoned  # noqa: F401 (fixtures, as above)
