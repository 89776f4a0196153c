"""testbed.localrun: restarts as the Plan has them. Whole-job restarts (failurePolicy recovery
job), as Argo's retryStrategy on the DAG does them: a stand-in script for speed, and a real
torchrun job whose killed worker makes every node resume from a checkpoint (issue 11's
acceptance). Node recovery (recovery node), as each node task's own retryStrategy does it
(tests/e2e/test_e2e_elastic.py on the real controller): a killed node restarts alone while the
others keep their processes, and its restarts run out into the job's failure."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from localrun_helpers import Run, free_port, plan_of, processes_with, values_with
from testbed.localrun import LocalTask, Outcome, RetryPolicy, Supervisor, TaskResult, outcome_lines, prepare_job
from testbed.localrun import main as localrun_main
from testbed.localrun.restart import NodeRetries
from testbed.runtime import Options

# ---------------------------------------------------------------- whole-job restarts (failurePolicy recovery job)


def with_restarts(values_path: Path, limit: int = 2, seconds: int = 1, **changes) -> Path:
    """The values file beside itself with `failurePolicy.maxRestarts` and recovery job: the Plan's
    retry (Argo's retryStrategy on the train DAG) and TORCHDAG_RESTART in every container."""
    values = yaml.safe_load(values_path.read_text(encoding="utf-8"))
    values.update(changes, failurePolicy={"maxRestarts": limit, "backoffSeconds": seconds, "recovery": "job"})
    path = values_path.with_name("restarts-" + values_path.name)
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def test_the_restart_policy_is_the_plans(tmp_path):
    policy = RetryPolicy(3, duration=10, factor=2)
    assert [policy.delay(n) for n in (1, 2, 3)] == [10, 20, 40]
    assert policy.refusal(3) is None
    assert policy.refusal(4) == "no restarts left (limit 3)"
    assert RetryPolicy(2, duration=1, factor=2, cap=1.5).delay(3) == 1.5

    values = with_restarts(values_with(tmp_path), limit=2, seconds=10)
    job = prepare_job(plan_of(values), Options())
    assert job.retry == RetryPolicy(2, 10.0, 2)  # local.yaml sets timeouts.workflowDeadline: no cap
    assert [dict(t.env)["TORCHDAG_RESTART"] for t in job.tasks] == ["0", "0"]
    assert [dict(t.env)["TORCHDAG_RESTART"] for t in job.tasks_for(2)] == ["2", "2"]
    assert [t.argv for t in job.tasks_for(2)] == [t.argv for t in job.tasks]
    uncapped = with_restarts(values_with(tmp_path, timeouts={"workflowDeadline": None}), limit=20, seconds=30)
    assert prepare_job(plan_of(uncapped), Options()).retry.cap == 3600
    # No restarts: none planned, and no TORCHDAG_RESTART.
    plain = prepare_job(plan_of(values_with(tmp_path)), Options())
    assert plain.retry is None and "TORCHDAG_RESTART" not in dict(plain.tasks[0].env)
    # Node recovery: each node's own restarts, one node's task made again for its restart n.
    values = values_with(tmp_path, failurePolicy={"maxRestarts": 3, "backoffSeconds": 5, "recovery": "node"},
                         elastic={"minNodes": 1})
    job = prepare_job(plan_of(values), Options())
    assert job.retry == RetryPolicy(3, 5.0, 2, recovery="node") and job.node_recovery
    again = job.task_again("node-1", 2)
    assert (again.name, again.restart, dict(again.env)["TORCHDAG_RESTART"]) == ("node-1", 2, "2")
    assert [t.elastic for t in job.tasks] == [False, True]  # elastic.minNodes 1: node-1 may be left behind


def test_dry_run_shows_the_restart_policy_and_what_a_restart_changes(tmp_path, capsys):
    values = with_restarts(values_with(tmp_path), limit=2, seconds=10)
    assert localrun_main([str(values), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(gang stop on; timeout 600 s; restarts up to 2)")
    assert "[localrun] failurePolicy (recovery job): restarts up to 2, backoff 10 s x2 (waits 10, 20 s)" in out
    assert "[localrun] node-0: env TORCHDAG_RESTART=0" in out
    assert "[localrun] node-0: on restart 1: env TORCHDAG_RESTART=1" in out
    assert "[localrun] node-1: on restart 1: env TORCHDAG_RESTART=1" in out


def test_dry_run_shows_node_recovery_and_its_elastic_members(tmp_path, capsys):
    values = values_with(tmp_path, failurePolicy={"maxRestarts": 2, "backoffSeconds": 10, "recovery": "node"},
                         elastic={"minNodes": 1})
    assert localrun_main([str(values), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(gang stop on; timeout 600 s; restarts up to 2 per node)")
    assert ("[localrun] failurePolicy (recovery node): restarts up to 2 per node, backoff 10 s x2 "
            "(waits 10, 20 s)") in out
    assert ("[localrun] elastic.minNodes 1: node-1 may be left behind once out of restarts, and the others go on "
            "without them (torchrun --nnodes=1:2)") in out
    assert "[localrun] node-1: on restart 1: env TORCHDAG_RESTART=1" in out


FLAKY = """\
import os, sys, time
rank, restart = os.environ["GROUP_RANK"], int(os.environ["TORCHDAG_RESTART"])
print(f"rank {rank} restart {restart}", flush=True)
if restart < FAIL_UNTIL:
    if rank == "1":
        sys.exit(3)
    time.sleep(600)  # the gang stop ends it
print(f"loss 0.{restart}5", flush=True)
"""


def flaky_job(tmp_path: Path, fail_until: int, limit: int) -> Path:
    """The local example on one process per node, its script swapped for one that fails on
    node-1 while TORCHDAG_RESTART < fail_until (node-0 waits to be stopped), with restarts."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "flaky.py").write_text(FLAKY.replace("FAIL_UNTIL", str(fail_until)))
    nodes = [{"name": "node-a", "address": "198.18.0.1", "devices": 1, "master": True},
             {"name": "node-b", "address": "198.18.0.2", "devices": 1}]
    values = values_with(tmp_path, script="/code/flaky.py", args=[], nodes=nodes, port=free_port())
    return with_restarts(values, limit=limit, seconds=1)


@pytest.mark.torch  # torchrun runs the stand-in script
def test_a_failed_node_restarts_every_node_with_backoff_until_an_attempt_succeeds(tmp_path):
    run = Run(str(flaky_job(tmp_path, fail_until=2, limit=2)), "--map", f"/code={tmp_path / 'code'}",
              "--backoff-scale", "0.1", "--grace", "2", "--timeout", "150")
    assert run.finish(180) == 0, run.text[-3000:]
    lines = run.lines
    assert "[localrun] restart 1/2 in 0.1 s: node-1 failed (exit 1)" in lines  # torchrun's status for a failed worker
    assert "[localrun] restart 1/2: starting 2 task(s) again (TORCHDAG_RESTART=1)" in lines
    assert "[localrun] restart 2/2 in 0.2 s: node-1 failed (exit 1)" in lines
    for restart in (0, 1, 2):
        assert f"[node-0] rank 0 restart {restart}" in lines and f"[node-1] rank 1 restart {restart}" in lines
    summary = lines[lines.index(next(line for line in lines if line.startswith("[localrun] summary of "))):]
    assert summary[0].endswith(", 3 attempts):")
    assert summary[1].startswith("[localrun] attempt 1 (restart 0, ")
    assert summary[1].endswith("): node-1 failed first (exit 1 after " + summary[1].split(" after ")[1])
    assert summary[1].endswith("; stopped by the runner: node-0")
    assert summary[2].split()[1:3] == ["node-0", "stopped"]
    assert summary[3].split()[1:5] == ["node-1", "FAILED", "exit", "1"]
    assert summary[4].startswith("[localrun] attempt 2 (restart 1, ") and ": node-1 failed first (exit 1" in summary[4]
    assert summary[7].startswith("[localrun] attempt 3 (restart 2, ") and summary[7].endswith("): every task exited 0")
    assert summary[8].endswith("last loss: 0.25") and summary[9].endswith("last loss: 0.25")
    assert summary[-1] == "[localrun] result: every task exited 0 on attempt 3 (after 2 restarts)"


@pytest.mark.torch  # torchrun runs the stand-in script
def test_when_restarts_run_out_the_run_fails_naming_the_node(tmp_path):
    run = Run(str(flaky_job(tmp_path, fail_until=9, limit=1)), "--map", f"/code={tmp_path / 'code'}",
              "--backoff-scale", "0", "--grace", "2", "--timeout", "90")
    assert run.finish(120) == 1, run.text[-3000:]
    assert "[localrun] restart 1/1 in 0 s: node-1 failed (exit 1)" in run.lines
    assert not any(line.startswith("[localrun] restart 2/") for line in run.lines)
    assert run.lines[-1] == ("[localrun] result: FAILED (exit 1): node-1 failed on attempt 2 (after 1 restart); "
                             "no restarts left (limit 1)")


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.torch  # a real torchrun job
def test_a_killed_worker_restarts_every_node_which_resume_from_the_checkpoint(tmp_path):
    """Issue 11's acceptance, on the Plan's restarts: SIGKILL one training worker
    of node-1 after the first checkpoint; both nodes restart and resume from it."""
    checkpoints = tmp_path / "ckpt"
    values = values_with(
        tmp_path, args=["--type", "example", "--max-steps", "1000", "--log-every", "250",
                        "--checkpoint-dir", str(checkpoints), "--checkpoint-every", "100"],
        nodes=[{"name": "node-a", "address": "198.18.0.1", "devices": 1, "master": True},
               {"name": "node-b", "address": "198.18.0.2", "devices": 1}],
    )
    rendered = with_restarts(Path(values), limit=2, seconds=1)
    run = Run(str(rendered), "--port", str(free_port()), "--backoff-scale", "0.5", "--timeout", "150")
    pid_line = run.wait_for(lambda line: line.startswith("[localrun] node-1: pid "), 30)
    agent = int(pid_line.split()[3].rstrip(":"))
    run.wait_for(lambda line: line.startswith("[node-0] [trainer] checkpoint /"), 90)
    workers = [pid for pid in children_of(agent) if b"train.py" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert workers, "node-1's torchrun has no training worker"
    os.kill(workers[0], signal.SIGKILL)
    rc = run.finish(150)
    text = run.text
    assert rc == 0, text[-4000:]
    assert re.search(r"^\[localrun\] restart 1/2 in 0\.5 s: node-[01] failed \((exit \d+|killed by SIG\w+)\)$", text,
                     re.M), text[-4000:]
    resumed = re.search(r"^\[node-0\] \[trainer\] resumed from checkpoint .* at step (\d+)$", text, re.M)
    assert resumed and int(resumed.group(1)) >= 100, text[-4000:]
    assert "[node-0] [trainer] step 1000/1000 loss" in text
    assert run.lines[-1] == "[localrun] result: every task exited 0 on attempt 2 (after 1 restart)"
    assert processes_with(str(rendered)) == [] and processes_with(str(checkpoints)) == []


@pytest.mark.torch  # torchrun runs the stand-in script
@pytest.mark.parametrize("ending", ["interrupt", "timeout"])
def test_a_stop_during_the_backoff_starts_no_restart(tmp_path, ending):
    # 20 s: torchrun fails node-1 before, and the timeout comes during the 100 s wait
    extra = ["--timeout", "20"] if ending == "timeout" else ["--timeout", "60"]
    run = Run(str(flaky_job(tmp_path, fail_until=9, limit=2)), "--map", f"/code={tmp_path / 'code'}",
              "--backoff-scale", "100", "--grace", "2", *extra)  # waits 100 s
    run.wait_for(lambda line: line.startswith("[localrun] restart 1/2 in 100 s: node-1 failed (exit 1)"), 60)
    if ending == "interrupt":
        run.proc.send_signal(signal.SIGTERM)
    rc = run.finish(20)
    assert rc == {"interrupt": 130, "timeout": 124}[ending], run.text[-3000:]
    said = {"interrupt": "no restart: the runner got SIGTERM", "timeout": "no restart: timed out after 20 s"}[ending]
    assert f"[localrun] {said}" in run.lines
    assert not any(line.startswith("[localrun] restart 1/2: starting") for line in run.lines)
    waited = {"interrupt": "interrupted", "timeout": "timed out"}[ending]
    assert f"[localrun] {waited} while waiting to restart" in run.lines
    assert run.lines[-1] == f"[localrun] result: FAILED (exit {rc}) on attempt 1 (after 0 restarts)"


def test_one_attempt_without_a_restart_left_says_why():
    from testbed.localrun import JobOutcome

    attempt = Outcome("wf-x", [TaskResult("node-0", pid=1, returncode=0, started=0, ended=3),
                               TaskResult("node-1", pid=2, returncode=1, started=0, ended=2)],
                      first_failure="node-1", elapsed=3)
    job = JobOutcome("wf-x", [attempt], RetryPolicy(0), elapsed=3,
                     no_restart="no restarts left (limit 0)")
    lines = outcome_lines(job)
    assert lines[0] == "summary of wf-x (3.0 s):" and lines[3] == "node-1 failed first (exit 1 after 2.0 s)"
    assert lines[-1] == "result: FAILED (exit 1); no restart: no restarts left (limit 0)"
    assert job.code == 1


# ---------------------------------------------------------------- node recovery (failurePolicy recovery node)

NODE_STEPS, NODE_EVERY = 600, 100
ROUND = re.compile(r"^\[(node-\d)\] \[trainer\] node \d+: rank \d+ of \d+, worker restart (\d+), resumed from step ")


def pids_started(lines: list[str], task: str) -> list[int]:
    """The main pids of a task's processes, from the runner's `node-N: pid P:` lines."""
    return [int(line.split()[3].rstrip(":")) for line in lines if line.startswith(f"[localrun] {task}: pid ")]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


NODE_1 = """\
import os, pathlib, sys
restart = int(os.environ["TORCHDAG_RESTART"])
pathlib.Path(f"started-{restart}").touch()
sys.exit(0 if restart >= FAILS else 3)
"""
NODE_0 = "import pathlib, time\nwhile not pathlib.Path('started-LAST').exists(): time.sleep(0.05)"


@pytest.mark.parametrize(("fails", "limit", "elastic", "code", "result"), [
    (1, 2, False, 0, "result: every task exited 0 (after AGAIN)"),
    (9, 1, False, 1, "result: FAILED (exit 1): node-1 failed for good, after AGAIN"),
    (9, 1, True, 0, "result: every task but node-1 exited 0 (after AGAIN)"),
], ids=["restarted", "out-of-restarts", "left-behind"])
def test_one_node_starts_again_alone_while_the_other_keeps_running(tmp_path, fails, limit, elastic, code, result):
    """The Supervisor under node recovery, with plain processes for torchrun: node-1 fails
    `fails` times; node-0 runs until node-1's last process has started (or is stopped)."""
    tried = min(fails, limit)  # node-1's last restart
    last = tried if code == 0 else "never"

    def task(name: str, restart: int = 0) -> LocalTask:
        script = NODE_1.replace("FAILS", str(fails)) if name == "node-1" else NODE_0.replace("LAST", str(last))
        return LocalTask(name, name, int(name[-1]), 1, [sys.executable, "-c", script],
                         [("TORCHDAG_RESTART", str(restart))], str(tmp_path), "cpu", restart=restart,
                         elastic=elastic and name == "node-1")

    job = SimpleNamespace(retry=RetryPolicy(limit, 0.1, 2, recovery="node"), task_again=task)
    retries, out = NodeRetries(job, backoff_scale=1.0), io.StringIO()
    outcome = Supervisor("wf-x", [task("node-0"), task("node-1")], out=out, timeout=60, grace=1.0,
                         bin_dir=str(tmp_path), node_retries=retries).run()
    said = out.getvalue().splitlines()
    assert outcome.code == code, said
    assert [(r.name, r.restart) for r in outcome.results] == [("node-0", 0)] + [("node-1", n) for n in range(tried + 1)]
    assert "[localrun] restart 1/%d of node-1 in 0.1 s: node-1 failed (exit 3); the others keep running" % limit in said
    assert sum(line.startswith("[localrun] node-0: pid ") for line in said) == 1, said
    node_0 = outcome.results[0]
    assert (node_0.returncode, node_0.stopped_by_runner) == ((0, None) if code == 0 else (-15, "node-1 failed")), said
    assert outcome.left_behind == (["node-1"] if elastic else [])
    assert retries.no_restart == (None if fails <= limit else f"no restarts left (limit {limit})")
    lines = outcome_lines(outcome)
    rows = [line.split()[:2] for line in lines[1:3 + tried]]
    assert rows[1:] == [[f"node-1({n})", "FAILED" if n < fails else "ok"] for n in range(tried + 1)], rows
    again = f"{tried} node restart{'s' if tried > 1 else ''}: node-1"
    assert lines[-1] == result.replace("AGAIN", again), lines


def trained_until_a_checkpoint(tmp_path: Path, limit: int, min_nodes: int = 0, *options: str) -> tuple[Path, Run]:
    """The example trainer on two nodes of one process under node recovery, run until its first checkpoint."""
    values = values_with(
        tmp_path, args=["--type", "example", "--max-steps", str(NODE_STEPS), "--log-every", "100",
                        "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", str(NODE_EVERY),
                        "--metrics-file", str(tmp_path / "metrics.json")],
        nodes=[{"name": "node-a", "address": "198.18.0.1", "devices": 1, "master": True},
               {"name": "node-b", "address": "198.18.0.2", "devices": 1}],
        failurePolicy={"maxRestarts": limit, "backoffSeconds": 1, "recovery": "node"},
        elastic={"minNodes": min_nodes, "rejoinSeconds": 2}, port=free_port())
    run = Run(str(values), "--timeout", "240", *options)
    run.wait_for(lambda line: re.match(r"^\[node-\d\] \[trainer\] checkpoint /", line) is not None, 120)
    return values, run


@pytest.mark.torch  # a real torchrun job
def test_a_killed_node_restarts_alone_and_the_others_keep_their_processes(tmp_path):
    """The local twin of tests/e2e/test_e2e_elastic.py: node-1's torchrun (its pod) is
    SIGKILLed after the first checkpoint; node-1 alone starts again after the Plan's backoff,
    node-0's agent keeps running and restarts its worker into the next rendezvous round, and
    the job ends at its step count, resumed from the checkpoint."""
    values, run = trained_until_a_checkpoint(tmp_path, limit=2)
    survivor, (killed,) = pids_started(run.lines, "node-0"), pids_started(run.lines, "node-1")
    os.kill(killed, signal.SIGKILL)
    run.wait_for(lambda line: line.startswith("[localrun] restart 1/2 of node-1: starting"), 30)
    assert survivor and all(alive(pid) for pid in survivor), "node-0 stopped when node-1 was lost"
    rc = run.finish(200)
    text, lines = run.text, run.lines
    assert rc == 0, text[-4000:]
    assert ("[localrun] restart 1/2 of node-1 in 1 s: node-1 failed (killed by SIGKILL); the others keep running"
            in lines), text[-4000:]
    assert "[localrun] restart 1/2 of node-1: starting node-1 again (TORCHDAG_RESTART=1)" in lines
    assert pids_started(lines, "node-0") == survivor and len(pids_started(lines, "node-1")) == 2
    restarted = {(node, int(n)) for line in lines if (m := ROUND.match(line)) for node, n in [m.groups()]}
    assert ("node-0", 1) in restarted, text[-4000:]  # the survivor's agent restarted its worker
    done = json.loads((tmp_path / "metrics.json").read_text())
    assert done["steps"] == NODE_STEPS and done["resumed_from_step"] >= NODE_EVERY and done["world_size"] == 2, done
    summary = lines[lines.index(next(line for line in lines if line.startswith("[localrun] summary of "))):]
    assert summary[0].endswith(", 1 node restart):"), summary
    assert [row.split()[1:5] for row in summary[1:4]] == [["node-0", "ok", "exit", "0"],
                                                          ["node-1(0)", "FAILED", "killed", "by"],
                                                          ["node-1(1)", "ok", "exit", "0"]], summary
    assert summary[-1] == "[localrun] result: every task exited 0 (after 1 node restart: node-1)"
    assert processes_with(str(values)) == []


@pytest.mark.torch  # a real torchrun job
@pytest.mark.parametrize("elastic", [False, True], ids=["member", "elastic-member"])
def test_a_node_out_of_restarts_fails_the_job_unless_it_is_an_elastic_member(tmp_path, elastic):
    """node-1's torchrun is killed after the first checkpoint, restarted alone once (the
    limit), and killed again before it joins: the job fails and node-0 is stopped; with
    elastic.minNodes 1 node-1 is left behind and node-0 trains on alone to the step count."""
    values, run = trained_until_a_checkpoint(tmp_path, 1, 1 if elastic else 0, "--backoff-scale", "0", "--grace", "2")
    os.kill(pids_started(run.lines, "node-1")[0], signal.SIGKILL)
    run.wait_for(lambda line: line.startswith("[localrun] node-1: pid "), 30)
    os.kill(pids_started(run.lines, "node-1")[1], signal.SIGKILL)
    rc = run.finish(200)
    lines = run.lines
    assert rc == (0 if elastic else 1), run.text[-4000:]
    assert ("[localrun] restart 1/1 of node-1 in 0 s: node-1 failed (killed by SIGKILL); the others keep running"
            in lines)
    assert not any(line.startswith("[localrun] restart 2/") for line in lines)
    assert len(pids_started(lines, "node-0")) == 1 and len(pids_started(lines, "node-1")) == 2
    rows = lines[lines.index(next(line for line in lines if line.startswith("[localrun] summary of "))) + 1:][:3]
    assert [row.split()[1:3] for row in rows] == [["node-0", "ok" if elastic else "stopped"],
                                                  ["node-1(0)", "FAILED"], ["node-1(1)", "FAILED"]], rows
    if elastic:
        assert ("[localrun] node-1 left behind (killed by SIGKILL): an elastic member, the job goes on without it"
                in lines)
        done = json.loads((tmp_path / "metrics.json").read_text())
        assert done["steps"] == NODE_STEPS and done["world_size"] == 1, done  # node-0 went on alone
        assert lines[-1] == "[localrun] result: every task but node-1 exited 0 (after 1 node restart: node-1)"
    else:
        assert "[localrun] node-1 failed first (killed by SIGKILL after " in run.text
        assert "[localrun] stopping node-0 (node-1 failed)" in lines
        assert lines[-1] == ("[localrun] result: FAILED (exit 1): node-1 failed for good, after 1 node restart: "
                             "node-1; no restart: no restarts left (limit 1)")
    assert processes_with(str(values)) == []
