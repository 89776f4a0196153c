"""The process kubelet's pod -> process translation, without a cluster: Argo's emissary
unwrapped, Kubernetes' environment and `$(VAR)` expansion, the downward API, and the same
local mappings as `make smoke` (the processes both start are the same)."""

from __future__ import annotations

import copy

import pytest
from kubelet_helpers import argo_pod

from helpers import EXAMPLES, EXAMPLES_DIR, REPO
from localrun_helpers import plan_of
from testbed.kubelet.sandbox import can_mount, mount_order
from testbed.kubelet.translate import PodContext, PodError, plan_container, plan_pod, unwrap_emissary
from testbed.localrun import Job
from testbed.runtime import CHECKOUT, Options
from torchdag.catalog import catalog


@pytest.fixture(scope="module")
def local_plan():
    return plan_of(EXAMPLES_DIR / "local.yaml")


def context(**kw) -> PodContext:
    base = dict(node_name="node-a", host_ip="198.18.0.1", pod_ip="198.18.0.1", api_host="127.0.0.1", api_port=6443,
                argoexec="/bin/true")
    base.update(kw)
    return PodContext(**base)


def container(pod: dict, name: str) -> dict:
    return next(c for c in pod["spec"]["containers"] + pod["spec"]["initContainers"] if c["name"] == name)


def test_emissary_unwrapped_and_mapped_as_smoke(local_plan):
    pod = argo_pod(local_plan, "node-1")
    inits, mains = plan_pod(pod, context(argoexec="/bin/true"))
    main = next(m for m in mains if m.name == "main")
    assert main.role == "process" and main.emissary
    assert main.argv[0] == "torchrun"
    assert "--node_rank=1" in main.argv and "--master_addr=127.0.0.1" in main.argv
    assert f"{CHECKOUT}/trainer/train.py" in main.argv
    env = dict(main.env)
    assert env["GLOO_SOCKET_IFNAME"] == "lo"
    assert any(n.startswith("unwrapped Argo's emissary: /var/run/argo/argoexec emissary") for n in main.notes)
    assert [i.role for i in inits] == ["argoexec"] and inits[0].argv[:2] == ["/bin/true", "init"]
    assert next(m for m in mains if m.name == "wait").role == "argo-wait"


def _training_tasks():
    for example in EXAMPLES:
        plan = plan_of(example)
        for node in plan.nodes:
            yield pytest.param(plan, node.task, id=f"{example.stem}-{node.task}")


