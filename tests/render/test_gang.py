"""Gang scheduling (scheduling.gang): every training pod joins the job's one gang of N,
the PodGroup is created first and owned by the Workflow, an unplaceable gang ends the job
after scheduling.timeout, and `gang: none` changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from argo_helpers import task_pods, validate_argo, validate_kubernetes
from chart_helpers import documents, helm_template
from helpers import REPO
from torchdag import pipeline
from torchdag.errors import ValuesError

CASES = {kind: REPO / "tests" / "cases" / f"gang-{kind}.yaml" for kind in ("volcano", "kueue", "coscheduling")}
GROUP = "{{workflow.name}}"  # one gang per run
RUN = "wf-test"  # the run name argo_helpers.task_pods substitutes, as Argo would


def workflow(path: Path) -> dict:
    docs = [d for d in yaml.safe_load_all(pipeline.run(path).text) if d]
    (doc,) = [d for d in docs if d["kind"] in ("Workflow", "WorkflowTemplate")]
    return doc


def parts(doc: dict):
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    tasks = templates[doc["spec"]["entrypoint"]]["dag"]["tasks"]
    training = [t for t in tasks if t["name"].startswith("node-")]
    return templates, tasks, training


@pytest.mark.parametrize("kind", sorted(CASES))
def test_every_training_pod_joins_the_one_gang_of_n(kind):
    doc = workflow(CASES[kind])
    validate_argo(doc)
    templates, tasks, training = parts(doc)
    values = yaml.safe_load(CASES[kind].read_text())
    n = len(values["nodes"])
    assert len(training) == n
    pods = task_pods(doc)
    assert sorted(pods) == sorted([t["name"] for t in training] + ["gang-watch"])
    validate_kubernetes(pods.pop("gang-watch"))
    for name, pod in pods.items():
        validate_kubernetes(pod)
        template = templates[next(t["template"] for t in training if t["name"] == name)]
        assert "timeout" not in template  # Argo's template timeout would also cut a running pod
        labels, annotations = pod["metadata"]["labels"], pod["metadata"].get("annotations", {})
        if kind == "volcano":
            assert pod["spec"]["schedulerName"] == "volcano"
            assert annotations["scheduling.k8s.io/group-name"] == RUN
        elif kind == "coscheduling":
            assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
            assert labels["scheduling.x-k8s.io/pod-group"] == RUN
        else:
            assert "schedulerName" not in pod["spec"]  # Kueue gates pods for the default scheduler
            assert labels["kueue.x-k8s.io/queue-name"] == "research"
            assert labels["kueue.x-k8s.io/pod-group-name"] == RUN
            assert annotations["kueue.x-k8s.io/pod-group-total-count"] == str(n)
    # The bounded wait: the gang watch runs beside the training tasks and stops the
    # Workflow, naming the unplaced pods, if the gang is not placed within scheduling.timeout.
    watch = templates["gang-watch"]
    # its gangwatch.py first; the job goes on if the watch's pod is lost with its host (Error)
    assert {"name": "gang-watch", "template": "gang-watch", "continueOn": {"error": True},
            "dependencies": ["agents"]} in tasks
    # The gang's object, which the watch names the scheduler's reason from and deletes when it
    # stops the job: the PodGroup, or Kueue's Workload (named after the pod group): without its
    # deletion Kueue's finalizer keeps the pods Argo deletes Terminating (Kueue v0.17.0, e2e).
    podgroup = {"volcano": ["--podgroup=scheduling.volcano.sh/v1beta1/podgroups/{{workflow.name}}"],
                "coscheduling": ["--podgroup=scheduling.x-k8s.io/v1alpha1/podgroups/{{workflow.name}}"],
                "kueue": ["--podgroup=kueue.x-k8s.io/v1beta2/workloads/{{workflow.name}}"]}
    assert watch["container"]["command"] == ["python3", "/opt/torchdag/torchdag/agents/gangwatch.py",
                                             "--workflow={{workflow.name}}",
                                             "--namespace={{workflow.namespace}}", f"--pods={n}", "--timeout=900",
                                             *podgroup.get(kind, []), "--keep-watching"]
    assert watch["daemon"] is True  # it watches for pods re-created on a lost host while the job runs
    assert "schedulerName" not in watch and "affinity" not in watch  # not part of the gang
    if kind == "kueue":
        assert "gang" not in templates and all("gang" not in t.get("dependencies", []) for t in tasks)
        return
    # The PodGroup: applied by the first task, owned by the Workflow, minMember = N.
    assert tasks[0] == {"name": "gang", "template": "gang"}
    assert next(t for t in tasks if t["name"] == "gang-watch")["dependencies"] == ["agents"]  # not the gang
    assert all(t["dependencies"] == ["gang", "agents"] for t in training)
    resource = templates["gang"]["resource"]
    assert resource["action"] == "apply" and resource["setOwnerReference"] is True
    group = yaml.safe_load(resource["manifest"])
    assert group["kind"] == "PodGroup" and group["metadata"]["name"] == GROUP
    assert group["spec"]["minMember"] == n
    if kind == "volcano":
        assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
        assert group["spec"]["queue"] == "research" and group["spec"]["priorityClassName"] == "training-high"
        assert group["spec"]["minResources"] == {"huawei.com/Ascend910": "20"}
    else:
        assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
        assert group["spec"]["scheduleTimeoutSeconds"] == 900


def test_gang_none_is_the_default_and_adds_nothing(tmp_path):
    plain = REPO / "examples" / "cpu.yaml"
    explicit = tmp_path / "cpu.yaml"
    explicit.write_text(plain.read_text() + "scheduling: {gang: none}\n")
    assert pipeline.run(explicit).text == pipeline.run(plain).text
    doc = next(d for d in yaml.safe_load_all(pipeline.run(plain).text) if d and d["kind"] == "Workflow")
    templates = doc["spec"]["templates"]
    assert not [t["name"] for t in templates if "schedulerName" in t]
    assert not [t["name"] for t in templates
                if yaml.safe_load((t.get("resource") or {}).get("manifest", "{}")).get("kind") == "PodGroup"]
    assert [task["name"] for task in templates[0]["dag"]["tasks"]][-2:] == ["schedule-watch", "agents"]


def test_kueue_needs_a_queue_in_both_renderers(helm, tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text(CASES["kueue"].read_text().replace("  queue: research\n", ""))
    with pytest.raises(ValuesError, match="scheduling.queue: must name the Kueue LocalQueue"):
        pipeline.run(path)
    result = helm_template(helm, path)
    # a rule the schema states (x-rule kueue-queue): helm names the field, render.py words it
    assert result.returncode != 0 and "at '/scheduling/queue'" in result.stderr


@pytest.mark.parametrize("kind,group", [("volcano", "scheduling.volcano.sh"), ("coscheduling", "scheduling.x-k8s.io"),
                                        ("kueue", None)])
def test_chart_rbac_lets_the_workflow_apply_its_podgroup(helm, tmp_path, kind, group):
    path = tmp_path / "v.yaml"
    path.write_text(CASES[kind].read_text() + "serviceAccountName: trainer\nrbac: {create: true}\n")
    result = helm_template(helm, path)
    assert result.returncode == 0, result.stderr
    (role,) = [d for d in documents(result.stdout) if d["kind"] == "Role"]
    podgroups = [rule for rule in role["rules"] if rule["resources"] == ["podgroups"]]
    if group is None:
        assert podgroups == []
        # Kueue: the watch reads the group's Workload (Kueue's reason) and deletes it when it stops the job
        workloads = {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "delete"]}
        assert workloads in role["rules"]
    else:
        verbs = ["get", "create", "patch", "delete"]  # delete: the watch frees the queue when it stops the job
        assert podgroups == [{"apiGroups": [group], "resources": ["podgroups"], "verbs": verbs}]
    # the gang watch: read the pods, stop the Workflow
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]} in role["rules"]
    assert {"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["get", "patch"]} in role["rules"]


def test_local_runner_says_what_it_ignores(tmp_path):
    path = tmp_path / "local.yaml"
    path.write_text((REPO / "examples" / "local.yaml").read_text() + "scheduling: {gang: volcano, queue: q}\n")
    result = subprocess.run([sys.executable, "-m", "testbed.localrun", str(path), "--dry-run"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    assert ("[localrun] ignored: task gang (creates the gang's PodGroup: gang scheduling is not simulated"
            in result.stdout)
    assert "[localrun] ignored: task gang-watch (watches that the gang is placed in time: " in result.stdout
    assert ("[localrun] ignored: template cpu-x2: schedulerName volcano, "
            "scheduling.k8s.io/group-name={{workflow.name}}") in result.stdout
    assert "[localrun] node-0: exec" in result.stdout and "[localrun] node-1: exec" in result.stdout
