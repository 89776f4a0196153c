"""Run a torchdag values file's Plan on this machine: every node as a local process group.

    python -m testbed.localrun VALUES... [-f VALUES]... [--map SRC=DST]... [--cpu] [--timeout S]
                                [--grace S] [--no-gang-stop] [--backoff-scale F] [--port N]
                                [--only TASK]... [--dry-run]

The values files are taken as render.py takes them (several merge as Helm's -f files) and go
through the same pipeline (load -> validate -> plan). What runs is the Plan: each node's
command, args and env as its pod would run them (torchdag.plan.node_container), after
Kubernetes' `$(VAR)` expansion, with these local mappings (all printed; testbed.runtime):

- node addresses -> 127.0.0.1 (launcher --master_addr, preflight --master-addr,
  MASTER_ADDR, HCCL_IF_IP); NICs -> lo (GLOO/NCCL/HCCL/TP_SOCKET_IFNAME, --nic=NAME);
- image paths that do not exist here -> the checkout, by path prefix: `--map SRC=DST`
  (repeatable, first match wins), then the built-in `/opt/torchdag=<this checkout>`;
- `torchrun` / `python3` -> this Python's (its bin directory first on PATH).

Restarts as Argo makes them (TORCHDAG_RESTART = the restart number, backoff waited):
failurePolicy.recovery job restarts every node after a failure; recovery node restarts the
failed node alone while the others keep running, and leaves an elastic member
(elastic.minNodes) behind once it is out of restarts. Ignored locally: node affinity (every
"node" runs here), image, resources, volumes, gang scheduling. See docs/smoke.md. Exit status:
0 every node exited 0 (or was left behind); 1 a node failed for good; 2 invalid values or
usage; 3 refused (cannot run it faithfully here); 124 --timeout or timeouts.workflowDeadline
passed; 130 interrupted.

Phases, one module each: prepare (prepare.py: the Plan's nodes as local tasks, the restart
policy), supervise (supervise.py for one attempt, restart.py for restarts), report
(report.py), command line (cli.py, __main__.py).
"""

from .cli import build_parser, main
from .errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED, EXIT_TIMEOUT, LocalRunError
from .prepare import Job, LocalTask, RetryPolicy, prepare_job
from .report import loss_value, outcome_lines
from .restart import JobOutcome, JobRunner
from .supervise import Outcome, Supervisor, TaskResult

__all__ = [
    "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_INVALID", "EXIT_OK", "EXIT_REFUSED", "EXIT_TIMEOUT", "Job", "JobOutcome",
    "JobRunner", "LocalRunError", "LocalTask", "Outcome", "RetryPolicy", "Supervisor", "TaskResult", "build_parser",
    "loss_value", "main", "outcome_lines", "prepare_job",
]
