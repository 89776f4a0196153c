"""Rule workflow-size: what Argo keeps in one object is the spec *and* the status of every
node, packed (workflow/packer); both renderers refuse a job whose status would not fit beside
its spec, by the shape's own figures (catalogue argoStatus.shapes: whole-job restarts, node
recovery, node recovery with elastic members), counting the machines' own bytes; they say how
many machines fit and what to do, and count the spec alone when node status is offloaded.
The figures are held above bench/bench_status.py's model of Argo's status, and above what the
real controller stored (bench/status_measured.json) by the stated margin."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import REPO
from torchdag import pipeline
from torchdag.catalog import catalog
from torchdag.errors import ValuesError
from torchdag.render import check_documents, distinct_bytes, json_size, status_budget

sys.path.insert(0, str(REPO / "bench"))
from bench_status import Job, guard_takes, hashed_hosts, measured, status_bytes

LIMIT = 1048576  # MAX_WORKFLOW_SIZE's default in Argo v4.0.5 workflow/packer, written out here
SHAPE_VALUES = {"job": "failurePolicy: {{maxRestarts: {restarts}, recovery: job}}\n",
                "node": "failurePolicy: {{maxRestarts: {restarts}}}\n",
                "elastic": "failurePolicy: {{maxRestarts: {restarts}}}\nelastic: {{minNodes: {min}}}\n"}


def big_values(path, n: int, extra: str = "", hosts: list[str] | None = None):
    hosts = hosts or [f"atlas-{i:04d}" for i in range(n)]
    nodes = "".join(f"  - {{name: {hosts[i]}, address: 10.{i // 250}.{i % 250}.1, nic: enp189s0f0, "
                    "accelerator: ascend910, devices: 8}\n" for i in range(n))
    path.write_text(f"name: big\nimage: registry.example.com/train:1.0\nscript: /code/train.py\n{extra}nodes:\n{nodes}")
    return path


def shape_values(path, shape: str, n: int, restarts: int = 1, hosts: list[str] | None = None, extra: str = ""):
    return big_values(path, n, SHAPE_VALUES[shape].format(restarts=restarts, min=n - n // 8) + extra, hosts)


def helm_template(helm, path):
    return subprocess.run([helm, "template", "t", str(REPO / "chart"), "-f", str(path)], capture_output=True,
                          text=True, timeout=600)


def spec_bytes(path) -> int:
    (document,) = check_documents(pipeline.run(path).text)
    return json_size(document)


def guard_status(path) -> int:
    """The status render.py's guard counts for the values, offload aside."""
    values = yaml.safe_load(path.read_text())
    values.setdefault("workflow", {})["nodeStatusOffload"] = True  # the spec alone: never refused here
    path.write_text(yaml.safe_dump(values))
    return status_budget(pipeline.run(path).plan, offloaded=False)[1]


def test_a_machines_own_bytes_are_what_the_other_machines_do_not_share(tmp_path):
    """distinct_bytes: each parameter's values less the prefix and suffix every machine shares
    (gzip takes those from the node entry before); equal values cost nothing."""
    nodes = [("gpu-a1.example.com", "eth0"), ("gpu-b22.example.com", "eth0"), ("gpu-c333.example.com", "eth1")]
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "image": "i:1", "script": "/t.py", "nodes": [
        {"name": name, "nic": nic, "accelerator": "nvidia", "devices": 8} for name, nic in nodes]}))
    # hosts a1, b22, c333 (9); ranks 0, 1, 2 (3); NICs 0, 0, 1 after "eth" (3)
    assert distinct_bytes(pipeline.run(path).plan) == 15
    path.write_text(yaml.safe_dump({"name": "t", "image": "i:1", "script": "/t.py", "nodes": [
        {"name": name} for name in ("aa", "aaa", "aab")]}))
    # the shared prefix "aa" leaves "", "a", "b": a suffix may not reach into it
    assert distinct_bytes(pipeline.run(path).plan) == 2 + 3


CASES = {"fast": ((150, 0, 1), (300, 63, 2)), "scale": ((1024, 0, 2), (1024, 63, 1), (4096, 20, 1))}


