"""The entrypoint DAG's `retryStrategy`, read as Argo's controller reads it: the whole
DAG (every node) runs again after a failure, `{{retries}}` counting the restarts.

Argo (workflow/controller/operator.go, processNodeRetries): `limit` is an IntOrString
(no limit: retry for ever); `retryPolicy` defaults to OnFailure; Always and OnFailure
retry a failed node, OnError and OnTransientError do not; the wait before restart n is
`backoff.duration * backoff.factor^(n-1)` (capped by `backoff.cap`), and
no restart starts when `backoff.maxDuration` after the first attempt's start would pass
during the wait. Durations are Go durations ("10s", "1m30s") or plain seconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import EXIT_INVALID, LocalRunError

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
RETRYING_POLICIES = ("Always", "OnFailure")
KNOWN_POLICIES = RETRYING_POLICIES + ("OnError", "OnTransientError")
KNOWN_KEYS = {"limit", "retryPolicy", "backoff", "affinity", "expression"}


def parse_duration(value, where: str) -> float:
    """Seconds from an Argo duration: an integer (seconds) or a Go duration string."""
    text = str(value).strip()
    if re.fullmatch(r"\d+", text):
        return float(text)
    body = text[1:] if text[:1] in "+-" else text
    if body and "".join(m.group(0) for m in _GO_DURATION.finditer(body)) == body:
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _GO_DURATION.findall(body))
        return -seconds if text.startswith("-") else seconds
    raise LocalRunError(f"{where}: {value!r} is not a duration (e.g. 10, \"10s\", \"1m30s\")", EXIT_INVALID)


def _int_or_string(value, where: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise LocalRunError(f"{where}: {value!r} is not an integer", EXIT_INVALID) from None


def _seconds_text(seconds: float) -> str:
    return f"{round(seconds, 2):g} s"


@dataclass(frozen=True)
class RetryPolicy:
    template: str  # the DAG template that carries it
    limit: int | None  # None: no limit
    policy: str = "OnFailure"
    duration: float = 0.0  # seconds before the first restart
    factor: int | None = None
    cap: float | None = None
    max_duration: float | None = None

    def delay(self, restart: int) -> float:
        """Seconds to wait before restart n (1-based), before any --backoff-scale."""
        wait = self.duration
        if self.factor is not None and self.factor > 0:
            wait = self.duration * self.factor ** (restart - 1)
        if self.cap is not None:
            wait = min(wait, self.cap)
        return wait

    def of_limit(self, restart: int) -> str:
        """`1/2`, or `1` with no limit."""
        return f"{restart}/{self.limit}" if self.limit is not None else f"{restart} (no limit)"

    def refusal(self, restart: int, elapsed: float, wait: float) -> str | None:
        """Why restart n does not happen after a failure (None: it does)."""
        if self.policy not in RETRYING_POLICIES:
            return f"retryPolicy {self.policy} does not retry a failed node"
        if self.limit is not None and restart > self.limit:
            return f"no restarts left (limit {self.limit})"
        if self.max_duration is not None and elapsed + wait > self.max_duration:
            return f"backoff.maxDuration {_seconds_text(self.max_duration)} would pass before restart {restart}"
        return None

    def describe(self, scale: float = 1.0) -> str:
        """`retryStrategy on train: restarts up to 2, retryPolicy Always, backoff 10 s x2 (waits 10, 20 s)`"""
        limit = f"up to {self.limit}" if self.limit is not None else "no limit"
        text = f"retryStrategy on {self.template}: restarts {limit}, retryPolicy {self.policy}"
        if self.duration:
            text += f", backoff {_seconds_text(self.duration)}" + (f" x{self.factor}" if self.factor else "")
            shown = min(self.limit, 3) if self.limit is not None else 3
            waits = ", ".join(f"{round(self.delay(n) * scale, 2):g}" for n in range(1, shown + 1))
            more = ", ..." if self.limit is None or self.limit > shown else ""
            scaled = f"; x{scale:g} by --backoff-scale" if scale != 1 else ""
            if waits:
                text += f" (waits {waits}{more} s{scaled})"
        else:
            text += ", no backoff"
        if self.max_duration is not None:
            text += f", maxDuration {_seconds_text(self.max_duration)}"
        return text


def retry_policy(doc: dict, entry: dict) -> RetryPolicy | None:
    """The entrypoint DAG's retryStrategy; LocalRunError for retries this runner cannot
    reproduce (per-pod retries, expressions) or Argo would refuse."""
    spec = doc.get("spec") or {}
    if spec.get("retryStrategy"):
        raise LocalRunError("spec.retryStrategy (a default for every template, pods included) is not simulated; "
                            "localrun restarts the whole DAG from the entrypoint DAG's retryStrategy only")
    for template in spec.get("templates") or []:
        if template is not entry and template.get("retryStrategy"):
            raise LocalRunError(f"template {template.get('name')!r}: retryStrategy on a single pod is not simulated; "
                                "localrun restarts the whole DAG from the entrypoint DAG's retryStrategy only")
    raw = entry.get("retryStrategy")
    if not raw:
        return None
    where = f"template {entry['name']!r}: retryStrategy"
    if not isinstance(raw, dict):
        raise LocalRunError(f"{where}: must be a mapping", EXIT_INVALID)
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        raise LocalRunError(f"{where}: unknown field(s) {', '.join(unknown)}", EXIT_INVALID)
    if raw.get("expression"):
        raise LocalRunError(f"{where}.expression is not evaluated here; remove it to smoke-test the restarts")
    limit = _int_or_string(raw["limit"], f"{where}.limit") if raw.get("limit") is not None else None
    if limit is not None and limit < 0:
        raise LocalRunError(f"{where}.limit: {limit} is negative", EXIT_INVALID)
    policy = str(raw.get("retryPolicy") or "OnFailure")
    if policy not in KNOWN_POLICIES:
        raise LocalRunError(f"{where}.retryPolicy: {policy!r} is not one of {', '.join(KNOWN_POLICIES)}", EXIT_INVALID)
    backoff = raw.get("backoff") or {}
    duration = parse_duration(backoff["duration"],
                              f"{where}.backoff.duration") if backoff.get("duration") not in (None, "") else 0.0
    factor = _int_or_string(backoff["factor"], f"{where}.backoff.factor") if backoff.get("factor") not in (None,
                                                                                                           "") else None
    cap = parse_duration(backoff["cap"], f"{where}.backoff.cap") if backoff.get("cap") not in (None, "") else None
    max_duration = (parse_duration(backoff["maxDuration"], f"{where}.backoff.maxDuration")
                    if backoff.get("maxDuration") not in (None, "") else None)
    return RetryPolicy(entry["name"], limit, policy, max(duration, 0.0), factor, cap, max_duration)
