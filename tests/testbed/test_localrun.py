"""testbed.localrun: the Plan's nodes run as local processes (make smoke).

Real torchrun jobs on 127.0.0.1 (2 nodes x 2 processes, a few dozen steps), a node
killed mid-run, refusal of GPU/NPU nodes, each node's own words from the Plan and $(VAR)
expansion, the job's own timeouts bounding a hang when nothing stops the survivors, values
files taken as render.py takes them. Restarts: test_localrun_restart.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from string import Template

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import EXAMPLES
from localrun_helpers import ENV, LOCAL, REPO, Run, free_port, plan_of, processes_with, values_with
from testbed.localrun import (
    EXIT_INVALID,
    EXIT_REFUSED,
    Job,
    LocalRunError,
    Outcome,
    Supervisor,
    TaskResult,
    loss_value,
    outcome_lines,
    prepare_job,
)
from testbed.localrun import main as localrun_main
from testbed.runtime import Options, kube_container_env, kube_expand, local_devices
from torchdag.catalog import argo_parameter
from torchdag.plan import dollar_escape, node_container

# ---------------------------------------------------------------- end to end


@pytest.mark.torch  # a real torchrun job
def test_smoke_local_example_exits_0_with_a_summary():
    port = free_port()
    run = Run(str(LOCAL), "--port", str(port), "--timeout", "150")
    rc = run.finish(170)
    text = run.text
    assert rc == 0, text[-3000:]
    assert "[node-0] [trainer] step 40/40 loss" in text
    summary = text[text.index("[localrun] summary of local-smoke-"):].splitlines()
    assert summary[1].split()[1:5] == ["node-0", "ok", "exit", "0"], summary
    assert summary[2].split()[1:5] == ["node-1", "ok", "exit", "0"], summary
    # The loss column is the number alone: the trainer's last line is "done: 40 steps, loss A -> B".
    final = re.search(r"\[node-0\] \[trainer\] done: 40 steps, loss \S+ -> (\S+)", text).group(1)
    assert summary[1].endswith(f"last loss: {final}"), summary
    assert summary[2].endswith("last loss: -"), summary
    assert summary[-1] == "[localrun] result: every task exited 0"
    # The mappings are said, not silent.
    assert "[localrun] node-1: master address 198.18.0.1 -> 127.0.0.1" in text
    assert "[localrun] node-1: GLOO_SOCKET_IFNAME eno1 -> lo" in text
    assert f"[localrun] node-0: path /opt/torchdag/trainer/train.py -> {REPO}/trainer/train.py" in text
    assert "node affinity kubernetes.io/hostname=node-a ignored" in text


@pytest.mark.torch  # a real torchrun job
def test_killing_one_node_ends_the_run_naming_it(tmp_path):
    port = free_port()
    values = values_with(tmp_path, args=["--type", "example", "--max-steps", "100000", "--log-every", "10"])
    run = Run(str(values), "--port", str(port), "--timeout", "150")
    pid_line = run.wait_for(lambda line: line.startswith("[localrun] node-1: pid "), 30)
    pid = int(pid_line.split()[3].rstrip(":"))
    run.wait_for(lambda line: line.startswith("[node-0] [trainer] step 10/"), 90)
    os.kill(pid, signal.SIGKILL)  # the node's torchrun agent; its workers live in other sessions
    killed = time.monotonic()
    rc = run.finish(120)
    took = time.monotonic() - killed
    text = run.text
    assert rc == 1, text[-3000:]
    assert took < 15, took  # docs/smoke.md: "within a few seconds (measured: under 1 s)"
    assert "[localrun] node-1 failed first (killed by SIGKILL" in text
    summary = text[text.index("[localrun] summary of "):].splitlines()
    assert summary[1].split()[1:3] == ["node-0", "stopped"], summary
    assert summary[2].split()[1:3] == ["node-1", "FAILED"], summary
    # Orphaned workers of the killed agent included: nothing of the run is left.
    assert processes_with(f"--master_port={port}") == []
    assert processes_with(str(values)) == []


@pytest.mark.parametrize("example, kind", [("nvidia.yaml", "cuda"), ("cluster.yaml", "npu")])
def test_gpu_and_npu_nodes_are_refused_without_cpu(example, kind):
    if local_devices(kind):
        pytest.skip(f"this machine has {kind} devices")
    proc = subprocess.run([sys.executable, "-m", "testbed.localrun", f"examples/{example}"], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_REFUSED, proc.stderr
    label = {"cuda": "NVIDIA GPU", "npu": "Ascend NPU"}[kind]
    assert proc.stderr.startswith("localrun: refused: node-0, node-1: need "), proc.stderr
    assert proc.stderr.count("\n") == 2  # and the unmapped script, on a line of its own
    assert label in proc.stderr and "run with --cpu" in proc.stderr
    assert proc.stdout == ""  # nothing started


@pytest.mark.torch  # a real torchrun job
def test_cpu_flag_runs_ascend_nodes_on_cpu(tmp_path):
    values = values_with(
        tmp_path,
        args=["--type", "example", "--max-steps", "20", "--log-every", "10"],
        timeouts={"rendezvous": 60, "processGroup": 68, "workflowDeadline": 600},  # 68: HCCL's step, at least
        nodes=[{"name": "atlas-a", "address": "198.18.0.1", "nic": "enp189s0f0", "accelerator": "ascend910",
                "devices": 1},
               {"name": "atlas-b", "address": "198.18.0.2", "nic": "enp189s0f0", "accelerator": "ascend910",
                "devices": 1}],
    )
    assert not Path("/usr/local/Ascend/ascend-toolkit/set_env.sh").exists()
    run = Run(str(values), "--cpu", "--port", str(free_port()), "--timeout", "120")
    rc = run.finish(140)
    text = run.text
    assert rc == 0, text[-3000:]
    for note in ("dropped the set_env wrapper: /usr/local/Ascend/ascend-toolkit/set_env.sh does not exist here",
                 "TORCHDAG_DEVICE npu -> cpu (--cpu)", "TORCHDAG_BACKEND hccl -> gloo (--cpu)",
                 "HCCL_IF_IP 198.18.0.2 -> 127.0.0.1", "HCCL_SOCKET_IFNAME =enp189s0f0 -> =lo"):
        assert f"[localrun] node-1: {note}" in text
    assert "[node-0] [trainer] step 20/20 loss" in text


def test_cpu_flag_mapping_of_the_mixed_example():
    npu, gpu, cpu = prepare_job(plan_of(REPO / "examples" / "mixed-gloo.yaml"), Options(cpu=True)).tasks
    assert npu.argv[0] == "torchrun" and gpu.argv[0] == "torchrun"
    assert dict(npu.env)["TORCHDAG_DEVICE"] == dict(gpu.env)["TORCHDAG_DEVICE"] == "cpu"
    assert dict(gpu.env)["NCCL_SOCKET_IFNAME"] == "=lo"
    # nic: auto goes to the preflight, which resolves it here (to lo, the route to 127.0.0.1).
    assert cpu.argv[:2] == ["python3", f"{REPO}/torchdag/agents/preflight.py"]
    assert "--nic=auto" in cpu.argv and "--master-addr=127.0.0.1" in cpu.argv
    assert "--master_addr=127.0.0.1" in cpu.argv


def test_unmapped_script_is_refused_with_the_flag_to_use():
    with pytest.raises(LocalRunError, match=r"/code/rl/BladeTrain.py does not exist here; map .* --map SRC=DST"):
        prepare_job(plan_of(REPO / "examples" / "cluster.yaml"), Options(cpu=True))


# ---------------------------------------------------------------- the Workflow bounds a hang by itself


def bound_values(tmp_path: Path) -> Path:
    return values_with(tmp_path, args=["--type", "example", "--max-steps", "100000", "--log-every", "10"],
                       port=free_port(), timeouts={"rendezvous": 5, "processGroup": 5})


def run_without_gang_stop(tmp_path, only=(), freeze_at=None):
    """Supervise the job with gang stop off (as Argo: nothing stops the survivors);
    optionally freeze node-1 (SIGSTOP: a hung host, no connection reset) once node-0
    logs freeze_at. Returns (node-0's exit code, seconds from the event to its exit)."""
    job = prepare_job(plan_of(bound_values(tmp_path)), Options(), only=list(only))
    workflow, tasks = job.workflow, job.tasks
    event = {}
    lines = []

    def on_line(name, line):
        lines.append(f"[{name}] {line}")
        if freeze_at and name == "node-0" and freeze_at in line and "at" not in event:
            supervisor.signal_task("node-1", signal.SIGSTOP)
            event["at"] = time.monotonic()

    class Sink:  # keep pytest's output readable; lines are kept above
        def write(self, text):
            pass

        def flush(self):
            pass

    supervisor = Supervisor(workflow, tasks, out=Sink(), gang_stop=False, timeout=90, on_line=on_line, base_env=ENV)
    done = {}

    def watch():
        while supervisor.results["node-0"].returncode is None and not done:
            time.sleep(0.05)
        done["at"] = time.monotonic()
        supervisor.request_stop("test over")  # the frozen node would never end on its own

    started = time.monotonic()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    outcome = supervisor.run()
    done.setdefault("at", time.monotonic())
    watcher.join(5)
    result = supervisor.results["node-0"]
    assert not outcome.timed_out, "\n".join(lines[-30:])
    return result.returncode, done["at"] - event.get("at", started), "\n".join(lines)


@pytest.mark.torch  # a real torchrun job
def test_without_gang_stop_a_hung_peer_fails_the_survivor_within_the_pg_timeout(tmp_path):
    rc, took, text = run_without_gang_stop(tmp_path, freeze_at="step 20/")
    assert rc not in (0, None), text[-3000:]
    assert took < 5 + 15, took  # timeouts.processGroup: 5
    assert "Timed out waiting 5000ms" in text


@pytest.mark.torch  # a real torchrun job
def test_without_gang_stop_a_missing_peer_fails_the_master_within_the_rendezvous_timeout(tmp_path):
    rc, took, text = run_without_gang_stop(tmp_path, only=["node-0"])
    assert rc not in (0, None), text[-3000:]
    assert took < 5 + 15, took  # timeouts.rendezvous: 5
    assert "1/2 clients joined" in text


# ---------------------------------------------------------------- substitution and $(VAR) expansion


def test_kube_expand_rules():
    env = {"A": "alpha", "EMPTY": ""}.get
    cases = {
        "$$": "$", "$$(A)": "$(A)", "$(A)": "alpha", "x$(A)y": "xalphay", "$(EMPTY)": "",
        "$(NOPE)": "$(NOPE)", "$(A": "$(A", "$": "$", "a$": "a$", "$x": "$x", "$()": "$()",
        "$$$(A)": "$alpha", "$$$$": "$$", "$(A)$(A)": "alphaalpha", "$((A))": "$((A))",
        "$(A) $HOME ${A}": "alpha $HOME ${A}",
    }
    for raw, expanded in cases.items():
        assert kube_expand(raw, env) == expanded, raw
    # Kubernetes 1.37 reads the whole character after a lone `$` (older releases re-encoded
    # a non-ASCII lead byte as a code point); tests/validators/test_expand_oracle.py runs the Go code.
    assert kube_expand("$é", env) == "$é"


def test_kube_env_sees_only_earlier_entries():
    env = kube_container_env([("A", "a"), ("B", "$(A)-$(C)"), ("C", "c"), ("A", "A2 $(A)")])
    assert env == [("A", "a"), ("B", "a-$(C)"), ("C", "c"), ("A", "A2 a")]


@settings(max_examples=300, deadline=None)
@given(st.text(), st.dictionaries(st.text(st.characters(blacklist_characters=")"), min_size=1), st.text(), max_size=3))
def test_escaped_strings_survive_expansion_byte_exact(value, env):
    # render.py writes every user string through dollar_escape; expansion must undo exactly that.
    assert kube_expand(dollar_escape(value), env.get) == value


@pytest.mark.parametrize("path", EXAMPLES + sorted((REPO / "tests" / "cases").glob("*.yaml")), ids=lambda p: p.stem)
def test_each_nodes_words_are_its_templates_with_its_own_arguments(path):
    """What the runner starts for a node is what its pod gets on a cluster: the shape's
    template with the node's task arguments in place of the input parameters (Argo's part;
    tests/e2e/test_kubelet_differential.py holds it against Argo's real controller)."""
    plan = plan_of(path)
    for node in plan.nodes:
        given = {**dict(node.arguments), "restart": "3", "rdzv-host": "true" if node.rank == 0 else "false"}

        def filled(word: str, given: dict = given) -> str:
            for name, value in given.items():
                word = word.replace(argo_parameter(name), value)
            return word

        command, args, env = node_container(plan, node, restart=3)
        shape = node.shape
        assert command == [filled(word) for word in shape.command], node.task
        assert args == [filled(word) for word in shape.args], node.task
        assert env == [(name, filled(value)) for name, value in shape.env], node.task


def test_every_node_gets_its_own_rank_nic_and_address():
    """The master in the middle of the list is rank 0; each node's rank, NIC and address are
    its own (the three-node case: three NICs, master second in the file)."""
    plan = plan_of(REPO / "tests" / "cases" / "three-node-master-middle.yaml")
    job = Job(plan, Options(address=None, nic=None), "three-node-abcde", [])  # as rendered: no local mapping
    tasks = [job.node_task(node, 0) for node in plan.nodes]
    assert [t.name for t in tasks] == ["node-0", "node-1", "node-2"]
    assert [t.devices for t in tasks] == [8, 8, 4] and {t.device for t in tasks} == {"npu"}
    for task, node in zip(tasks, plan.nodes):
        env = dict(task.env)
        assert task.host == node.name and task.rank == node.rank
        assert f"--node_rank={node.rank}" in task.argv and f"--nproc_per_node={node.devices}" in task.argv
        assert "--master_addr=10.1.0.2" in task.argv
        assert env["GLOO_SOCKET_IFNAME"] == node.nic and env["HCCL_SOCKET_IFNAME"] == "=" + node.nic
        assert env.get("HCCL_IF_IP") == (node.address if node.address[0].isdigit() else None)
    written = yaml.safe_load((REPO / "tests" / "cases" / "three-node-master-middle.yaml").read_text(encoding="utf-8"))
    assert tasks[0].host == next(n["name"] for n in written["nodes"] if n.get("master"))


@pytest.mark.torch  # a real torchrun job
def test_hostile_strings_reach_the_script_byte_exact(tmp_path):
    """tests/cases/hostile-strings.yaml run for real: a stand-in script (at the mapped
    image path) records what it received under torchrun."""
    values = yaml.safe_load((REPO / "tests" / "cases" / "hostile-strings.yaml").read_text())
    script = tmp_path / "code" / "my script; rm -rf ~.py"
    script.parent.mkdir()
    record = tmp_path / "received"
    script.write_text(
        "import json, os, sys\n"
        f"path = {str(record)!r} + os.environ['GROUP_RANK']\n"
        "json.dump({'argv': sys.argv[1:], 'GREETING': os.environ['GREETING'], 'MULTILINE': os.environ['MULTILINE']},"
        " open(path, 'w'))\n"
    )
    port = free_port()
    run = Run(str(REPO / "tests" / "cases" / "hostile-strings.yaml"), "--map", f"/code={tmp_path / 'code'}",
              "--port", str(port), "--timeout", "90")
    rc = run.finish(110)
    assert rc == 0, run.text[-3000:]
    assert "workingDir /work dir/with: colon does not exist here" in run.text
    tasks = prepare_job(plan_of(REPO / "tests" / "cases" / "hostile-strings.yaml"),
                        Options(maps=[("/code", str(tmp_path / "code"))])).tasks
    for rank, task in enumerate(tasks):
        got = json.loads((tmp_path / f"received{rank}").read_text())
        handed = task.argv[task.argv.index(str(script)) + 1:]  # what the container gives torchrun
        # torchrun passes every script argument through string.Template(arg).safe_substitute(
        # local_rank=N) (its ${local_rank} macro), which also turns $$ into $.
        assert got["argv"] == [Template(arg).safe_substitute(local_rank="0") for arg in handed]
        assert got["GREETING"] == values["env"]["GREETING"]
        assert got["MULTILINE"] == values["env"]["MULTILINE"]
        assert got["argv"] == values["args"]  # byte-exact, $$(HOME) and backticks included


def test_summary_names_the_first_failure():
    outcome = Outcome("wf-x",
                      [TaskResult("node-0", pid=1, returncode=1, started=0, ended=3, stopped_by_runner="node-1 failed"),
                               TaskResult("node-1", pid=2, returncode=-9, started=0, ended=2)],
                      first_failure="node-1", elapsed=3)
    lines = outcome_lines(outcome)
    assert lines[1].split()[:4] == ["node-0", "stopped", "exit", "1"]
    assert lines[2].split()[:5] == ["node-1", "FAILED", "killed", "by", "SIGKILL"]
    assert lines[3] == "node-1 failed first (killed by SIGKILL after 2.0 s); stopped by the runner: node-0"
    assert outcome.code == 1


def test_loss_column_is_the_number_alone():
    cases = {
        "[trainer] step 40/40 loss 0.062957 samples/s 1234": "0.062957",
        "[trainer] done: 40 steps, loss 1.0566297769546509 -> 0.06295721232891083": "0.06295721232891083",
        "epoch 3 train_loss=1.5e-03 val_loss=2": "1.5e-03",
        "Loss: 12": "12", "loss nan": "nan", "loss -inf": "-inf", "loss .5": ".5",
        "loss.backward() took 3 ms": None, "losses 3": None, "gloss 2": None, "no loss here": None,
    }
    for line, number in cases.items():
        assert loss_value(line) == number, line
    outcome = Outcome("wf", [TaskResult("node-0", pid=1, returncode=0, started=0, ended=1, last_loss="0.0123")],
                      elapsed=1)
    assert outcome_lines(outcome)[1].endswith("last loss: 0.0123")


# ---------------------------------------------------------------- values files, as render.py takes them


@pytest.mark.parametrize("kind", ["missing", "folder", "binary"])
def test_an_unreadable_values_file_reads_as_it_does_from_render_py(tmp_path, capsys, kind):
    from torchdag.cli import main as render_main

    path = {"missing": tmp_path / "nope.yaml", "folder": tmp_path, "binary": tmp_path / "latin1.yaml"}[kind]
    if kind == "binary":
        path.write_bytes(b"name: caf\xe9\n")
    rendered = render_main([str(path)])
    render_err = capsys.readouterr().err
    ran = localrun_main([str(path)])
    captured = capsys.readouterr()
    assert (ran, captured.err) == (rendered, render_err) and rendered == EXIT_INVALID
    assert captured.out == ""
    if kind == "missing":
        assert captured.err == f"{path}: (top level): no such file\n"


def test_values_files_merge_as_render_py_merges_them(tmp_path, capsys):
    """`-f` as render.py takes it: later files merged over earlier ones (Helm's -f)."""
    override = tmp_path / "override.yaml"
    override.write_text("args: [--type, example, --max-steps, '7']\nport: 29123\n")
    assert localrun_main([str(LOCAL), "-f", str(override), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[localrun] local-smoke-")
    assert "--master_port=29123" in out and out.rstrip().endswith("--type example --max-steps 7")
    with pytest.raises(SystemExit) as stopped:
        localrun_main(["--dry-run"])
    assert stopped.value.code == EXIT_INVALID
    assert "the following arguments are required: values" in capsys.readouterr().err