@pytest.mark.parametrize("shape", ["job", "node", "elastic"])
@pytest.mark.parametrize("tier", ["fast", pytest.param("scale", marks=pytest.mark.scale)])
def test_the_catalogue_stays_above_the_model(shape, tier, tmp_path):
    """Each shape's figures, as the guard sums them for a job through its failures, stay above
    what bench/bench_status.py models for a year-long run's status at its end: short and
    hashed host names of 20 and 63 characters, a task per machine and loop tasks, one and two
    failures (under node recovery each the master's loss, the most a failure adds)."""
    failure = "job" if shape == "job" else "master"
    for n, host_length, restarts in CASES[tier]:
        hosts = hashed_hosts(n, host_length) if host_length else [f"npu-{i:04d}" for i in range(n)]
        path = shape_values(tmp_path / f"{shape}-{n}.yaml", shape, n, restarts, hosts)
        model = status_bytes(Job(shape, n, (failure,) * restarts, hosts=hosts))
        assert guard_status(path) >= model, (shape, n, host_length, restarts)


@pytest.mark.scale
def test_the_catalogue_stays_above_the_real_controller_by_its_margin(tmp_path):
    """Every row the real controller gave (bench/status_measured.json: bench_cluster.py
    --status, through each failure to the Workflow's end) is below the shape's figures for
    that job by at least the stated margin. The rows are those measured so far (make
    bench-status adds the others); node recovery's at 256 and 1,024 machines (with elastic members
    too) and at 4,096 (one worker's loss, node status offloaded) are among them."""
    rows = measured()
    assert {(row["shape"], row["nodes"]) for row in rows} >= {("job", 256), ("node", 256), ("node", 1024),
                                                             ("elastic", 1024), ("node", 4096)}
    margin = catalog()["argoStatus"]["margin"]
    for row in rows:
        hosts = hashed_hosts(row["nodes"], row["host_length"]) if row["host_length"] > 8 else None
        path = shape_values(tmp_path / "row.yaml", row["shape"], row["nodes"], len(row["failures"]),
                            hosts or [f"npu-{i:04d}" for i in range(row["nodes"])])
        assert guard_status(path) >= row["status_bytes"] * (100 + margin) / 100, row


@pytest.mark.scale
def test_the_model_is_at_least_each_real_controller_row():
    """bench/bench_status.py's model of each measured run (its shape, machines, host names,
    failures, durations and failed pods' message) is at least the status the real controller
    stored, and within a tenth of it: the model is what the catalogue's figures come from."""
    for row in measured():
        hosts = hashed_hosts(row["nodes"], row["host_length"]) if row["host_length"] > 8 else None
        model = status_bytes(Job(row["shape"], row["nodes"], tuple(row["failures"]), seconds=row["seconds"],
                                 requests=False, hosts=hosts, failed_message=row["failed_message"]))
        assert row["status_bytes"] <= model <= row["status_bytes"] * 1.1, (row["shape"], row["nodes"], model, row)


@pytest.mark.scale
def test_4096_of_8_under_node_recovery_is_refused_naming_offload_and_what_fits(helm, tmp_path):
    """The schema's largest job with one node recovery: by node recovery's figures (the model,
    held above the real controller's rows) its status does not fit beside its spec; both renderers
    refuse it in one line naming workflow.nodeStatusOffload and the machine count that fits,
    and take it when the controller offloads node status."""
    path = shape_values(tmp_path / "big.yaml", "node", 4096)
    with pytest.raises(ValuesError) as refused:
        pipeline.run(path)
    (line,) = refused.value.lines()
    found = re.search(r"nodes: 4096 nodes make a Workflow of (\d+) bytes \(JSON\), and Argo's status under node "
                      r"recovery comes to about (\d+) bytes through the 1 failure\(s\) the job survives "
                      r"\(failurePolicy.maxRestarts\): over the 1048576 bytes Argo keeps in one object, so the "
                      r"Workflow would end in Error mid-run; about (\d+) machines like these fit. Set "
                      r"workflow.nodeStatusOffload if the controller offloads node status", line)
    assert found, line
    assert "or run fewer machines, carry the helpers in the image (agents.fromWorkflow: false), or lower" in line
    fits = int(found[3])
    assert 0 < fits < 4096
    # The count that fits is one the guard takes (and a tenth more machines are refused: rounded up,
    # a tenth of the estimate is the claim, not its floor: the true limit can sit on that floor).
    pipeline.run(shape_values(tmp_path / "fits.yaml", "node", fits))
    with pytest.raises(ValuesError):
        pipeline.run(shape_values(tmp_path / "more.yaml", "node", math.ceil(fits * 1.1)))
    result = helm_template(helm, path)
    assert result.returncode != 0 and f"about {found[2]} bytes through the 1 failure(s)" in result.stderr, \
        result.stderr[-500:]
    offloaded = shape_values(tmp_path / "offload.yaml", "node", 4096, extra="workflow: {nodeStatusOffload: true}\n")
    assert spec_bytes(offloaded) < LIMIT
    assert helm_template(helm, offloaded).returncode == 0


