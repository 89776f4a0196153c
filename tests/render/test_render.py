"""render.py: golden files, strict Argo/Kubernetes validation, per-node facts, bad input."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pydantic
import pytest
import yaml

from argo_helpers import container_process, task_pods, validate_argo, validate_kubernetes
from bad_cases import BAD_CASES, FIT_CASES
from golden import golden_pairs
from helpers import REPO
from torchdag import pipeline
from torchdag.catalog import catalog
from torchdag.cli import main
from torchdag.errors import ValuesError
from torchdag.network import is_pod

RENDER_PY = [sys.executable, str(REPO / "render.py")]

PAIRS = golden_pairs()
PAIR_IDS = [f"{values.parent.name}/{values.stem}" for values, _ in PAIRS]


def render_doc(path) -> dict:
    return yaml.safe_load(pipeline.run(path).text)


# --- golden files -----------------------------------------------------------------

@pytest.mark.parametrize("values,golden", PAIRS, ids=PAIR_IDS)
def test_matches_golden(values: Path, golden: Path):
    assert golden.exists(), f"{golden.relative_to(REPO)} is missing: run `make golden` and review it"
    assert pipeline.run(values).text == golden.read_text(encoding="utf-8"), (
        f"render.py output for {values.relative_to(REPO)} changed; if intended, run `make golden` and review the diff"
    )


def test_no_stale_golden_files():
    expected = {golden for _, golden in PAIRS}
    stale = [p for p in (REPO / "tests" / "golden").glob("*/*.yaml") if p not in expected]
    assert not stale, f"golden files without a values file: {stale}; run `make golden`"


def test_every_example_and_case_has_a_golden():
    # Two folders listed on their own (not through golden_pairs, which derives one from the
    # other), and the examples README.md promises, written out.
    examples = {p.name for p in (REPO / "examples").glob("*.yaml")}
    assert examples >= {"cluster.yaml", "ascend310p-3node.yaml", "ascend910-4x8.yaml", "nvidia.yaml", "cpu.yaml",
                        "mixed-gloo.yaml", "local.yaml"}
    for group, source in (("examples", REPO / "examples"), ("cases", REPO / "tests" / "cases")):
        values = {p.name for p in source.glob("*.yaml")}
        goldens = {p.name for p in (REPO / "tests" / "golden" / group).glob("*.yaml")}
        assert values and values == goldens, (group, sorted(values ^ goldens))


# --- validity -----------------------------------------------------------------------

@pytest.mark.parametrize("values,golden", PAIRS, ids=PAIR_IDS)
def test_valid_argo_and_kubernetes(values: Path, golden: Path):
    doc = render_doc(values)
    validate_argo(doc)
    pods = task_pods(doc)
    training = [name for name in pods if name.startswith("node-")]
    assert len(training) == len(yaml.safe_load(values.read_text())["nodes"])
    assert sorted(set(pods) - set(training)) in (["schedule-watch"], ["gang-watch"])
    for pod in pods.values():
        validate_kubernetes(pod)


def test_strict_argo_validation_catches_typos():
    """Guards the guard: hera must really reject unknown fields and wrong types."""
    doc = render_doc(REPO / "examples" / "cluster.yaml")
    doc["spec"]["templates"][1]["container"]["envv"] = []
    with pytest.raises(pydantic.ValidationError, match="envv"):
        validate_argo(doc)
    doc = render_doc(REPO / "examples" / "cluster.yaml")
    doc["spec"]["templates"][1]["container"]["resources"]["limits"]["huawei.com/Ascend310P"] = 1
    with pytest.raises(pydantic.ValidationError, match="Ascend310P"):
        validate_argo(doc)


def test_kubernetes_validation_catches_bad_pods():
    pod = next(iter(task_pods(render_doc(REPO / "examples" / "cpu.yaml")).values()))
    pod["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePullPolicyy"):
        validate_kubernetes(pod)


def test_yamllint_strict_on_every_render(tmp_path):
    files = []
    for values, _ in PAIRS:
        out = tmp_path / f"{values.parent.name}-{values.name}"
        out.write_text(pipeline.run(values).text, encoding="utf-8")
        files.append(str(out))
    result = subprocess.run([sys.executable, "-m", "yamllint", "--strict", "-c", str(REPO / ".yamllint"), *files],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", [REPO / "examples" / "cluster.yaml", REPO / "tests/cases/hostile-strings.yaml"])
def test_deterministic_across_processes(values, tmp_path):
    outputs = []
    for seed in ("0", "1", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        result = subprocess.run([*RENDER_PY, str(values)], capture_output=True, env=env, check=True)
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] == outputs[2]


# --- per-node facts: a 3-node job whose master is listed second ---------------------

def _tasks(doc):
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    return templates, templates["train"]["dag"]["tasks"]


def test_per_node_facts_master_not_first():
    doc = render_doc(REPO / "tests" / "cases" / "three-node-master-middle.yaml")
    pods = task_pods(doc)
    # name -> (rank, nic, address, devices); master head-b first, then the others as listed
    expected = {
        "node-0": ("head-b", "0", "eno1", "10.1.0.2", 8),
        "node-1": ("worker-a", "1", "enp11s0f0", "10.1.0.1", 8),
        "node-2": ("worker-c", "2", "ens5", None, 4),
    }
    assert list(pods) == [*expected, "schedule-watch"]
    for task, (host, rank, nic, if_ip, devices) in expected.items():
        spec = pods[task]["spec"]
        term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]
        container = spec["containers"][0]
        argv, env = container_process(container)
        launcher = argv[argv.index("torchrun"):]
        assert launcher[:6] == [
            "torchrun", "--nnodes=3", f"--node_rank={rank}", f"--nproc_per_node={devices}",
            "--master_addr=10.1.0.2", "--master_port=23456",
        ]
        assert launcher[-3:] == ["/code/train.py", "--epochs", "3"]
        assert container["resources"]["limits"]["huawei.com/Ascend910"] == str(devices)
        assert env["GLOO_SOCKET_IFNAME"] == nic
        assert env["HCCL_SOCKET_IFNAME"] == f"={nic}"
        assert env.get("HCCL_IF_IP") == if_ip  # worker-c's address is a DNS name: no HCCL_IF_IP
        assert env["TORCHDAG_BACKEND"] == "hccl" and env["TORCHDAG_DEVICE"] == "npu"
        assert "NCCL_SOCKET_IFNAME" not in env
        assert pods[task]["metadata"]["labels"]["torchdag.io/node-rank"] == rank


def test_original_example_two_ascend_nodes():
    doc = render_doc(REPO / "examples" / "cluster.yaml")
    assert doc["metadata"]["generateName"] == "bladetrain-"
    spec = doc["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    pods = task_pods(doc)
    ranks = {}
    for name, pod in pods.items():
        if name == "schedule-watch":
            continue
        container = pod["spec"]["containers"][0]
        argv, env = container_process(container)
        assert argv[:3] == ["/bin/bash", "-c", catalog()["setEnvWrapper"]]
        assert argv[4] == "/usr/local/Ascend/ascend-toolkit/set_env.sh"
        ranks[env["HCCL_IF_IP"]] = next(a for a in argv if a.startswith("--node_rank="))
        assert "--master_addr=192.168.110.22" in argv and "--master_port=25195" in argv
        assert container["resources"] == {"limits": {"huawei.com/Ascend310P": "1"}}
        assert int(env["HCCL_CONNECT_TIMEOUT"]) >= 120
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info", "/usr/local/dcmi",
                "/usr/local/bin/npu-smi", "/etc/ascend_install.info", "/dev/shm"} <= mounts
    # The hand-written original gave every non-master node rank 1; here ranks are distinct.
    assert ranks == {"192.168.110.22": "--node_rank=0", "192.168.110.23": "--node_rank=1"}


def test_accelerator_resources_and_nic_env_per_kind():
    doc = render_doc(REPO / "tests" / "cases" / "workflowtemplate-full.yaml")
    assert doc["kind"] == "WorkflowTemplate" and doc["metadata"]["name"] == "full"
    pods = task_pods(doc)
    gpu, npu, cpu, auto = (pods[f"node-{r}"]["spec"]["containers"][0] for r in range(4))
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert npu["resources"]["limits"]["huawei.com/Ascend910"] == "4"
    assert "limits" not in cpu["resources"] and cpu["resources"]["requests"] == {"cpu": "500m"}
    gpu_env, npu_env, cpu_env = (container_process(c)[1] for c in (gpu, npu, cpu))
    assert gpu_env["NCCL_SOCKET_IFNAME"] == "=ens1" and gpu_env["GLOO_SOCKET_IFNAME"] == "ens1"
    assert npu_env["HCCL_SOCKET_IFNAME"] == "=enp2" and npu_env["HCCL_IF_IP"] == "10.0.0.2"
    assert "GLOO_SOCKET_IFNAME" not in cpu_env  # no nic given for cpu-1
    assert all(env["TORCHDAG_BACKEND"] == "gloo" for env in (gpu_env, npu_env, cpu_env))
    assert [env["TORCHDAG_DEVICE"] for env in (gpu_env, npu_env, cpu_env)] == ["cuda", "npu", "cpu"]
    # nic: auto goes through preflight, which discovers the NIC before exec'ing torchrun
    argv, _ = container_process(auto)
    exec_at = argv.index("--exec")
    assert argv[:2] == ["python3", "/opt/preflight.py"] and "--nic=auto" in argv and argv[exec_at + 1] == "torchrun"
    assert doc["spec"]["hostNetwork"] is True  # network.mode: host; pod mode: tests/render/test_network.py
    assert "volumes" in doc["spec"] and all(v["name"] != "dshm" for v in doc["spec"]["volumes"])


def test_shapes_share_templates_and_split_when_they_must():
    doc = render_doc(REPO / "tests" / "cases" / "shapes.yaml")
    templates, tasks = _tasks(doc)
    used = [t["template"] for t in tasks if t["name"] not in ("schedule-watch", "agents")]
    # n1,n2 share; n3 devices; n4 resources; n5 no nic; n6 HCCL_IF_IP; n7 nic auto; n8,n9 share
    # their own labels (a count tells them from n1,n2). Names say what sets a shape apart from
    # its siblings; ascend310p-x2 has none, so it needs no suffix.
    assert used == ["ascend310p-x1-no-if-ip", "ascend310p-x1-no-if-ip", "ascend310p-x2",
                    "ascend310p-x1-no-if-ip-own-resources",
                    "ascend310p-x1-no-nic-no-if-ip", "ascend310p-x1", "ascend310p-x1-nic-auto-no-if-ip",
                    "ascend310p-x1-no-if-ip-2", "ascend310p-x1-no-if-ip-2"]
    assert set(used) | {"train", "schedule-watch", "agents"} == set(templates)
    labeled = {"team": "vision", "topology.example.com/rack": "r2"}
    assert labeled.items() <= templates["ascend310p-x1-no-if-ip-2"]["metadata"]["labels"].items()
    assert "team" not in templates["ascend310p-x1-no-if-ip"]["metadata"]["labels"]


def test_bounded_waits_by_default():
    """A dead rank must not hang the rest for hours: every wait has a bound."""
    doc = render_doc(REPO / "examples" / "cluster.yaml")
    assert doc["spec"]["activeDeadlineSeconds"] == 86400
    assert doc["spec"]["templates"][0]["dag"]["failFast"] is True
    argv, env = container_process(task_pods(doc)["node-0"]["spec"]["containers"][0])
    assert "--rdzv_conf=timeout=300" in argv
    # CANN rounds HCCL_EXEC_TIMEOUT down to a multiple of 68: the Workflow says what CANN will use
    assert env["TORCHDAG_PG_TIMEOUT"] == "600" and env["HCCL_EXEC_TIMEOUT"] == "544"


def test_null_removes_a_default(tmp_path):
    doc = render_doc(REPO / "tests" / "cases" / "legacy-launcher.yaml")
    argv, _ = container_process(task_pods(doc)["node-0"]["spec"]["containers"][0])
    assert argv[:3] == ["/usr/bin/python3.9", "-m", "torch.distributed.launch"]
    assert "--max_restarts=3" in argv and "--monitor_interval=1" in argv
    assert not any(a.startswith("--rdzv_conf") for a in argv)


def test_1024_nodes_stay_compact(tmp_path):
    def render_n(n):
        nodes = "\n".join(f"  - {{name: node-{i:04d}, address: 10.{i // 250}.{i % 250}.1, nic: eth0, "
                           "accelerator: ascend910, devices: 8}"
                          for i in range(n))
        path = tmp_path / f"n{n}.yaml"
        path.write_text(f"name: big\nimage: img:1\nscript: /t.py\nnodes:\n{nodes}\n")
        return len(pipeline.run(path).text.encode())

    small, large = render_n(2), render_n(1024)
    assert large < 1_000_000, "Argo rejects workflows over 1 MB"
    assert (large - small) / 1022 <= 512, "each added node should cost at most 0.5 KiB"


# --- bad input -----------------------------------------------------------------------

@pytest.mark.parametrize("case", BAD_CASES + FIT_CASES, ids=str)
def test_bad_input_one_line_per_problem_and_no_output(case, tmp_path, capsys):
    values = tmp_path / "cluster.yaml"
    values.write_text(case.text, encoding="utf-8")
    out = tmp_path / "out" / "workflow.yaml"
    assert main([str(values), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("warning:")]
    assert any(line.startswith(f"{values}: {case.field}: ") and case.fragment in line for line in lines), err
    assert not out.exists() and not out.parent.exists()


@pytest.mark.parametrize("text,fragment", [
    ("name: a\nname: b\n", "duplicate key 'name'"),
    ("name: [unclosed\n", "not valid YAML at line"),
    ("", "the file is empty"),
    ("- just\n- a list\n", "must be a mapping"),
    ("{1: one}\n", "is not a string"),
])
def test_unparseable_values(text, fragment, tmp_path, capsys):
    values = tmp_path / "cluster.yaml"
    values.write_text(text)
    assert main([str(values)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{values}: ") and fragment in err and len(err.strip().splitlines()) == 1


def test_every_problem_reported_at_once(tmp_path, capsys):
    values = tmp_path / "cluster.yaml"
    values.write_text("name: Bad_Name\nimage: img\nscript: /t.py\nport: 0\n"
                      "nodes:\n  - {name: a, nic: 'x/y', devices: 0}\n")
    assert main([str(values)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    fields = [line.split(": ")[1] for line in lines]
    assert fields == ["name", "nodes[0].devices", "nodes[0].nic", "port"]


def test_cli_exit_status_and_no_traceback(tmp_path):
    values = tmp_path / "cluster.yaml"
    values.write_text(BAD_CASES[0].text)
    out = tmp_path / "workflow.yaml"
    out.write_text("previous render\n")
    result = subprocess.run([*RENDER_PY, str(values), "-o", str(out)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert out.read_text() == "previous render\n", "a failed render must leave the old output alone"
    missing = subprocess.run([*RENDER_PY, str(tmp_path / "nope.yaml")], capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.strip() == f"{tmp_path / 'nope.yaml'}: (top level): no such file"


def test_cli_writes_check_and_stdout(tmp_path):
    example = REPO / "examples" / "cluster.yaml"
    out = tmp_path / "deep" / "workflow.yaml"
    def run(*a):
        return subprocess.run([*RENDER_PY, *a], capture_output=True, text=True)
    written = run(str(example), "-o", str(out))
    assert written.returncode == 0 and written.stdout == ""
    printed = run(str(example))
    assert printed.stdout == out.read_text() == pipeline.run(example).text
    checked = run("--check", str(example))
    assert checked.returncode == 0 and checked.stdout == ""
    assert not list(out.parent.glob(".*.tmp")), "temporary files must not be left behind"


def test_warns_about_nodes_without_nic(tmp_path):
    values = tmp_path / "cluster.yaml"
    values.write_text("name: a\nimage: i\nscript: /t.py\nnodes:\n  - {name: n1, nic: eth0}\n  - {name: n2}\n")
    result = subprocess.run([*RENDER_PY, str(values), "--check"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "nodes[1].nic: not set" in result.stderr and "nodes[0]" not in result.stderr


WORKFLOW_DOC = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec: {}\n"


@pytest.mark.parametrize("text", ["a: [", "---\na: 1\n---\nb: 2\n", "- 1\n", "kind: Pod\nspec: {}\n",
                                  WORKFLOW_DOC + "---\n" + WORKFLOW_DOC, WORKFLOW_DOC + "---\n- 1\n",
                                  WORKFLOW_DOC + "---\nspec: {}\n"])
def test_parse_back_refuses_what_is_not_one_workflow_among_objects(text):
    from torchdag.render import RenderBug, check_documents

    with pytest.raises(RenderBug):
        check_documents(text)


def test_parse_back_accepts_a_workflow_beside_other_objects():
    from torchdag.render import check_documents

    text = "kind: PodGroup\nspec: {minMember: 2}\n---\n" + WORKFLOW_DOC
    assert len(check_documents(text)) == 2



KEEP = "remove the line to keep the default, or give a value"

def test_null_is_refused_where_absence_means_nothing(tmp_path):
    """Helm's rule is that a user null deletes a default. Where nothing sensible is left
    (`port: null` would render --master_port=0, a section would lose every default), both
    renderers refuse it; keys whose absence means "off" say so (x-null) and accept it."""
    values = tmp_path / "cluster.yaml"
    base = (REPO / "examples" / "cluster.yaml").read_text()
    values.write_text(base + "timeouts: null\nhostNetwork: null\nlauncher: {type: null}\n")
    with pytest.raises(ValuesError) as caught:
        pipeline.run(values)
    assert caught.value.lines() == [
        f"{values}: hostNetwork: is null, which would delete the default true; {KEEP}",
        f"{values}: launcher.type: is null, which would delete the default \"torchrun\"; {KEEP}",
        f"{values}: timeouts: is null, which would delete its keys' defaults; {KEEP}",
    ]
    values.write_text(base.replace("port: 25195", "port: null"))
    with pytest.raises(ValuesError, match="port: is null, which would delete the default 29500"):
        pipeline.run(values)
    values.write_text(base + "timeouts: {workflowDeadline: null, rendezvous: null}\nlauncher: {maxRestarts: null}\n")
    doc = render_doc(values)
    argv, _ = container_process(task_pods(doc)["node-0"]["spec"]["containers"][0])
    assert "activeDeadlineSeconds" not in doc["spec"]
    assert not any(a.startswith(("--rdzv_conf", "--max_restarts")) for a in argv)


def test_plain_scalars_read_as_helm_reads_them(tmp_path):
    """go-yaml (Helm) reads y/n as booleans and 1e3 as a number; render.py must agree."""
    from helpers import parse_values

    assert parse_values("a: y\nb: N\nc: 1e3\nd: 2.5e1\ne: 'n'\nf: e3\n", "x") == {
        "a": True, "b": False, "c": 1000.0, "d": 25.0, "e": "n", "f": "e3"}
    values = tmp_path / "cluster.yaml"
    values.write_text("name: n\nimage: i\nscript: /t.py\nnodes: [{name: a}]\n")
    with pytest.raises(ValuesError, match=r"name: must be a string, got boolean false"):
        pipeline.run(values)
    values.write_text("name: a\nimage: i\nscript: /t.py\nport: 3e4\nshmSize: 2e9\nnodes: [{name: a}]\n")
    doc = render_doc(values)
    assert "--master_port=30000" in doc["spec"]["templates"][1]["container"]["args"]
    assert doc["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "2000000000"


@pytest.mark.parametrize("values", [v for v, _ in PAIRS], ids=PAIR_IDS)
def test_the_file_starts_with_every_nodes_rank_name_and_nic(values):
    """A reviewer reads the table first: one row per node, in rank order."""
    text = pipeline.run(values).text
    table = text[:text.index("\n---\n")].splitlines()
    assert all(line.startswith("#") for line in table)
    rows = [line[2:].split() for line in table if re.match(r"^#\s+\d+\s", line)]
    nodes = yaml.safe_load(values.read_text())["nodes"]
    master = next((i for i, node in enumerate(nodes) if node.get("master")), 0)
    in_rank_order = [nodes[master]] + [node for i, node in enumerate(nodes) if i != master]
    merged = pipeline.validate(pipeline.load(values))  # on the pod network a node without nic uses network.nic
    default_nic = merged["network"]["nic"] if is_pod(merged) else "-"
    assert [(row[0], row[1], row[3]) for row in rows] == [
        (str(rank), node["name"], node.get("nic") or default_nic) for rank, node in enumerate(in_rank_order)]
