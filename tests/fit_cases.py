"""Invalid values files of issue 18's items 8-11 (addresses, RBAC, ports, timeouts), run
through both renderers by tests/test_front_door_fit.py. The same shape as
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
    _case("name-equal-to-other-nodes-address", "nodes[1].address", "also the address of nodes[0]",
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