@pytest.mark.scale
def test_a_job_without_restarts_is_not_told_to_lower_them(helm, tmp_path):
    """About 3,400 machines with 63-character host names and no restart: refused by both renderers
    with the count that fits, and no advice to lower failurePolicy.maxRestarts, which is 0."""
    path = shape_values(tmp_path / "v.yaml", "job", 3400, 0, hashed_hosts(3400, 63))
    with pytest.raises(ValuesError) as refused:
        pipeline.run(path)
    (line,) = refused.value.lines()
    assert "through the 0 failure(s)" in line and "machines like these fit" in line, line
    assert line.endswith("or run fewer machines, carry the helpers in the image (agents.fromWorkflow: false)"), line
    result = helm_template(helm, path)  # its Workflow carries helm's labels: a few bytes more, so its own count
    assert result.returncode != 0 and "through the 0 failure(s)" in result.stderr, result.stderr[-600:]
    assert "or run fewer machines, carry the helpers in the image (agents.fromWorkflow: false)\n" in result.stderr
    assert "lower failurePolicy.maxRestarts" not in result.stderr


@pytest.mark.scale
@pytest.mark.parametrize("shape", ["job", "node", "elastic"])
def test_long_host_names_are_judged_by_their_length(shape, tmp_path):
    """About 3,400 machines with 63-character hashed host names, with and without failures:
    the guard refuses whatever the model says would not fit, and takes what fits with twice
    the margin to spare; so too at the machine count the refusal names."""
    margin = catalog()["argoStatus"]["margin"]
    for n, restarts in ((3400, 0 if shape == "job" else 1), (3400, 1), (1700, 1), (900, 2)):
        hosts = hashed_hosts(n, 63)
        path = shape_values(tmp_path / "v.yaml", shape, n, restarts, hosts)
        failure = "job" if shape == "job" else "master"
        spec = spec_bytes(shape_values(tmp_path / "o.yaml", shape, n, restarts, hosts,
                                       "workflow: {nodeStatusOffload: true}\n"))
        model = spec + status_bytes(Job(shape, n, (failure,) * restarts, hosts=hosts, restarts=restarts))
        try:
            pipeline.run(path)
            taken = True
        except ValuesError:
            taken = False
        assert taken or model * (100 + 2 * margin) / 100 > LIMIT, (shape, n, restarts, model)
        assert not taken or model <= LIMIT, (shape, n, restarts, model)


@pytest.mark.scale
def test_the_machine_counts_values_md_states_are_the_guards(tmp_path):
    """docs/values.md's table of the machines × 8 the guard takes per shape and failurePolicy.maxRestarts,
    with 8- and 63-character host names: each count is taken and one more is refused."""
    text = (REPO / "docs" / "values.md").read_text(encoding="utf-8")
    shapes = {"node recovery (the default when `maxRestarts` > 0)": "node", "the whole job (`recovery: job`)": "job"}
    cells = []
    for label, shape in shapes.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
        for restarts, cell in enumerate(row.strip("|").split("|")[1:]):
            if cell.strip() != "—":
                short, long = (int(part.replace(",", "")) for part in cell.split("/"))
                cells += [(shape, restarts, 0, short), (shape, restarts, 63, long)]
    assert len(cells) == 10, cells
    for shape, restarts, length, count in cells:
        assert guard_takes(shape, restarts, length, count, tmp_path), (shape, restarts, length, count)
        assert count == 4096 or not guard_takes(shape, restarts, length, count + 1, tmp_path), \
            (shape, restarts, length, count)


