"""`torchdag status`, `logs` and `diagnose`: what happened to a job's ranks, read from the
cluster (cluster.py, through the official `kubernetes` client: `pip install '.[cluster]'` in a checkout)
and judged by pure functions (core.py) against known signatures (signatures.yaml)."""

# NAME for the newest torchdag Workflow in the namespace (the cluster commands take it for a
# Workflow's or a job's name); here, so that cli.py and cluster.py share it without importing each other.
LATEST = "@latest"
