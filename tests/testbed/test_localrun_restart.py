"""testbed.localrun: whole-job restarts as Argo's retryStrategy on the DAG does them: a
stand-in script for speed, and a real torchrun job whose killed worker makes every node
resume from a checkpoint (issue 11's acceptance)."""

from __future__ import annotations

import os
import re
import signal
import tempfile
from pathlib import Path

import pytest
import yaml

from localrun_helpers import LOCAL, Run, free_port, processes_with, rendered_workflow, values_with
from testbed.localrun import (
    LocalRunError,
    Options,
    Outcome,
    RetryPolicy,
    TaskResult,
    outcome_lines,
    parse_duration,
    prepare_job,
)
from testbed.localrun import main as localrun_main
from torchdag.pipeline import build

# ---------------------------------------------------------------- whole-job restarts (retryStrategy)


def with_restarts(values_path: Path, limit: int = 2, seconds: int = 1) -> dict:
    """The Workflow render.py writes for `values_path` plus `failurePolicy.maxRestarts`:
    the entrypoint DAG's retryStrategy, a `restart` argument of `{{retries}}` on every
    task, and TORCHDAG_RESTART in every container."""
    policy = f"failurePolicy: {{maxRestarts: {limit}, backoffSeconds: {seconds}, recovery: job}}\n"
    text = values_path.read_text(encoding="utf-8") + policy
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / values_path.name
        path.write_text(text, encoding="utf-8")
        return rendered_workflow(build(path))


