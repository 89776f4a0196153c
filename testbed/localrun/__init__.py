"""Run a rendered Workflow's DAG on this machine: every task as a local process group.

    python -m testbed.localrun VALUES [--map SRC=DST]... [--cpu] [--timeout S] [--grace S]
                                [--no-gang-stop] [--backoff-scale F] [--port N] [--only TASK]...
                                [--dry-run]

VALUES is a torchdag values file (rendered here with render.py's pipeline) or a file
render.py already wrote; of its YAML documents the one argoproj.io Workflow (or
WorkflowTemplate) runs, every other object is named as ignored. What runs is the
rendered YAML: each DAG task's container command + args with its env, after Argo's
`{{...}}` substitution and Kubernetes' `$(VAR)` expansion, with these local mappings
(all printed):

- node addresses -> 127.0.0.1 (launcher --master_addr, preflight --master-addr,
  MASTER_ADDR, HCCL_IF_IP); NICs -> lo (GLOO/NCCL/HCCL/TP_SOCKET_IFNAME, --nic=NAME);
- image paths that do not exist here -> the checkout, by path prefix: `--map SRC=DST`
  (repeatable, first match wins), then the built-in `/opt/torchdag=<this checkout>`;
- `torchrun` / `python3` -> this Python's (its bin directory first on PATH).

A retryStrategy on the entrypoint DAG restarts every node after a failure, as Argo
would (`{{retries}}` = the restart number, backoff waited). Ignored locally: node
affinity (every "node" runs here), image, resources, volumes, gang scheduling.
See docs/smoke.md. Exit status: 0 every task exited 0; 1 a task failed (on the last
attempt); 2 invalid values or usage; 3 refused (cannot run it faithfully here); 124
--timeout or the Workflow's activeDeadlineSeconds passed; 130 interrupted.

Phases, one module each: load (load.py), prepare (prepare.py, with expand.py for the
substitutions, mapping.py for the local mappings, retry.py for the retryStrategy),
supervise (supervise.py and procs.py for one attempt, restart.py for restarts), report
(report.py), command line (cli.py, __main__.py).
"""

from .cli import build_parser, main
from .errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED, EXIT_TIMEOUT, LocalRunError
from .expand import UnresolvedTag, argo_substitute, kube_command, kube_container_env, kube_expand
from .load import LoadedWorkflow, load, load_workflow
from .mapping import CHECKOUT, DEFAULT_MAPS, local_devices
from .prepare import Job, LocalTask, Options, prepare, prepare_job
from .procs import MARKER_ENV, ProcessTree, process_table
from .report import loss_value, outcome_lines
from .restart import JobOutcome, JobRunner
from .retry import RetryPolicy, parse_duration
from .supervise import Outcome, Supervisor, TaskResult

__all__ = [
    "CHECKOUT", "DEFAULT_MAPS", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_INVALID", "EXIT_OK", "EXIT_REFUSED",
    "EXIT_TIMEOUT", "Job", "JobOutcome", "JobRunner", "LocalRunError", "LocalTask", "LoadedWorkflow", "MARKER_ENV",
    "Options", "Outcome", "ProcessTree", "RetryPolicy", "Supervisor", "TaskResult", "UnresolvedTag",
    "argo_substitute", "build_parser", "kube_command", "kube_container_env", "kube_expand", "load",
    "load_workflow", "local_devices", "loss_value", "main", "parse_duration", "prepare", "prepare_job",
    "process_table", "outcome_lines",
]
