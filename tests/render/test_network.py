"""The pod network (network.mode: pod, docs/network.md): the run's headless Service, each
node pod's DNS name, the master reached by rank 0's name, NIC env for the pod's own
interface, and pods that Pod Security baseline (and restricted, on request) admits.
Refusals are cases of tests/bad_cases.py (both renderers); the preflight's wait for the
master's name is tests/agents/test_preflight_dns.py."""

from __future__ import annotations

import re
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from argo_helpers import KUBERNETES_VERSION, container_process, task_pods, validate_argo, validate_kubernetes
from chart_helpers import documents, helm_template
from helpers import REPO
from localrun_helpers import ENV, free_port
from torchdag import pipeline
from torchdag.pipeline import run

CASES = REPO / "tests" / "cases"
POD_CASES = [CASES / "pod-network.yaml", CASES / "pod-mixed-restricted.yaml"]
HOST_ONLY = ("hostNetwork", "hostPID", "hostIPC")
# What Pod Security baseline lets a container add (the Pod Security Standards' list).
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def workflow(path) -> dict:
    return yaml.safe_load(pipeline.run(path).text)


def service_of(doc: dict) -> dict:
    (template,) = [t for t in doc["spec"]["templates"] if t["name"] == "service"]
    assert template["resource"]["action"] == "apply" and template["resource"]["setOwnerReference"] is True
    return yaml.safe_load(template["resource"]["manifest"])


def node_pods(doc: dict) -> dict[str, dict]:
    return {name: pod for name, pod in task_pods(doc).items() if name.startswith("node-")}


@pytest.mark.parametrize("path", POD_CASES, ids=lambda p: p.stem)
def test_the_master_is_rank_0s_dns_name_never_a_host_address(path):
    doc = workflow(path)
    domain = yaml.safe_load(path.read_text()).get("network", {}).get("clusterDomain", "cluster.local")
    for name, pod in node_pods(doc).items():
        argv, _ = container_process(pod["spec"]["containers"][0])
        # task_pods fills {{workflow.name}} with wf-test and {{workflow.namespace}} with wf-namespace
        master = f"node-0.wf-test.wf-namespace.svc.{domain}"
        assert f"--master_addr={master}" in argv and f"--master-addr={master}" in argv, name
        assert not [word for word in argv if re.search(r"\b(\d+\.){3}\d+\b", word)], argv  # no IPv4 anywhere
        at = argv.index("--exec")
        assert "--wait-for-name" in argv[:at] and argv[at + 1] == "torchrun"  # preflight first, always


@pytest.mark.parametrize("path", POD_CASES, ids=lambda p: p.stem)
def test_each_pod_is_named_in_the_runs_service_which_selects_exactly_the_node_pods(path):
    doc = workflow(path)
    service = service_of(doc)
    assert service["metadata"]["name"] == "{{workflow.name}}" and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"] == [{"name": "rendezvous", "port": doc_port(path), "protocol": "TCP"}]
    pods = task_pods(doc)
    selector = service["spec"]["selector"]
    assert selector == {"torchdag.io/run": "{{workflow.name}}"}
    for name, pod in pods.items():
        labels = pod["metadata"]["labels"]
        selected = all(labels.get(key) == "wf-test" for key in selector)  # the run's name, substituted
        assert selected == name.startswith("node-"), name  # the gang watch's pod is not selected
        if selected:
            assert pod["spec"]["hostname"] == name and pod["spec"]["subdomain"] == "wf-test"
    tasks = doc["spec"]["templates"][0]["dag"]["tasks"]
    assert all("service" in task["dependencies"] for task in tasks if task["name"].startswith("node-"))


def doc_port(path) -> int:
    return int(yaml.safe_load(path.read_text()).get("port", 29500))


@pytest.mark.parametrize("path", POD_CASES, ids=lambda p: p.stem)
def test_the_pods_and_the_service_are_what_kubernetes_and_argo_accept(path):
    doc = workflow(path)
    validate_argo(doc)
    for pod in task_pods(doc).values():
        validate_kubernetes(pod)
    service = yaml.safe_load(yaml.safe_dump(service_of(doc)).replace("{{workflow.name}}", "podnet-x7k2q"))
    kubernetes_validate.validate(service, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("path", POD_CASES, ids=lambda p: p.stem)
def test_the_pods_pass_pod_security_baseline(path):
    """The rules of baseline that a rendered pod could break: no host namespaces, no
    hostPath, no host ports, no Unconfined seccomp, only baseline's capabilities."""
    doc = workflow(path)
    assert not any(key in doc["spec"] for key in HOST_ONLY)
    assert not any("hostPath" in volume for volume in doc["spec"].get("volumes", []))
    for pod in task_pods(doc).values():
        for container in pod["spec"]["containers"]:
            assert not any("hostPort" in port for port in container.get("ports", []))
            security = container["securityContext"]
            assert security.get("seccompProfile", {}).get("type") != "Unconfined"
            assert set(security.get("capabilities", {}).get("add", [])) <= BASELINE_CAPABILITIES


def test_restricted_adds_non_root_and_seccomp_to_the_pod_and_keeps_containers_locked():
    doc = workflow(CASES / "pod-mixed-restricted.yaml")
    context = doc["spec"]["securityContext"]
    assert context["runAsNonRoot"] is True and context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["runAsUser"] == 1000
    for pod in task_pods(doc).values():
        security = pod["spec"]["containers"][0]["securityContext"]
        assert security == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}}


