"""The refused cases, as data: invalid values files (BAD_CASES), and those of the addresses,
RBAC, ports, timeouts and restarts that must fit (FIT_CASES), both run by render.py's test
(tests/render/test_render.py) and the chart's rejection-parity test
(tests/chart/test_chart_parity.py); the rules beside them in tests/values/test_fit_rules.py.

Each case is a whole values file, the field path the error must name, and a fragment of
render.py's message (the chart only has to name the field). fit_values moves a drawn valid
file off the FIT_CASES refusals.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

BASE = {
    "name": "bladetrain",
    "image": "192.168.110.125:8443/agent/ppo_torch:3.1",
    "script": "/code/rl/BladeTrain.py",
    "args": ["--type", "example"],
    "port": 25195,
    "nodes": [
        {"name": "192.168.110.22", "nic": "enp11s0f0", "accelerator": "ascend310p", "master": True},
        {"name": "192.168.110.23", "nic": "enp125s0f0", "accelerator": "ascend310p"},
        {"name": "192.168.110.24", "nic": "eno1", "accelerator": "ascend310p"},
    ],
}


@dataclass(frozen=True)
class BadCase:
    id: str
    text: str  # a complete values file
    field: str  # the field path the message must name, as render.py prints it
    fragment: str  # part of render.py's message

    def __str__(self) -> str:  # pytest ids
        return self.id


def _case(case_id: str, field: str, fragment: str, change) -> BadCase:
    values = yaml.safe_load(yaml.safe_dump(BASE))
    change(values)
    return BadCase(case_id, yaml.safe_dump(values, sort_keys=False, allow_unicode=True), field, fragment)


def _set(path: str, value):
    """A change that sets one dotted path, e.g. "nodes.2.nic"."""

    def change(values):
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target = values
        for part in parents:
            target = target[part]
        target[last] = value

    return change


def _delete(path: str):
    def change(values):
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target = values
        for part in parents:
            target = target[part]
        del target[last]

    return change


def _raw(case_id: str, field: str, fragment: str, old: str, new: str) -> BadCase:
    """A case whose text no Python value dumps to (a plain `1e400`): BASE's YAML, `old` replaced by `new`."""
    text = yaml.safe_dump(BASE, sort_keys=False, allow_unicode=True)
    assert old in text, old
    return BadCase(case_id, text.replace(old, new, 1), field, fragment)


def _pod_security(level: str):
    """A Pod Security level with what it needs of BASE (Ascend nodes): the pod network, no driver mounts."""
    return _all(_set("podSecurity", level), _set("network", {"mode": "pod"}), _set("ascend", {"mountDriver": False}))


def _all(*changes):
    def change(values):
        for each in changes:
            each(values)

    return change


