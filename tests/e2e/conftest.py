"""The `job` fixture of the e2e tests here (e2e_helpers.py, beside them): a rendered job's
Nodes, namespace and kubelet on the local cluster (tests/cluster_helpers.py's `local_cluster`)."""

from e2e_helpers import job  # noqa: F401 (a fixture, for every test in this folder)
