"""Invalid values files of issue 18's items 8-11 (addresses, RBAC, ports, timeouts), run
through both renderers by tests/front_door/test_front_door_fit.py. The same shape as
tests/bad_cases.py (a whole file, the field render.py names, a fragment of its message),
kept apart so the two lists grow without touching each other."""

from __future__ import annotations

from bad_cases import _all, _case, _set

FIT_CASES = [
    # Item 10: names of numbers only are IPv4 addresses to the C resolver (inet_aton): each
    # must be one in canonical form, or the node silently loses HCCL_IF_IP.
    _case("address-quad-out-of-range", "nodes[0].address", "'10.30.0.256' is made of numbers only",
          _set("nodes.0.address", "10.30.0.256")),
    _case("address-quad-leading-zero", "nodes[1].address", "without leading zeros (e.g. 10.30.0.2)",
          _set("nodes.1.address", "10.30.0.02")),
    _case("address-three-parts", "nodes[2].address", "'10.30.2' is made of numbers only",
          _set("nodes.2.address", "10.30.2")),
    _case("address-five-parts", "nodes[0].address", "is made of numbers only",
          _set("nodes.0.address", "10.30.0.2.1")),
    _case("address-one-number", "nodes[0].address", "'167772161' is made of numbers only",
          _set("nodes.0.address", "167772161")),
    _case("address-hex-parts", "nodes[0].address", "'0x7f.0.0.1' is made of numbers only",
          _set("nodes.0.address", "0x7f.0.0.1")),
    _case("name-as-address-bad-quad", "nodes[1].name", "is this node's address too (address is not set)",
          _set("nodes.1.name", "192.168.110.256")),
    _case("address-equal-to-other-nodes-name", "nodes[2].address", "also the address of nodes[0]",
          _set("nodes.2.address", "192.168.110.22")),
    # nodes[1] has no address key: its name is the address the rule names
    _case("name-equal-to-other-nodes-address", "nodes[1].name", "also the address of nodes[0]",
          _all(_set("nodes.0.address", "10.30.0.2"), _set("nodes.1.name", "10.30.0.2"))),
]

FIT_CASES += [
    # Item 9: the ServiceAccount the chart creates must be named; rbac.create binds
    # serviceAccountName only while the pods mount a token (else the executor's account).
    _case("create-service-account-without-name", "serviceAccountName", "must be set when rbac.createServiceAccount",
          _all(_set("rbac", {"createServiceAccount": True}), _set("automountServiceAccountToken", False),
               _set("executorServiceAccountName", "argo-executor"))),
    _case("rbac-create-with-executor-account-but-token-mounted", "serviceAccountName",
          "or rbac.create while the pods mount a token",
          _all(_set("rbac", {"create": True}), _set("executorServiceAccountName", "argo-executor"))),
]

FIT_CASES += [
    # Item 8: ports that cannot work. Below 1024 on the host network only a root process with
    # CAP_NET_BIND_SERVICE binds; HCCL takes 60000-60015 on Ascend nodes.
    _case("port-privileged-with-capabilities-dropped", "port", "80 is below 1024", _set("port", 80)),
    _case("port-privileged-as-non-root", "port", "run as a non-root user",
          _all(_set("port", 1023), _set("containerSecurity", {"addCapabilities": ["NET_BIND_SERVICE"]}),
               _set("securityContext", {"runAsUser": 1000}))),
    _case("port-privileged-run-as-non-root", "port", "is below 1024",
          _all(_set("port", 443), _set("containerSecurity", {"dropAllCapabilities": False}),
               _set("securityContext", {"runAsNonRoot": True}))),
    _case("port-hccl-base", "port", "60000 is one of the host ports HCCL takes", _set("port", 60000)),
    _case("port-hccl-last", "port", "60015 is one of the host ports HCCL takes", _set("port", 60015)),
    _case("port-hccl-one-ascend-node", "port", "is one of the host ports HCCL takes",
          _all(_set("port", 60007), _set("backend", "gloo"), _set("nodes.0.accelerator", "cpu"),
               _set("nodes.1.accelerator", "cpu"))),
    # Item 11: timeouts that contradict each other.
    _case("process-group-below-hccl-step", "timeouts.processGroup", "60 is below 68 s",
          _set("timeouts", {"processGroup": 60})),
    _case("process-group-one", "timeouts.processGroup", "1 is below 68 s", _set("timeouts", {"processGroup": 1})),
    _case("restarts-past-deadline", "failurePolicy.maxRestarts", "at most 4 fit",
          _set("failurePolicy", {"maxRestarts": 5, "backoffSeconds": 3600})),
    _case("restarts-past-short-deadline", "failurePolicy.maxRestarts", "at most 0 fit",
          _all(_set("failurePolicy", {"maxRestarts": 1}), _set("timeouts", {"workflowDeadline": 30}))),
    _case("restarts-many", "failurePolicy.maxRestarts", "100 restarts cannot all happen",
          _set("failurePolicy", {"maxRestarts": 100})),
]


def fit_values(values: dict) -> dict:
    """A drawn values file moved off the refusals of items 8 and 11 (tests/chart/test_chart_parity.py's
    strategy draws valid files): a port that can be bound, processGroup at least HCCL's step
    on Ascend, no more restarts than the deadline holds."""
    ascend = any(node.get("accelerator", "cpu").startswith("ascend") for node in values["nodes"])
    port = values.get("port", 29500)
    security, context = values.get("containerSecurity") or {}, values.get("securityContext") or {}
    bindless = security.get("dropAllCapabilities", True) and "NET_BIND_SERVICE" not in (
        security.get("addCapabilities") or []) or context.get("runAsUser", 0) > 0 or context.get("runAsNonRoot")
    mode = (values.get("network") or {}).get("mode") or ("host" if values.get("hostNetwork", True) else "pod")
    if port < 1024 and mode == "host" and bindless or ascend and 60000 <= port <= 60015:
        values["port"] = port + 2048
    timeouts = values.get("timeouts") or {}  # the strategy draws no null section
    if ascend and (timeouts.get("processGroup") or 68) < 68:
        timeouts["processGroup"] = 68
    policy, deadline = values.get("failurePolicy") or {}, timeouts.get("workflowDeadline", 86400)
    if policy.get("maxRestarts") and deadline:
        step, waited, fit = policy.get("backoffSeconds", 30), 0, 0
        while fit < policy["maxRestarts"] and waited + step * 2**fit < deadline:
            waited, fit = waited + step * 2**fit, fit + 1
        policy["maxRestarts"] = fit
    return values
