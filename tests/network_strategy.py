"""The pod network's keys for the parity strategy (tests/chart/test_chart_parity.py): what it
draws, and how a drawn values file is made to fit the Pod Security level it names (the
refusals themselves are tested in tests/render/test_network.py)."""

from __future__ import annotations

from hypothesis import strategies as st

from torchdag.catalog import is_ascend

NICS = ["eth0", "net1", "ens1f0np0"]
DOMAINS = ["cluster.local", "corp.example", "k8s"]
POD_SECURITY = st.sampled_from(["none", "baseline", "restricted"])


def network(section):
    """network: {mode, nic, clusterDomain}; `section` is the parity test's optional-keys builder."""
    return section(mode=st.sampled_from(["", "host", "pod"]), nic=st.sampled_from(NICS),
                   clusterDomain=st.sampled_from(DOMAINS))


def fit(values: dict) -> None:
    """Make drawn values valid: network.mode host keeps hostNetwork true, and a Pod Security
    level gets the pod network and what else that level wants."""
    net = values.get("network") if isinstance(values.get("network"), dict) else None
    if net and net.get("mode") == "host":
        values["hostNetwork"] = True
    level = values.get("podSecurity", "none")
    if level == "none":
        return
    values["network"] = {**(net or {}), "mode": "pod"}
    values["volumes"] = [{key: value for key, value in volume.items() if key != "hostPath"}
                         | ({"persistentVolumeClaim": {"claimName": "data"}} if "hostPath" in volume else {})
                         for volume in values.get("volumes") or []]
    if any(is_ascend(node.get("accelerator", "cpu")) for node in values["nodes"]):
        values["ascend"] = {**(values.get("ascend") or {}), "mountDriver": False}
    security = values.get("containerSecurity")
    if isinstance(security, dict):
        if security.get("seccompProfile") == "Unconfined":
            security["seccompProfile"] = "RuntimeDefault"
        security["addCapabilities"] = [c for c in security.get("addCapabilities") or [] if c == "NET_BIND_SERVICE"]
    if level == "restricted":
        values["containerSecurity"] = {**(security or {}), "allowPrivilegeEscalation": False,
                                       "dropAllCapabilities": True, "seccompProfile": "RuntimeDefault"}
        context = values.get("securityContext")
        if isinstance(context, dict):
            if context.get("runAsNonRoot") is False:
                del context["runAsNonRoot"]
            if context.get("runAsUser") == 0:
                context["runAsUser"] = 1000
