"""`torchdag status`, `logs` and `diagnose`: what happened to a job's ranks, read from the
cluster (cluster.py, through the official `kubernetes` client: `pip install '.[cluster]'` in a checkout)
and judged by pure functions (core.py) against known signatures (signatures.yaml)."""
