"""`python -m testbed.localrun` (make smoke): torchdag's pipeline (load -> validate -> plan,
as render.py runs it) -> prepare -> supervise -> report."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys

from testbed.runtime import Options, parse_map
from torchdag import pipeline
from torchdag.cli import FILES_HELP
from torchdag.errors import TorchdagError, report

from .errors import EXIT_INVALID, EXIT_OK, LocalRunError
from .prepare import Job, prepare_job
from .report import outcome_lines
from .restart import JobRunner


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog or "python -m testbed.localrun",
        description="Run the nodes of a torchdag values file's plan as local processes (see docs/smoke.md).",
    )
    parser.add_argument("values", nargs="*", metavar="FILE", help=FILES_HELP)
    parser.add_argument("-f", "--values", dest="more", action="append", default=[], metavar="FILE",
                        help="one more values file, merged over those before it (Helm's -f); repeat it for several")
    parser.add_argument("--map", dest="maps", action="append", default=[], type=parse_map, metavar="SRC=DST",
                        help="map an image path prefix that does not exist here to DST (repeatable; "
                             "/opt/torchdag=<this checkout> is always last)")
    parser.add_argument("--cpu", action="store_true",
                        help="run GPU/NPU nodes on CPU (TORCHDAG_DEVICE=cpu, gloo) instead of refusing them")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop everything after S seconds, restarts included (exit 124); "
                             "timeouts.workflowDeadline also applies")
    parser.add_argument("--no-gang-stop", dest="gang_stop", action="store_false",
                        help="when a task fails, leave the others running (as Argo does) until they end on their own")
    parser.add_argument("--grace", type=float, default=5.0, metavar="S",
                        help="seconds between SIGTERM and SIGKILL when stopping a task (default 5)")
    parser.add_argument("--backoff-scale", type=_non_negative, default=1.0, metavar="F",
                        help="multiply the restarts' backoff waits by F (default 1; 0: restart at once)")
    parser.add_argument("--port", type=int, default=None, help="use this rendezvous port instead of the rendered one")
    parser.add_argument("--only", action="append", default=[], metavar="TASK",
                        help="run only this node's task, e.g. node-1 (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print what would run, with every mapping, and exit")
    return parser


def _dry_run(job: Job, out) -> None:
    for task in job.tasks:
        out.write(f"[localrun] {task.name}: cwd {task.cwd}\n")
        for key, value in task.env:
            out.write(f"[localrun] {task.name}: env {key}={shlex.quote(value)}\n")
        out.write(f"[localrun] {task.name}: exec {shlex.join(task.prefix + task.argv)}\n")
    if job.retry is not None:
        # What a restart changes, so its path into the processes can be checked.
        for first, again in zip(job.tasks, job.tasks_for(1)):
            env = dict(first.env)
            changed = [f"env {k}={shlex.quote(v)}" for k, v in again.env if env.get(k) != v]
            if first.argv != again.argv:
                changed.append(f"exec {shlex.join(again.prefix + again.argv)}")
            out.write(f"[localrun] {first.name}: on restart 1: {'; '.join(changed) or 'nothing changes'}\n")


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    files = list(args.values) + list(args.more)
    if not files:
        parser.error("the following arguments are required: values (FILE, - for standard input, or -f FILE)")
    if files.count("-") > 1:
        parser.error("standard input (-) can be read once only")
    options = Options(maps=args.maps, cpu=args.cpu, port=args.port)
    try:
        rendered = pipeline.run(files)
        job = prepare_job(rendered.plan, options, only=args.only)
    except TorchdagError as err:
        return report(err)
    except OSError as err:  # the pipeline reading a file of its own
        return report(LocalRunError(str(err), EXIT_INVALID))
    for line in rendered.warnings():
        print(f"warning: {line}", file=sys.stderr)

    out = sys.stdout
    limits = [t for t in (args.timeout, job.deadline) if t]
    timeout = min(limits) if limits else None
    said = "gang stop on" if args.gang_stop else "no gang stop"
    said += f"; timeout {f'{timeout:g} s' if timeout else 'none'}"
    if job.retry is not None:
        said += f"; restarts up to {job.retry.limit}{' per node' if job.node_recovery else ''}"
    out.write(f"[localrun] {job.workflow}: {len(job.tasks)} node(s) of {rendered.source}'s plan, run here ({said})\n")
    for note in job.ignored:
        out.write(f"[localrun] {note}\n")
    for line in job.policy_lines(args.backoff_scale):
        out.write(f"[localrun] {line}\n")
    for task in job.tasks:
        for note in task.notes:
            out.write(f"[localrun] {task.name}: {note}\n")
    if args.dry_run:
        _dry_run(job, out)
        return EXIT_OK
    out.flush()

    runner = JobRunner(job, out=out, gang_stop=args.gang_stop, timeout=timeout, grace=args.grace,
                       backoff_scale=args.backoff_scale)

    def on_signal(signum, _frame):
        runner.request_stop(f"the runner got {signal.Signals(signum).name}", interrupted=True)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    outcome = runner.run()
    for line in outcome_lines(outcome):
        out.write(f"[localrun] {line}\n")
    out.flush()
    return outcome.code
