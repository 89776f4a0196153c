"""Restarts (failurePolicy) as the Workflow holds them: which recovery applies, and the typed
retry policy (torchdag/plan_model.py) as Argo's retryStrategy. chart/templates/_recovery.tpl
is its twin."""

from __future__ import annotations

from .plan_model import RetryPolicy


def node_recovery(values: dict) -> bool:
    """failurePolicy.recovery node with restarts: each node's task retries on its own."""
    policy = values["failurePolicy"]
    return bool(policy["maxRestarts"]) and policy["recovery"] == "node"


def argo_retry(policy: RetryPolicy | None) -> dict | None:
    """Restarts as Argo's retryStrategy (the typed policy's numbers as its strings, "10s"): under
    recovery job Argo retries the `train` DAG when any task fails or its pod is lost (retryPolicy
    Always covers both), so every node starts again; under recovery node each node's wrapper."""
    if policy is None:
        return None
    backoff = {"duration": f"{policy.backoff_seconds}s", "factor": str(policy.factor)}
    if policy.cap_seconds is not None:
        backoff["cap"] = f"{policy.cap_seconds}s"
    return {"limit": str(policy.limit), "retryPolicy": policy.retry_policy, "backoff": backoff}
