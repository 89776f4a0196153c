"""Size limits at their exact edges, in both renderers: the largest value each accepts
reaches the container intact, one byte more is refused by both with the same words.

The limits are written out here as docs/values.md states them, and held against the
oracles that set them: Linux's exec (MAX_ARG_STRLEN, run for real below) and Kubernetes'
256 KiB of annotations per object, with what Argo adds to every pod it creates
(workflow/controller/workflowpod.go, Argo v4.0.5)."""

from __future__ import annotations

import errno
import json
import subprocess

import pytest
import yaml

from argo_helpers import container_process, task_pods
from bad_cases import BASE
from chart_helpers import argo_document, helm_template
from torchdag import pipeline
from torchdag.errors import ValuesError

ARG_LIMIT = 131_071  # bytes of one argument or one NAME=value environment string
KUBERNETES_ANNOTATIONS = 262_144  # bytes of all annotations of one object, keys and values
ANNOTATION_LIMIT = 258_048  # what torchdag leaves to the user: 4 KiB kept for Argo's own and the gang's


def write(tmp_path, values: dict):
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False, allow_unicode=True, width=2**30), encoding="utf-8")
    return path


def with_field(field: str, text: str) -> dict:
    values = yaml.safe_load(yaml.safe_dump(BASE))
    if field == "script":
        values["script"] = text
    elif field == "args[0]":
        values["args"] = [text]
    elif field == "launcher.extraArgs[0]":
        values["launcher"] = {"extraArgs": [text]}
    elif field == "env.BIG":
        values["env"] = {"BIG": text}
    return values


def word(field: str, size: int, filler: str = "a") -> str:
    """A value of `size` bytes as the field carries it (env: NAME=value is what counts)."""
    head = {"script": "/", "args[0]": "--", "launcher.extraArgs[0]": "--log-dir=/", "env.BIG": ""}[field]
    room = size - len(head.encode()) - (len("BIG=") if field == "env.BIG" else 0)
    body = filler * (room // len(filler.encode()))
    return head + body + "a" * (room - len(body.encode()))


def what_the_container_gets(doc: dict, field: str) -> str:
    argv, env = container_process(task_pods(doc)["node-0"]["spec"]["containers"][0])
    if field == "env.BIG":
        return env["BIG"]
    (found,) = [w for w in argv if len(w) > 1000]
    return found


def exec_accepts(field: str, text: str) -> bool:
    """Linux itself: exec with this argument (or environment string), or E2BIG."""
    argv, env = ["/bin/true"], {}
    if field == "env.BIG":
        env["BIG"] = text
    else:
        argv.append(text)
    try:
        subprocess.run(argv, env=env, check=True, timeout=30)
    except OSError as exc:
        assert exc.errno == errno.E2BIG, exc
        return False
    return True


FIELDS = ["script", "args[0]", "launcher.extraArgs[0]", "env.BIG"]


@pytest.mark.parametrize("filler", ["a", "é"], ids=["ascii", "two-byte"])
@pytest.mark.parametrize("field", FIELDS)
def test_one_argument_at_the_linux_limit_and_one_byte_over(helm, tmp_path, field, filler):
    largest, too_long = word(field, ARG_LIMIT, filler), word(field, ARG_LIMIT + 1, filler)
    counted = lambda text: len(text.encode()) + (len("BIG=") if field == "env.BIG" else 0)  # noqa: E731
    assert (counted(largest), counted(too_long)) == (ARG_LIMIT, ARG_LIMIT + 1)
    assert exec_accepts(field, largest) and not exec_accepts(field, too_long)  # the kernel's own rule

    accepted = write(tmp_path, with_field(field, largest))
    ours = yaml.safe_load(pipeline.run(accepted).text)
    assert what_the_container_gets(ours, field) == largest
    chart = helm_template(helm, accepted)
    assert chart.returncode == 0, chart.stderr[-2000:]
    assert what_the_container_gets(argo_document(chart.stdout), field) == largest

    refused = write(tmp_path, with_field(field, too_long))
    shown = len(too_long.encode())
    what = "an environment string" if field == "env.BIG" else "a single argument"
    line = f"{field}: is {shown} bytes; Linux refuses {what} over {ARG_LIMIT} bytes (MAX_ARG_STRLEN)"
    with pytest.raises(ValuesError) as caught:
        pipeline.run(refused)
    assert caught.value.lines() == [f"{refused}: {line}"]
    chart = helm_template(helm, refused)
    assert chart.returncode != 0 and line in chart.stderr, chart.stderr[-2000:]


def annotations_of(size: int) -> dict:
    """Two annotations (a long value, a key at Kubernetes' 63-character name limit) of `size` bytes in all."""
    key = "k" * 63
    return {
        "torchdag-test.example.com/team": "research",
        key: "v" * (size - 63 - len("torchdag-test.example.com/team") - 8),
    }


def argo_pod_annotations(pod: dict, workflow: str, node_name: str) -> dict:
    """A task's pod as the controller creates it (workflowpod.go createWorkflowPod and
    addMetadata): the node name and id, the default container and the podGC strategy, then
    podMetadata's and the template's annotations."""
    node_id = f"{workflow}-{2**32 - 1}"  # Workflow.NodeID: the name, '-', a 32-bit FNV hash
    own = {
        "workflows.argoproj.io/node-name": node_name,
        "workflows.argoproj.io/node-id": node_id,
        "kubectl.kubernetes.io/default-container": "main",
        "workflows.argoproj.io/pod-gc-strategy": "OnWorkflowCompletion/2562047h47m16.854775807s",
    }
    return {**own, **pod["metadata"].get("annotations", {})}


def annotation_bytes(annotations: dict) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())  # apimachinery's count