@pytest.mark.parametrize("plan,task", list(_training_tasks()))
def test_same_process_as_make_smoke(plan, task):
    """For every example's every node: what the kubelet starts for its pod equals what
    `make smoke --cpu` starts for the node, but for the variables only a pod has (Argo's
    own, the API server's Service)."""
    options = Options(cpu=True, maps=[("/code", "/srv/code"), ("/workspace", "/srv/ws")])
    job = Job(plan, options, "local-smoke-abcde", [])
    smoke = job.node_task(next(node for node in plan.nodes if node.task == task), 0)
    pod = argo_pod(plan, task)
    main = next(m for m in plan_pod(pod, context(options=options))[1] if m.name == "main")
    # Where the kubelet can mount, the helpers are the Workflow's ConfigMap, mounted over their
    # folder, and a path under a volume is the volume's (neither mapped); smoke, with no pods,
    # runs the checkout's helpers and maps every path: the same files
    agents = catalog()["agents"]["path"]
    mounted = [m["mountPath"] for m in container(pod, "main").get("volumeMounts", [])]

    def as_pod_has_it(word: str) -> str:
        if not can_mount():
            return word
        word = word.replace(str(REPO / "torchdag" / "agents"), agents)
        for src, dst in options.maps:
            for prefix in (f"{dst}/", f"={dst}/"):
                at = word.find(prefix)
                back = word[:at] + prefix.replace(dst, src) + word[at + len(prefix):] if at >= 0 else word
                if at >= 0 and any(src == m or src.startswith(m.rstrip("/") + "/") for m in mounted):
                    word = back
        return word

    assert main.argv == [as_pod_has_it(word) for word in smoke.argv]
    assert main.cwd == smoke.cwd and main.device == smoke.device
    pod_only = {k: v for k, v in main.env if k.startswith(("ARGO_", "KUBERNETES_"))}
    assert [(k, v) for k, v in main.env if k not in pod_only] == smoke.env
    assert pod_only["ARGO_POD_NAME"] == pod["metadata"]["name"]
    assert pod_only["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and pod_only["KUBERNETES_SERVICE_PORT"] == "6443"


def test_cpu_stand_ins_for_npu(tmp_path):
    pod = argo_pod(plan_of(EXAMPLES_DIR / "ascend310p-3node.yaml"), "node-0", node="192.168.110.22")
    main = next(m for m in plan_pod(pod, context(options=Options(cpu=True)))[1] if m.name == "main")
    env = dict(main.env)
    assert main.argv[0] == "torchrun", "the set_env wrapper is dropped: its script does not exist here"
    assert env["TORCHDAG_DEVICE"] == "cpu" and env["TORCHDAG_BACKEND"] == "gloo"
    assert env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0" and env["HCCL_IF_IP"] == "127.0.0.1"
    assert any("dropped the set_env wrapper" in n for n in main.notes)
    assert main.device == "cpu"


def bare_pod(env=None, env_from=None, command=("sh", "-c", "echo $(GREETING)"), **container_fields) -> dict:
    c = {"name": "c", "image": "x", "command": list(command), "env": env or [], **container_fields}
    if env_from:
        c["envFrom"] = env_from
    return {"metadata": {"name": "p1", "namespace": "team", "uid": "u-1", "labels": {"app": "a"},
                         "annotations": {"note": "n"}},
            "spec": {"nodeName": "node-b", "serviceAccountName": "trainer", "containers": [c]}}


def test_env_expansion_order_and_escapes():
    env = [{"name": "A", "value": "one"}, {"name": "B", "value": "$(A)-$(C)-$$(A)-$(KUBERNETES_SERVICE_PORT)"},
           {"name": "C", "value": "three"}, {"name": "GREETING", "value": "hi $(A)"}]
    run = plan_container(bare_pod(env), bare_pod(env)["spec"]["containers"][0], context())
    values = dict(run.env)
    assert values["B"] == "one-$(C)-$(A)-6443", "C is defined later; $$ escapes; service vars come last"
    assert run.argv == ["sh", "-c", "echo hi one"]
    names = [k for k, _ in run.env]
    assert names[:4] == ["A", "B", "C", "GREETING"] and "KUBERNETES_SERVICE_HOST" in names[4:]


def test_downward_api_and_value_from_not_expanded():
    refs = {"POD": "metadata.name", "NS": "metadata.namespace", "UID": "metadata.uid", "LBL": "metadata.labels['app']",
            "ANN": "metadata.annotations['note']", "NODE": "spec.nodeName", "IP": "status.podIP",
            "HOST": "status.hostIP", "SA": "spec.serviceAccountName", "MISSING": "metadata.labels['nope']"}
    env = [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in refs.items()]
    env.append({"name": "LIT", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}})
    pod = bare_pod(env)
    run = plan_container(pod, pod["spec"]["containers"][0],
                         context(pod_ip="10.0.0.7", host_ip="198.18.0.2", config_maps=lambda ns, n: {"k": "$(POD)"}))
    values = dict(run.env)
    assert values == {**values, "POD": "p1", "NS": "team", "UID": "u-1", "LBL": "a", "ANN": "n", "NODE": "node-b",
                      "IP": "10.0.0.7", "HOST": "198.18.0.2", "SA": "trainer", "MISSING": "", "LIT": "$(POD)"}


