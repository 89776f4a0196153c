"""Device access on Ascend nodes: the pod securityContext of an Ascend shape.

The device files (/dev/davinci*, davinci_manager, devmm_svm, hisi_hdc) belong to
HwHiAiUser (uid/gid 1000 by default), mode 0660. Root without CAP_DAC_OVERRIDE, as every
container runs with `dropAllCapabilities`, cannot open them (Project-HAMi/ascend-device-plugin#139:
`dcmi module initialize failed. ret is -8005`, `torch.npu.device_count() == 0`). Joining the
device group (`ascend.deviceGroup`, through supplementalGroups) lets it open them and keeps
every capability dropped. Argo takes a template's securityContext in place of the
Workflow's, so the shape's repeats the Workflow's fields and adds the group.
"""

from __future__ import annotations


def ascend_pod_security(values: dict, ascend: bool) -> tuple[str, ...]:
    """The template-level securityContext of a shape, as YAML lines (relative indentation);
    () when the Workflow's own applies (not Ascend, or ascend.deviceGroup null)."""
    group = values["ascend"].get("deviceGroup")
    if not ascend or group is None:
        return ()
    given = values.get("securityContext") or {}
    restricted = values["podSecurity"] == "restricted"
    lines = [f"{key}: {int(given[key])}" for key in ("runAsUser", "runAsGroup", "fsGroup") if key in given]
    if "runAsNonRoot" in given or restricted:
        lines.append(f"runAsNonRoot: {'true' if given.get('runAsNonRoot', True) else 'false'}")
    groups = [int(g) for g in given.get("supplementalGroups") or []]
    groups += [] if int(group) in groups else [int(group)]
    lines.append(f"supplementalGroups: [{', '.join(str(g) for g in groups)}]")
    if restricted:
        lines += ["seccompProfile:", '  type: "RuntimeDefault"']
    return tuple(lines)