@pytest.mark.parametrize("gang", ["volcano", "kueue"])
def test_annotations_at_their_limit_fit_every_object_argo_makes_of_them(helm, tmp_path, gang):
    """The largest annotations torchdag accepts still fit Kubernetes' 256 KiB on the
    Workflow (Argo adds workflows.argoproj.io/pod-name-format) and on every pod (Argo's
    own four and the gang's), in the worst case: the longest Workflow name (a 52-character
    job name, '-', 5 random characters), a restarted DAG's node names, the longest podGC."""
    values = yaml.safe_load(yaml.safe_dump(BASE))
    values.update(
        name="n" * 52,
        annotations=annotations_of(ANNOTATION_LIMIT),
        scheduling={"gang": gang, "queue": "q" * 63},
        failurePolicy={"maxRestarts": 100},
        timeouts={"workflowDeadline": None},  # 100 restarts' backoff fits no deadline (rule restarts-past-deadline)
    )
    path = write(tmp_path, values)
    doc = yaml.safe_load(pipeline.run(path).text)
    assert annotation_bytes(doc["metadata"]["annotations"]) == ANNOTATION_LIMIT
    workflow = "n" * 52 + "-" + "x" * 5
    with_argo = {**doc["metadata"]["annotations"], "workflows.argoproj.io/pod-name-format": "v2"}
    assert annotation_bytes(with_argo) <= KUBERNETES_ANNOTATIONS
    rendered = json.loads(json.dumps(doc).replace("{{workflow.name}}", workflow))
    for task, pod in task_pods(rendered).items():
        node_name = f"{workflow}(100).{task}"  # the 101st attempt of the DAG
        assert annotation_bytes(argo_pod_annotations(pod, workflow, node_name)) <= KUBERNETES_ANNOTATIONS, task
    assert helm_template(helm, path).returncode == 0


def test_annotations_one_byte_over_are_refused_by_both(helm, tmp_path):
    values = yaml.safe_load(yaml.safe_dump(BASE))
    values["annotations"] = annotations_of(ANNOTATION_LIMIT + 1)
    path = write(tmp_path, values)
    line = (
        f"annotations: hold {ANNOTATION_LIMIT + 1} bytes; at most {ANNOTATION_LIMIT} fit: Kubernetes allows "
        f"{KUBERNETES_ANNOTATIONS} bytes of annotations per object, and Argo and the gang scheduler add "
        "their own to the Workflow and to every pod"
    )
    with pytest.raises(ValuesError) as caught:
        pipeline.run(path)
    assert caught.value.lines() == [f"{path}: {line}"]
    chart = helm_template(helm, path)
    assert chart.returncode != 0 and line in chart.stderr, chart.stderr[-2000:]