@pytest.mark.scale
def test_both_renderers_count_the_same_status(helm, tmp_path):
    """Names that share a prefix and a suffix, NICs that differ: the chart's count of the
    machines' own bytes and its sum are render.py's, byte for byte (the status in the line)."""
    hosts = [f"gpu-{'x' * (i % 7)}{i}.rack{i % 3}.example.com" for i in range(2600)]
    path = shape_values(tmp_path / "v.yaml", "node", 2600, 1, hosts)
    with pytest.raises(ValuesError) as refused:
        pipeline.run(path)
    status = re.search(r"comes to about (\d+) bytes", str(refused.value))[1]
    result = helm_template(helm, path)
    assert f"comes to about {status} bytes" in result.stderr, result.stderr[-600:]


def dag(path) -> dict:
    document = next(d for d in yaml.safe_load_all(pipeline.run(path).text) if d)
    return document["spec"]["templates"][0]["dag"]


def test_past_200_dag_tasks_the_nodes_go_in_loop_tasks(tmp_path):
    """Argo v4's full CRDs cap a DAG at 200 tasks (held against the real API server in
    tests/e2e/test_api_server_accepts.py): up to 200 a task per node (the nodes, the schedule watch and
    the helpers' ConfigMap task), past it loop tasks of at most nodeLoops.maxItems machines, each
    item naming its machine."""
    image_agents = "agents: {fromWorkflow: false}\n"  # no ConfigMap task: the nodes' tasks and the watch
    assert [task["name"] for task in dag(big_values(tmp_path / "v.yaml", 199, image_agents))["tasks"]][-2:] == [
        "node-198", "schedule-watch"]
    assert [task["name"] for task in dag(big_values(tmp_path / "v.yaml", 198))["tasks"]][-3:] == [
        "node-197", "schedule-watch", "agents"]
    assert "withItems" in dag(big_values(tmp_path / "v.yaml", 199))["tasks"][0]
    tasks = [task for task in dag(big_values(tmp_path / "v.yaml", 201, image_agents))["tasks"] if "withItems" in task]
    size = catalog()["nodeLoops"]["maxItems"]
    assert [(task["name"], len(task["withItems"])) for task in tasks] == [("nodes-0", size), ("nodes-1", 201 - size)]
    assert tasks[1]["withItems"][-1] == {"host": "atlas-0200", "ip": "10.0.200.1", "rank": "200"}
    # What every machine shares is passed as it is; what names it is always in the item.
    assert {p["name"]: p["value"] for p in tasks[0]["arguments"]["parameters"]} == {
        "host": "{{item.host}}", "node-rank": "{{item.rank}}", "nic": "enp189s0f0", "if-ip": "{{item.ip}}"}


def test_more_templates_than_argos_full_crds_take_is_refused_by_both(helm, tmp_path):
    """201 node shapes make 204 templates and 203 DAG tasks, and 99 under node recovery make
    202 templates (a retry wrapper each, and the host check): the full CRDs refuse both, so
    both renderers do, naming the field (rule templates-too-many)."""
    from torchdag.pipeline import run

    def job(count: int, extra: str = "") -> Path:
        nodes = "".join(f"  - {{name: n{i}, resources: {{limits: {{memory: {i + 1}Gi}}}}}}\n" for i in range(count))
        path = tmp_path / f"v{count}.yaml"
        path.write_text(f"name: shapes\nimage: img:1\nscript: /t.py\n{extra}nodes:\n{nodes}")
        return path

    def refused(path: Path, *counts: tuple[str, int]) -> None:
        with pytest.raises(ValuesError) as error:
            run(path)
        lines = [line.split(": nodes: ", 1)[1] for line in str(error.value).splitlines()]
        for field, count in counts:
            line = next(line for line in lines if re.search(rf"items in {re.escape(field)}[ ;]", line))
            assert f"make {count} items in {field}" in line
            assert f"refuse more than 200 ('{field}: Too many')" in line
            result = subprocess.run([helm, "template", "t", str(REPO / "chart"), "-f", str(path)], capture_output=True,
                                    text=True, timeout=300)
            assert result.returncode != 0 and f"nodes: {line}" in result.stderr, result.stderr[-2000:]

    # the DAG's entry, each shape, the watch, the helpers; the watch's and the helpers' tasks
    refused(job(201), ("spec.templates", 204), ("spec.templates[0].dag.tasks", 203))
    refused(job(99, "failurePolicy: {maxRestarts: 1}\n"), ("spec.templates", 202))
    run(job(98, "failurePolicy: {maxRestarts: 1}\n"))  # 200: taken