BAD_CASES = [
    _case("typo-top-level", "imagePullPolicyy", "did you mean 'imagePullPolicy'", _set("imagePullPolicyy", "Always")),
    _case("typo-node-key", "nodes[1].nicc", "did you mean 'nic'", _set("nodes.1.nicc", "eth0")),
    _case("missing-image", "image", "is required", _delete("image")),
    _case("missing-script", "script", "is required", _delete("script")),
    _case("missing-nodes", "nodes", "is required", _delete("nodes")),
    _case("empty-nodes", "nodes", "at least 1 item", _set("nodes", [])),
    _case("node-without-name", "nodes[1].name", "is required", _delete("nodes.1.name")),
    _case("duplicate-node-name", "nodes[2].name", "duplicates nodes[0].name", _set("nodes.2.name", "192.168.110.22")),
    _case("duplicate-address", "nodes[2].address", "also the address of nodes[1]",
          _set("nodes.2.address", "192.168.110.23")),
    _case("two-masters", "nodes[2].master", "more than one master", _set("nodes.2.master", True)),
    _case("port-zero", "port", "at least 1", _set("port", 0)),
    _case("port-too-big", "port", "at most 65535", _set("port", 70000)),
    _case("port-not-a-number", "port", "must be an integer", _set("port", "25195x")),
    _case("devices-zero", "nodes[0].devices", "at least 1", _set("nodes.0.devices", 0)),
    _case("devices-string", "nodes[0].devices", "must be an integer", _set("nodes.0.devices", "2")),
    _case("nic-too-long", "nodes[2].nic", "'enp11s0f0x123456' is longer than 15 characters",
          _set("nodes.2.nic", "enp11s0f0x123456")),
    _case("nic-slash", "nodes[0].nic", "is not an interface name", _set("nodes.0.nic", "eth0/1")),
    _case("nic-space", "nodes[1].nic", "is not an interface name", _set("nodes.1.nic", "eth 0")),
    _case("unknown-accelerator", "nodes[0].accelerator", "is not one of", _set("nodes.0.accelerator", "gpu")),
    _case("node-name-uppercase", "nodes[1].name", "is not a Kubernetes hostname", _set("nodes.1.name", "Node_1")),
    _case("node-name-too-long", "nodes[1].name", "longer than 63 characters", _set("nodes.1.name", "n" * 64)),
    _case("address-underscore", "nodes[0].address", "is not an IPv4 address or a lowercase DNS name",
          _set("nodes.0.address", "bad_host")),
    _case("job-name-trailing-newline", "name", "is not a DNS-1123 label", _set("name", "bladetrain\n")),
    _case("nic-trailing-newline", "nodes[0].nic", "is not an interface name", _set("nodes.0.nic", "eth0\n")),
    _case("label-key-with-space", "labels['bad key']", "is not a Kubernetes label or annotation key",
          _set("labels", {"bad key": "x"})),
    _case("label-value-too-long", "labels.team", "longer than 63 characters", _set("labels", {"team": "v" * 64})),
    _case("node-selector-bad-value", "nodeSelector.pool", "is not a Kubernetes label value",
          _set("nodeSelector", {"pool": "a b"})),
    _case("toleration-bad-key", "tolerations[0].key", "is not a Kubernetes label or annotation key",
          _set("tolerations", [{"key": "no spaces please", "operator": "Exists"}])),
    _case("service-account-uppercase", "serviceAccountName", "is not empty or a DNS-1123 subdomain",
          _set("serviceAccountName", "Trainer")),
    _case("job-name-uppercase", "name", "is not a DNS-1123 label", _set("name", "BladeTrain")),
    _case("image-with-space", "image", "is not an image reference", _set("image", "registry/image: latest")),
    # Python's \s is Unicode-aware, Go's is not: the pattern spells the class out, so both refuse it
    _case("image-with-no-break-space", "image", "is not an image reference",
          _set("image", "registry/image:\u00a0latest")),
    _case("nic-with-ideographic-space", "nodes[1].nic", "is not an interface name",
          _set("nodes.1.nic", "enp\u3000125")),
    _case("name-with-line-separator", "name", "is not a DNS-1123 label", _set("name", "blade\u2028train")),
    _case("label-value-with-no-break-space", "labels.team", "is not a Kubernetes label value",
          _set("labels", {"team": "ml\u00a0ops"})),
    _case("address-with-narrow-no-break-space", "nodes[0].address", "is not an IPv4 address or a lowercase DNS name",
          _set("nodes.0.address", "10.0.0.1\u202f")),
    # beyond int64 and uint64: helm's float64 reads 1e+20 and 9.2e18, render.py the exact integer; both refuse
    _case("port-beyond-int64", "port", "at most 65535", _set("port", 99999999999999999999)),
    _case("run-as-user-beyond-int64", "securityContext.runAsUser", "at most 2147483647",
          _set("securityContext", {"runAsUser": 9223372036854775808})),
    _case("toleration-seconds-beyond-2-53", "tolerations[0].tolerationSeconds", "at most 9007199254740991",
          _set("tolerations",
               [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 9007199254740993}])),
    # a float beyond float64's range is no number to go-yaml: the string '1e400'
    _raw("port-1e400", "port", "must be an integer, got string '1e400'", "port: 25195", "port: 1e400"),
    _raw("devices-sexagesimal", "nodes[0].devices", "must be an integer, got string '1:30'", "master: true",
         "master: true\n  devices: 1:30"),
    _case("args-an-integer", "args", "must be a list", _set("args", 1)),
    _case("argo-braces-in-args", "args[1]", "contains '{{'", _set("args", ["--type", "{{workflow.name}}"])),
    _case("argo-braces-in-env", "env.NOTE", "contains '{{'", _set("env", {"NOTE": "a {{ b"})),
    _case("argo-braces-in-script", "script", "contains '{{'", _set("script", "/code/{{x}}.py")),
    _case("auto-backend-mixed-kinds", "backend", "backend: gloo", _all(_set("nodes.1.accelerator", "cpu"))),
    _case("hccl-with-cpu-node", "backend", "hccl needs Ascend nodes",
          _all(_set("backend", "hccl"), _set("nodes.2.accelerator", "cpu"))),
    _case("nccl-with-ascend", "backend", "nccl needs GPU nodes (device cuda)", _set("backend", "nccl")),
    _case("unknown-backend", "backend", "is not one of", _set("backend", "mpi")),
    _case("reserved-env", "env.GLOO_SOCKET_IFNAME", "set by torchdag itself",
          _set("env", {"GLOO_SOCKET_IFNAME": "eth0"})),
    _case("env-bad-name", "env.MY-VAR", "is not an environment variable name", _set("env", {"MY-VAR": "1"})),
    _case("env-not-string", "env.OMP_NUM_THREADS", "must be a string", _set("env", {"OMP_NUM_THREADS": 4})),
    _case("args-not-list", "args", "must be a list", _set("args", "--type example")),
    _case("hccl-connect-too-short", "timeouts.hcclConnect", "at least 120", _set("timeouts", {"hcclConnect": 60})),
    _case("rendezvous-zero", "timeouts.rendezvous", "at least 1", _set("timeouts", {"rendezvous": 0})),
    _case("unknown-kind", "kind", "is not one of", _set("kind", "CronWorkflow")),
    _case("bad-shm-size", "shmSize", "is not a Kubernetes quantity", _set("shmSize", "lots")),
    _case("bad-cpu-quantity", "resources.requests.cpu", "is not a Kubernetes quantity",
          _set("resources", {"requests": {"cpu": "four"}})),
    _case("volume-two-sources", "volumes[0]", "is not a volume with exactly one of hostPath and persistentVolumeClaim",
          _set("volumes", [{"name": "data", "mountPath": "/data", "hostPath": {"path": "/d"},
                            "persistentVolumeClaim": {"claimName": "c"}}])),
    _case("volume-builtin-name", "volumes[0].name", "used by torchdag itself",
          _set("volumes", [{"name": "dshm", "mountPath": "/data", "hostPath": {"path": "/d"}}])),
    _case("volume-relative-mount", "volumes[0].mountPath", "is not an absolute path",
          _set("volumes", [{"name": "data", "mountPath": "data", "hostPath": {"path": "/d"}}])),
    _case("launcher-typo", "launcher.maxRestart", "did you mean 'maxRestarts'", _set("launcher", {"maxRestart": 2})),
    _case("preflight-empty-command", "preflight.command", "at least 1 item", _set("preflight", {"command": []})),
    # Issue 9: HCCL rules per card (catalogue `hccl`), driver mount clashes, /dev/shm in any spelling
    _case("hccl-across-310p-nodes", "backend", "hccl on ascend310p works within one server only",
          _set("backend", "hccl")),
    _case("hccl-on-310", "backend", "ascend310 has no HCCL collectives",
          _all(_set("backend", "hccl"), *[_set(f"nodes.{i}.accelerator", "ascend310") for i in range(3)])),
    _case("hccl-on-one-310p-without-duo", "backend", "needs Atlas 300I Duo cards; set ascend.duoCard: true",
          _all(_set("backend", "hccl"), _set("nodes", [{"name": "n1", "accelerator": "ascend310p"}]))),
    _case("hccl-across-ascend-kinds", "backend", "hccl cannot span different Ascend kinds",
          _all(_set("backend", "hccl"), _set("nodes.1.accelerator", "ascend910"))),
    _case("volume-on-a-driver-mount", "volumes[0].mountPath", "set ascend.mountDriver: false",
          _set("volumes",
               [{"name": "drv", "mountPath": "/usr/local/Ascend/driver/lib64/", "hostPath": {"path": "/opt/drv"}}])),
    _case("volume-on-dev-shm-spelled-otherwise", "volumes[0].mountPath", "is /dev/shm, which torchdag mounts",
          _set("volumes", [{"name": "shm", "mountPath": "//dev/./shm/", "hostPath": {"path": "/tmp"}}])),
    # Issue 37: the helpers' ConfigMap is mounted read-only at its folder (agents.fromWorkflow).
    _case("volume-on-the-helpers-folder", "volumes[0].mountPath", "is where the Workflow mounts torchdag's helpers",
          _set("volumes", [{"name": "c", "mountPath": "/opt/torchdag/torchdag/agents/", "hostPath": {"path": "/c"}}])),
    _case("volume-inside-the-helpers-folder", "volumes[0].mountPath", "set agents.fromWorkflow: false",
          _set("volumes", [{"name": "x", "mountPath": "/opt/torchdag/torchdag/agents/x", "hostPath": {"path": "/c"}}])),
    # Issue 8: launcher flags torchdag plans, its own label prefix, gang and token rules
    _case("extra-args-override-node-rank", "launcher.extraArgs[1]", "sets a launcher flag torchdag plans itself",
          _set("launcher", {"extraArgs": ["--monitor_interval=1", "--node-rank=0"]})),
    _case("label-in-torchdag-prefix", "labels['torchdag.io/job']", "the torchdag.io/ prefix is torchdag's own",
          _set("labels", {"torchdag.io/job": "other"})),
    # Issue 18: Argo's own keys, on the Workflow and its pods (podMetadata)
    _case("label-in-argo-prefix", "labels['workflows.argoproj.io/completed']", "prefix is Argo's own",
          _set("labels", {"workflows.argoproj.io/completed": "true"})),
    # Issue 42: a node's own pod labels
    _case("node-label-argo-placeholder", "nodes[1].labels.team", "is not a Kubernetes label value",
          _set("nodes.1.labels", {"team": "{{workflow.name}}"})),
    _case("node-label-key-placeholder", "nodes[1].labels['{{x}}']", "is not a Kubernetes label or annotation key",
          _set("nodes.1.labels", {"{{x}}": "a"})),
    _case("node-label-torchdag-prefix", "nodes[0].labels['torchdag.io/node-rank']", "the torchdag.io/ prefix",
          _set("nodes.0.labels", {"torchdag.io/node-rank": "7"})),
    _case("node-label-gang-prefix", "nodes[2].labels['kueue.x-k8s.io/queue-name']", "a gang scheduler's",
          _set("nodes.2.labels", {"kueue.x-k8s.io/queue-name": "other"})),
    _case("node-label-argo-prefix", "nodes[2].labels['workflows.argoproj.io/completed']", "prefix is Argo's own",
          _set("nodes.2.labels", {"workflows.argoproj.io/completed": "true"})),
    _case("node-labels-not-a-map", "nodes[0].labels", "must be", _set("nodes.0.labels", ["team=a"])),
    _case("label-argo-controller-instance", "labels['workflows.argoproj.io/controller-instanceid']",
          "prefix is Argo's own", _set("labels", {"team": "a", "workflows.argoproj.io/controller-instanceid": "x"})),
    _case("annotation-in-argo-prefix", "annotations['workflows.argoproj.io/node-name']", "prefix is Argo's own",
          _set("annotations", {"workflows.argoproj.io/node-name": "x"})),
    _case("annotation-in-argo-subdomain", "annotations['pod.workflows.argoproj.io/x']", "prefix is Argo's own",
          _set("annotations", {"pod.workflows.argoproj.io/x": "y"})),
    # Issue 18: the launcher plan, abbreviated (argparse expands prefixes), a script read as a flag, PET_ defaults
    *[_case(f"extra-args-abbreviated{flag}", f"launcher.extraArgs[{index}]", "abbreviates one",
            _set("launcher", {"extraArgs": ["--monitor-interval=1"] * index + [flag, "1"]}))
      for index, flag in enumerate(["--nnode=1", "--node-r=0", "--master_ad=10.0.0.9", "--standalon", "--node_ra",
                                    "--rdzv-back=c10d", "--nproc_per=8", "--max-re=3", "--master-p=1", "--rdzv_i=x",
                                    "--n", "--rdzv-endp=h:1", "--master_port"])],
    _case("script-starting-with-dash", "script", "starts with '-', which the launcher would read",
          _set("script", "--standalone")),
    _case("script-a-short-flag", "script", "starts with '-'", _set("script", "-m")),
    _case("env-pet-nnodes", "env.PET_NNODES", "torchrun reads PET_<OPTION> variables",
          _set("env", {"PET_NNODES": "1"})),
    _case("env-pet-rdzv-backend", "env.PET_RDZV_BACKEND", "torchrun reads PET_<OPTION> variables",
          _set("env", {"A": "b", "PET_RDZV_BACKEND": "c10d"})),
    # Issue 18: pods Kubernetes refuses, or that can never start (pkg/apis/core/validation, the kubelet, the runtime)
    _case("capability-cap-prefix", "containerSecurity.addCapabilities[0]", "written without CAP_",
          _set("containerSecurity", {"addCapabilities": ["CAP_IPC_LOCK"]})),
    _case("capability-cap-sys-admin", "containerSecurity.addCapabilities[1]", "not a Linux capability name",
          _set("containerSecurity", {"addCapabilities": ["IPC_LOCK", "CAP_SYS_ADMIN"]})),
    _case("capability-unknown", "containerSecurity.addCapabilities[0]", "not a Linux capability name",
          _set("containerSecurity", {"addCapabilities": ["IPC_LOCKS"]})),
    _case("toleration-exists-with-value", "tolerations[0].value", "must be empty when operator is Exists",
          _set("tolerations", [{"key": "k", "operator": "Exists", "value": "v"}])),
    _case("toleration-seconds-without-no-execute", "tolerations[1].effect", "must be NoExecute when tolerationSeconds",
          _set("tolerations", [{"operator": "Exists"}, {"key": "k", "operator": "Exists", "effect": "NoSchedule",
                                                         "tolerationSeconds": 60}])),
    _case("toleration-seconds-without-effect", "tolerations[0].effect", "must be NoExecute when tolerationSeconds",
          _set("tolerations", [{"key": "k", "operator": "Exists", "tolerationSeconds": 60}])),
    _case("toleration-empty-key-equal", "tolerations[0].operator", "must be Exists when key is empty",
          _set("tolerations", [{"operator": "Equal", "value": "x", "effect": "NoSchedule"}])),
    _case("toleration-no-key-no-operator", "tolerations[0].operator", "must be Exists when key is empty",
          _set("tolerations", [{"effect": "NoSchedule"}])),
    _case("shm-size-negative", "shmSize", "not negative", _set("shmSize", "-1Gi")),
    _case("cpu-negative", "resources.requests.cpu", "not negative", _set("resources", {"requests": {"cpu": "-1"}})),
    _case("memory-negative-on-a-node", "nodes[2].resources.limits.memory", "not negative",
          _set("nodes.2.resources", {"limits": {"memory": "-2Gi"}})),
    _case("request-above-limit", "resources.requests.cpu", "is 8, above its limit 4",
          _set("resources", {"requests": {"cpu": 8, "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "1024Mi"}})),
    _case("request-above-limit-on-a-node", "nodes[1].resources.requests.memory", "is 1.5Gi, above its limit 1536M",
          _set("nodes.1.resources", {"requests": {"memory": "1.5Gi"}, "limits": {"memory": "1536M"}})),
    _case("run-as-non-root-as-root", "securityContext.runAsUser", "is 0 (root) while runAsNonRoot is true",
          _set("securityContext", {"runAsNonRoot": True, "runAsUser": 0})),
    _case("node-selector-on-hostname", "nodeSelector['kubernetes.io/hostname']", "pins each pod to its node",
          _set("nodeSelector", {"kubernetes.io/hostname": "192.168.110.22"})),
    *[_case(f"image-{case}", "image", "is not an image reference", _set("image", image)) for case, image in [
        ("uppercase-repository", "registry.example.com/Team/train:1"), ("empty-tag", "train:"),
        ("short-digest", "train@sha256:abc"), ("url", "https://registry.example.com/train:1"),
        ("double-slash", "registry//train"), ("tag-too-long", "train:" + "v" * 129)]],
    _case("working-dir-relative", "workingDir", "empty or an absolute path", _set("workingDir", "code/rl")),
    _case("launcher-python-two-words", "launcher.python", "one word", _set("launcher", {"python": "python3 -u"})),
    _case("host-path-backsteps", "volumes[0].hostPath.path", "has a '..' element",
          _set("volumes", [{"name": "data", "mountPath": "/data", "hostPath": {"path": "/data/../etc"}}])),
    _case("driver-path-backsteps", "ascend.driverPath", "has a '..' element",
          _set("ascend", {"driverPath": "/usr/local/Ascend/.."})),
    # Issue 18: resourceNames take only accelerator kinds, and only extended resource names
    _case("resource-name-for-cpu", "resourceNames.cpu",
          "takes no resource name: only accelerator kinds do (ascend310p, ascend310, ascend910, nvidia)",
          _set("resourceNames", {"cpu": "nvidia.com/gpu"})),
    *[_case(f"resource-name-{name}", "resourceNames.ascend310p", "is not an extended resource name",
            _set("resourceNames", {"nvidia": "nvidia.com/gpu", "ascend310p": name}))
      for name in ["memory", "cpu", "ephemeral-storage", "hugepages-2Mi", "kubernetes.io/npu",
                   "requests.huawei.com/npu", "npu.kubernetes.io/x", "d" * 245 + "/npu"]],
    _case("reserved-env-autoload", "env.TORCH_DEVICE_BACKEND_AUTOLOAD", "is set by torchdag itself",
          _set("env", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})),
    # written as a double-quoted escape: a raw NEL would be read as a line break by both
    _raw("control-character", "args[0]", "contains a control character", "- --type", '- "a\\x85b"'),
    _raw("delete-character", "env.NOTE", "contains a control character", "port: 25195",
         'port: 25195\nenv: {NOTE: "x\\x7f"}'),
    _case("arg-over-linux-limit", "args[0]", "Linux refuses a single argument over 131071 bytes",
          _set("args", ["x" * 140000])),
    _case("kueue-without-queue", "scheduling.queue", "must name the Kueue LocalQueue",
          _set("scheduling", {"gang": "kueue"})),
    # Kueue: a Workload podSet per node template (its role hash), at most 8 podSets
    _case("kueue-nine-node-templates", "scheduling.gang", "a Workload holds at most 8 podSets",
          _all(_set("scheduling", {"gang": "kueue", "queue": "research"}),
               _set("nodes", [{"name": f"h{i}", "nic": "eth0", "accelerator": "ascend310p",
                               "resources": {"limits": {"memory": f"{i + 1}Gi"}}} for i in range(9)]))),
    # Rules the schema states (x-rule): render.py words them, helm names the field
    _case("rbac-create-without-service-account", "serviceAccountName",
          "or rbac.create while the pods mount a token",
          _set("rbac", {"create": True})),
    _case("executor-token-without-account", "executorServiceAccountName",
          "must be set when automountServiceAccountToken is false",
          _set("automountServiceAccountToken", False)),
    _case("gang-without-token", "automountServiceAccountToken", "must stay true with a gang scheduler",
          _all(_set("automountServiceAccountToken", False), _set("executorServiceAccountName", "argo-executor"),
               _set("scheduling", {"gang": "volcano"}))),
    _case("extra-args-override-master", "launcher.extraArgs[0]",
          "'--master-addr=10.0.0.9' sets a launcher flag torchdag plans",
          _set("launcher", {"extraArgs": ["--master-addr=10.0.0.9"]})),
    # Issue 19: the pod network and Pod Security (rules the schema states)
    _case("network-host-beside-host-network-false", "hostNetwork",
          "which means the pod network, but network.mode is host",
          _all(_set("network", {"mode": "host"}), _set("hostNetwork", False))),
    _case("pod-security-on-the-host-network", "podSecurity", "'baseline' refuses hostNetwork",
          _set("podSecurity", "baseline")),
    _case("pod-security-host-path", "volumes[0].hostPath", "is a hostPath volume, which Pod Security baseline",
          _all(_set("podSecurity", "baseline"), _set("hostNetwork", False), _set("ascend", {"mountDriver": False}),
               _set("volumes", [{"name": "data", "mountPath": "/data", "hostPath": {"path": "/mnt/data"}}]))),
    _case("pod-security-ascend-driver-mounts", "ascend.mountDriver", "let the Ascend Docker Runtime inject the driver",
          _all(_set("podSecurity", "baseline"), _set("network", {"mode": "pod"}))),
    _case("pod-security-ipc-lock", "containerSecurity.addCapabilities[0]", "beyond what Pod Security baseline allows",
          _all(_pod_security("baseline"), _set("containerSecurity", {"addCapabilities": ["IPC_LOCK"]}))),
    _case("restricted-root-user", "securityContext.runAsUser", "must not be 0 (root) with podSecurity: restricted",
          _all(_pod_security("restricted"), _set("securityContext", {"runAsUser": 0}))),
    _case("restricted-privilege-escalation", "containerSecurity.allowPrivilegeEscalation",
          "must be false with podSecurity: restricted",
          _all(_pod_security("restricted"), _set("containerSecurity", {"allowPrivilegeEscalation": True}))),
]


# Addresses, RBAC, ports, timeouts and restarts: what both renderers refuse because it cannot work.
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
    # Issue 37: under node recovery --max-restarts is failurePolicy.maxRestarts.
    _case("launcher-restarts-node-recovery", "launcher.maxRestarts", "would be silently replaced",
          _all(_set("failurePolicy", {"maxRestarts": 2}), _set("launcher", {"maxRestarts": 3}))),
]


def fit_values(values: dict) -> dict:
    """A drawn values file moved off the refusals of items 8 and 11 (tests/chart/test_chart_parity.py's
    strategy draws valid files): a port that can be bound, processGroup at least HCCL's step
    on Ascend, no more restarts than the deadline holds, elastic.minNodes only where it can work,
    no launcher.maxRestarts under node recovery."""
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
    elastic = values.get("elastic") or {}  # elastic.minNodes only with node recovery, at most every node
    if elastic.get("minNodes") and (not policy.get("maxRestarts") or policy.get("recovery") == "job"
                                    or elastic["minNodes"] > len(values["nodes"])):
        elastic.pop("minNodes")  # refusals: tests/render/test_elastic_render.py
    launcher = values.get("launcher") or {}  # under node recovery --max-restarts is failurePolicy's
    if policy.get("maxRestarts") and policy.get("recovery", "node") == "node" and launcher.get("maxRestarts"):
        launcher["maxRestarts"] = 0  # refusal: FIT_CASES' launcher-restarts-node-recovery
    return values