def test_a_dynamic_rendezvous_is_mapped_onto_this_host():
    """Node recovery's torchrun: the c10d endpoint (the master's address) and the address an
    agent gives the others (PET_LOCAL_ADDR from status.podIP) become 127.0.0.1 here, as
    --master_addr does; the endpoint keeps its port."""
    env = [{"name": "PET_LOCAL_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    pod = bare_pod(env, command=("torchrun", "--nnodes=2:3", "--rdzv-backend=c10d",
                                 "--rdzv-endpoint=198.18.0.1:29500", "train.py"))
    run = plan_container(pod, pod["spec"]["containers"][0], context(pod_ip="198.18.0.2"))
    assert "--rdzv-endpoint=127.0.0.1:29500" in run.argv
    assert dict(run.env)["PET_LOCAL_ADDR"] == "127.0.0.1"


def test_resource_field_refs():
    env = [{"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
           {"name": "MCPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
           {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}]
    pod = bare_pod(env, resources={"requests": {"cpu": "250m"}, "limits": {"cpu": "1500m"}})
    run = plan_container(pod, pod["spec"]["containers"][0], context(allocatable={"memory": "2Gi"}))
    values = dict(run.env)
    assert (values["CPU"], values["MCPU"], values["MEM"]) == ("2", "250", "2048"), "limits round up; no limit: node"


def test_env_from_prefix_and_missing_refs():
    maps = {"cfg": {"X": "1", "Y": "2"}}
    pod = bare_pod([{"name": "X", "value": "override"}],
                   env_from=[{"configMapRef": {"name": "cfg"}, "prefix": "P_"}, {"configMapRef": {"name": "cfg"}}])
    values = dict(plan_container(pod, pod["spec"]["containers"][0],
                                 context(config_maps=lambda ns, n: maps.get(n))).env)
    assert (values["P_X"], values["Y"], values["X"]) == ("1", "2", "override")
    missing = bare_pod([{"name": "Z", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])
    with pytest.raises(PodError, match="secret 's' not found"):
        plan_container(missing, missing["spec"]["containers"][0], context())
    optional = bare_pod([{"name": "Z", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}}])
    assert "Z" not in dict(plan_container(optional, optional["spec"]["containers"][0], context()).env)


def test_working_dir_mapped_and_missing(tmp_path):
    pod = bare_pod(workingDir="/opt/torchdag/trainer")
    assert plan_container(pod, pod["spec"]["containers"][0], context()).cwd == str(CHECKOUT / "trainer")
    pod = bare_pod(workingDir="/nowhere/at/all")
    run = plan_container(pod, pod["spec"]["containers"][0], context())
    assert any("workingDir /nowhere/at/all does not exist here" in n for n in run.notes)


def test_argoexec_pods_need_the_binary(local_plan):
    pod = argo_pod(local_plan, "node-0")
    with pytest.raises(PodError, match="Argo's executor binary is not built here"):
        plan_pod(pod, context(argoexec=None))
    real = plan_pod(pod, context(argoexec="/bin/true", wait="real"))[1]
    assert next(m for m in real if m.name == "wait").argv[:2] == ["/bin/true", "wait"]


def test_unwrap_emissary_forms():
    assert unwrap_emissary(["/var/run/argo/argoexec", "emissary", "--", "python", "x.py"]) == ["python", "x.py"]
    assert unwrap_emissary(["torchrun", "--", "x"]) is None
    pod = bare_pod(command=["/var/run/argo/argoexec", "emissary", "--"])
    with pytest.raises(PodError, match="no command"):
        plan_container(pod, copy.deepcopy(pod["spec"]["containers"][0]), context())


def test_argo_resource_template_runs_argoexec(local_plan):
    pod = argo_pod(local_plan, "node-0")
    main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
    main["command"], main["args"] = main["command"][:7] + ["argoexec", "resource", "create"], []
    run = next(m for m in plan_pod(pod, context())[1] if m.name == "main")
    assert (run.role, run.argv, run.emissary) == ("argoexec", ["/bin/true", "resource", "create"], True)


def test_mounts_never_hide_a_source():
    binds = [("/tmp/pod/tmp-dir", "/tmp"), ("/tmp/pod/argo", "/var/run/argo"),
             ("/tmp/pod/term", "/dev/termination-log")]
    ordered = mount_order(binds)
    assert ordered[-1] == ("/tmp/pod/tmp-dir", "/tmp") and sorted(ordered) == sorted(binds)