def test_ascend_binds_the_pod_ip_and_every_node_its_pods_nic():
    doc = workflow(CASES / "pod-mixed-restricted.yaml")
    pods = node_pods(doc)
    npu, cpu = (pods[f"node-{rank}"]["spec"]["containers"][0] for rank in range(2))
    (if_ip,) = [item for item in npu["env"] if item["name"] == "HCCL_IF_IP"]
    assert if_ip == {"name": "HCCL_IF_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    _, npu_env = container_process(npu)
    assert npu_env["HCCL_SOCKET_IFNAME"] == "=eth0" and npu_env["GLOO_SOCKET_IFNAME"] == "eth0"
    _, cpu_env = container_process(cpu)
    assert cpu_env["GLOO_SOCKET_IFNAME"] == "net1" and "HCCL_IF_IP" not in cpu_env  # a node's own nic wins
    assert not any(v.get("hostPath") for v in doc["spec"]["volumes"])  # mountDriver: false
    tasks = doc["spec"]["templates"][0]["dag"]["tasks"]
    assert all(t["dependencies"] == ["gang", "service", "agents"] for t in tasks if t["name"].startswith("node-"))
    assert not any(p["name"] == "if-ip" for t in tasks for p in t.get("arguments", {}).get("parameters", []))


def test_host_network_false_is_the_pod_network(tmp_path):
    text = (CASES / "pod-network.yaml").read_text()
    old = tmp_path / "old-key.yaml"
    old.write_text(text.replace("network: {mode: pod}", "hostNetwork: false"))
    assert pipeline.run(old).text == pipeline.run(CASES / "pod-network.yaml").text
    default = tmp_path / "default.yaml"
    default.write_text(text.replace("network: {mode: pod}\n", "").replace("podSecurity: baseline\n", ""))
    assert workflow(default)["spec"]["hostNetwork"] is True  # host stays the default


def test_the_table_names_the_pod_network_and_the_masters_name(tmp_path):
    lines = pipeline.run(CASES / "pod-network.yaml").text.split("\n---\n")[0].splitlines()
    assert "# master: node-a (rank 0) at node-0.{{workflow.name}}.{{workflow.namespace}}.svc.cluster.local:29500" \
        in lines
    assert any(line.startswith("# network: pod (headless Service {{workflow.name}};") for line in lines)
    rows = [line.split() for line in lines if re.match(r"^#\s+\d+\s", line)]
    assert [(row[1], row[2], row[3], row[4], row[5], row[6], row[7]) for row in rows] == [
        ("0", "node-a", "node-0", "eth0", "cpu", "2", "cpu-x2"), ("1", "node-b", "node-1", "eth0", "cpu", "2",
                                                                "cpu-x2"),
        ("2", "node-c", "node-2", "net1", "cpu", "2", "cpu-x2")]


def test_an_address_is_unused_on_the_pod_network_and_says_so(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text((CASES / "pod-network.yaml").read_text().replace("{name: node-b,",
                                                                       "{name: node-b, address: 10.0.0.2,"))
    rendered = run(values)
    assert rendered.warnings() == [f"{values}: nodes[1].address: unused on the pod network (network.mode: pod): "
                                   "the other nodes reach this node by its pod's DNS name; remove it"]
    assert "10.0.0.2" not in rendered.text


@pytest.mark.parametrize("mode, grants", [("pod", True), ("host", False)])
def test_the_charts_role_may_apply_the_service_only_on_the_pod_network(helm, tmp_path, mode, grants):
    values = tmp_path / "values.yaml"
    values.write_text((CASES / "pod-network.yaml").read_text().replace("network: {mode: pod}", f"network: {{mode: "
                      f"{mode}}}").replace("podSecurity: baseline\n", "") + "rbac: {create: true}\n"
                      "serviceAccountName: trainer\n")
    result = helm_template(helm, values)
    assert result.returncode == 0, result.stderr
    (role,) = [doc for doc in documents(result.stdout) if doc["kind"] == "Role"]
    rule = {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "create", "patch"]}
    assert (rule in role["rules"]) is grants


# --- make smoke: the pod network mapped onto this machine -------------------------------------

def smoke_values(tmp_path) -> str:
    """The mixed pod-network case, short: 20 steps."""
    path = tmp_path / "podmix.yaml"
    script = "script: /opt/torchdag/trainer/train.py\n"
    text = (CASES / "pod-mixed-restricted.yaml").read_text()
    path.write_text(text.replace(script, script + 'args: ["--max-steps", "20"]\n'))
    return str(path)


def test_the_local_runner_skips_the_service_and_maps_names_and_the_pod_ip(tmp_path):
    done = subprocess.run([sys.executable, "-m", "testbed.localrun", smoke_values(tmp_path), "--cpu", "--dry-run"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "[localrun] ignored: task service (creates the run's headless Service: every pod name is 127.0.0.1 here)" \
        in out
    assert "[localrun] node-0: env HCCL_IF_IP: the pod's IP (status.podIP) -> 127.0.0.1" in out
    # rank 0's DNS name as the Plan has it (the cluster fills in the run and its namespace)
    assert ("node-1: master address node-0.{{workflow.name}}.{{workflow.namespace}}.svc.corp.example -> 127.0.0.1"
            in out)


@pytest.mark.torch  # a real torchrun job
def test_a_pod_network_job_trains_to_the_end_locally(tmp_path):
    port = free_port()
    done = subprocess.run([sys.executable, "-m", "testbed.localrun", smoke_values(tmp_path), "--cpu", "--port",
                           str(port), "--timeout", "200"], cwd=REPO, capture_output=True, text=True, timeout=240,
                          env=ENV)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "[node-0] preflight: ok: master name 127.0.0.1 resolves to 127.0.0.1" in out
    assert "[node-0] [trainer] done: 20 steps" in out and "[localrun] result: every task exited 0" in out