def write_doc(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_retry_strategy_is_read_as_argo_reads_it():
    assert [parse_duration(v, "x") for v in (10, "10", "10s", "1m30s", "1.5h", "250ms")] == [10, 10, 10, 90, 5400, 0.25]
    with pytest.raises(LocalRunError, match=r"x: '10 s' is not a duration"):
        parse_duration("10 s", "x")
    policy = RetryPolicy("train", limit=3, policy="Always", duration=10, factor=2)
    assert [policy.delay(n) for n in (1, 2, 3)] == [10, 20, 40]
    assert policy.refusal(3, 0, 40) is None
    assert policy.refusal(4, 0, 80) == "no restarts left (limit 3)"
    assert RetryPolicy("train", 3, "OnError").refusal(1, 0, 0) == "retryPolicy OnError does not retry a failed node"
    assert RetryPolicy("train", None, duration=5, max_duration=60).refusal(9, 58,
                                                                           5).startswith("backoff.maxDuration 60 s")
    assert RetryPolicy("train", 2, duration=1, factor=2, cap=1.5).delay(3) == 1.5

    doc = with_restarts(LOCAL, limit=2, seconds=10)
    job = prepare_job(doc, Options())
    assert job.retry == RetryPolicy("train", 2, "Always", 10.0, 2)
    assert [dict(t.env)["TORCHDAG_RESTART"] for t in job.tasks] == ["0", "0"]
    assert [dict(t.env)["TORCHDAG_RESTART"] for t in job.tasks_for(2)] == ["2", "2"]
    assert [t.argv for t in job.tasks_for(2)] == [t.argv for t in job.tasks]
    # {{retries}} exists only where a retryStrategy puts it; elsewhere Argo passes it on as
    # literal text (its validator resolves only inputs., workflow., ... tags).
    del doc["spec"]["templates"][0]["retryStrategy"]
    assert [dict(t.env)["TORCHDAG_RESTART"] for t in prepare_job(doc, Options()).tasks] == ["{{retries}}"] * 2
    # Retries this runner cannot reproduce are refused, not run differently.
    doc = with_restarts(LOCAL)
    doc["spec"]["templates"][1]["retryStrategy"] = {"limit": "1"}
    with pytest.raises(LocalRunError, match=r"template 'cpu-x2': retryStrategy on a single pod is not simulated"):
        prepare_job(doc, Options())


def test_dry_run_shows_the_restart_policy_and_what_a_restart_changes(tmp_path, capsys):
    rendered = write_doc(tmp_path / "workflow.yaml", with_restarts(LOCAL, limit=2, seconds=10))
    assert localrun_main([str(rendered), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(gang stop on; timeout 600 s; restarts up to 2)")
    assert ("[localrun] retryStrategy on train: restarts up to 2, retryPolicy Always, "
            "backoff 10 s x2 (waits 10, 20 s)") in out
    assert "[localrun] node-0: env TORCHDAG_RESTART=0" in out
    assert "[localrun] node-0: on restart 1: env TORCHDAG_RESTART=1" in out
    assert "[localrun] node-1: on restart 1: env TORCHDAG_RESTART=1" in out


FLAKY = """\
import os, sys, time
rank, restart = sys.argv[1], int(os.environ["TORCHDAG_RESTART"])
print(f"rank {rank} restart {restart}", flush=True)
if restart < FAIL_UNTIL:
    if rank == "1":
        sys.exit(3)
    time.sleep(60)  # the gang stop ends it
print(f"loss 0.{restart}5", flush=True)
"""


def flaky_job(tmp_path: Path, fail_until: int, limit: int) -> Path:
    """The rendered local example with its container swapped for a script that fails on
    node-1 while {{retries}} < fail_until (node-0 waits to be stopped), with restarts."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "flaky.py").write_text(FLAKY.replace("FAIL_UNTIL", str(fail_until)))
    doc = with_restarts(LOCAL, limit=limit, seconds=1)
    container = doc["spec"]["templates"][1]["container"]
    container["command"], container["args"] = ["python3", "/code/flaky.py"], ["{{inputs.parameters.node-rank}}"]
    return write_doc(tmp_path / "workflow.yaml", doc)


def test_a_failed_node_restarts_every_node_with_backoff_until_an_attempt_succeeds(tmp_path):
    run = Run(str(flaky_job(tmp_path, fail_until=2, limit=2)), "--map", f"/code={tmp_path / 'code'}",
              "--backoff-scale", "0.1", "--grace", "2", "--timeout", "60")
    assert run.finish(90) == 0, run.text[-3000:]
    lines = run.lines
    assert "[localrun] restart 1/2 in 0.1 s: node-1 failed (exit 3)" in lines
    assert "[localrun] restart 1/2: starting 2 task(s) again ({{retries}} = 1)" in lines
    assert "[localrun] restart 2/2 in 0.2 s: node-1 failed (exit 3)" in lines
    for restart in (0, 1, 2):
        assert f"[node-0] rank 0 restart {restart}" in lines and f"[node-1] rank 1 restart {restart}" in lines
    summary = lines[lines.index(next(line for line in lines if line.startswith("[localrun] summary of "))):]
    assert summary[0].endswith(", 3 attempts):")
    assert summary[1].startswith("[localrun] attempt 1 (restart 0, ")
    assert summary[1].endswith("): node-1 failed first (exit 3 after " + summary[1].split(" after ")[1])
    assert summary[1].endswith("; stopped by the runner: node-0")
    assert summary[2].split()[1:5] == ["node-0", "stopped", "killed", "by"]
    assert summary[3].split()[1:5] == ["node-1", "FAILED", "exit", "3"]
    assert summary[4].startswith("[localrun] attempt 2 (restart 1, ") and ": node-1 failed first (exit 3" in summary[4]
    assert summary[7].startswith("[localrun] attempt 3 (restart 2, ") and summary[7].endswith("): every task exited 0")
    assert summary[8].endswith("last loss: 0.25") and summary[9].endswith("last loss: 0.25")
    assert summary[-1] == "[localrun] result: every task exited 0 on attempt 3 (after 2 restarts)"


def test_when_restarts_run_out_the_run_fails_naming_the_node(tmp_path):
    run = Run(str(flaky_job(tmp_path, fail_until=9, limit=1)), "--map", f"/code={tmp_path / 'code'}",
              "--backoff-scale", "0", "--grace", "2", "--timeout", "60")
    assert run.finish(90) == 1, run.text[-3000:]
    assert "[localrun] restart 1/1 in 0 s: node-1 failed (exit 3)" in run.lines
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
    """Issue 11's acceptance, on the rendered retryStrategy: SIGKILL one training worker
    of node-1 after the first checkpoint; both nodes restart and resume from it."""
    checkpoints = tmp_path / "ckpt"
    values = values_with(
        tmp_path, args=["--type", "example", "--max-steps", "1000", "--log-every", "250",
                        "--checkpoint-dir", str(checkpoints), "--checkpoint-every", "100"],
        nodes=[{"name": "node-a", "address": "198.18.0.1", "devices": 1, "master": True},
               {"name": "node-b", "address": "198.18.0.2", "devices": 1}],
    )
    rendered = write_doc(tmp_path / "workflow.yaml", with_restarts(Path(values), limit=2, seconds=1))
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


@pytest.mark.parametrize("ending", ["interrupt", "timeout"])
def test_a_stop_during_the_backoff_starts_no_restart(tmp_path, ending):
    extra = ["--timeout", "3"] if ending == "timeout" else ["--timeout", "60"]
    run = Run(str(flaky_job(tmp_path, fail_until=9, limit=2)), "--map", f"/code={tmp_path / 'code'}",
              "--backoff-scale", "100", "--grace", "2", *extra)  # waits 100 s
    run.wait_for(lambda line: line.startswith("[localrun] restart 1/2 in 100 s: node-1 failed (exit 3)"), 30)
    if ending == "interrupt":
        run.proc.send_signal(signal.SIGTERM)
    rc = run.finish(20)
    assert rc == {"interrupt": 130, "timeout": 124}[ending], run.text[-3000:]
    said = {"interrupt": "no restart: the runner got SIGTERM", "timeout": "no restart: timed out after 3 s"}[ending]
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
    job = JobOutcome("wf-x", [attempt], RetryPolicy("train", 0, "Always"), elapsed=3,
                     no_restart="no restarts left (limit 0)")
    lines = outcome_lines(job)
    assert lines[0] == "summary of wf-x (3.0 s):" and lines[3] == "node-1 failed first (exit 1 after 2.0 s)"
    assert lines[-1] == "result: FAILED (exit 1); no restart: no restarts left (limit 0)"
    assert job.code == 1
