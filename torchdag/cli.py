"""The command line, one module for both doors: render.py (`main`) and the `torchdag` command
(`torchdag_main`, pyproject's console script and `python -m torchdag`), whose subcommands are
the entries of SUBCOMMANDS. Every command's options are parsed here (render and check's by
build_parser, status, logs and diagnose's by cluster_parser); render and check then run the
pipeline (torchdag/pipeline.py) and the output (torchdag/output.py), status, logs and
diagnose torchdag/diagnose/commands.py, every error through the one handler
(torchdag/errors.py).

A new subcommand is one Subcommand entry: its name, its usage after the name, its lines for
`torchdag --help`, and its `main(argv, prog) -> status`, which runs its body through
`run_command(body, prog)`.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import Callable

from . import __version__, pipeline
from .errors import CannotWrite, run_command
from .kubeconfig import CLUSTER_INSTALL
from .output import check_output, emit, write_output
from .summary import summary_lines

PROG = "torchdag"

FILES_HELP = ("the values file, e.g. examples/cluster.yaml; - reads standard input; several are merged in order "
              "as Helm merges its -f files (mappings key by key, lists and other values replaced)")


def build_parser(prog: str = "render.py", check: bool = False) -> argparse.ArgumentParser:
    """render.py's options; `check`: those of `torchdag check`, which validates only (no output
    options: `-o` there is refused with a line saying so)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Validate a torchdag values file (cluster.yaml) and print nothing on success." if check else
        "Render a torchdag values file (cluster.yaml) into an Argo Workflow.",
        epilog="Exit status: 0 ok, 2 invalid values or usage" + ("" if check else ", 1 the output could not be "
                                                                 "written") + ", 70 a bug in torchdag.",
    )
    parser.add_argument("values", nargs="*", metavar="FILE", help=FILES_HELP)
    parser.add_argument("-f", "--values", dest="more", action="append", default=[], metavar="FILE",
                        help="one more values file, merged over those before it (Helm's -f); repeat it for several")
    if check:
        parser.add_argument("-o", "--output", help=argparse.SUPPRESS)
    else:
        parser.add_argument("-o", "--output", help="write the Workflow to this file (atomically) instead of stdout")
        parser.add_argument("--check", action="store_true", help="validate only; print nothing on success")
        parser.add_argument("--summary", action="store_true",
                            help="print the per-node table (ranks, addresses, NICs, templates) on stdout instead of "
                                 "the Workflow; with -o, write the Workflow and print the table")
        parser.add_argument("--short", action="store_true",
                            help="with --summary: only the first and last rows of a large job")
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print warnings")
    return parser


def parse(argv: list[str] | None, prog: str, check: bool = False) -> argparse.Namespace:
    """The options, or argparse's usage error (exit 2) for what cannot go together."""
    parser = build_parser(prog, check)
    args = parser.parse_args(argv)
    args.files = list(args.values) + list(args.more)
    if not args.files:
        parser.error("the following arguments are required: values (FILE, - for standard input, or -f FILE)")
    if args.files.count("-") > 1:
        parser.error("standard input (-) can be read once only")
    if check:
        args.check, args.summary, args.short = True, False, False
        if args.output is not None:
            parser.error("check writes nothing, so -o has no file to write: use render FILE -o OUT to write the "
                         "Workflow (it validates first)")
    elif args.check and args.output is not None:
        parser.error("--check writes nothing, so -o would write no file: drop --check to write the Workflow to "
                     f"{args.output} (it validates first), or drop -o")
    if args.short and not args.summary:
        parser.error("--short goes with --summary")
    return args


def main(argv: list[str] | None = None, prog: str = "render.py") -> int:
    """render.py, and `torchdag render` (whose `prog` names it in messages)."""
    args = parse(argv, prog)
    return run_command(lambda: _render(args, prog), prog)


def check_main(argv: list[str] | None = None, prog: str = "torchdag check") -> int:
    """`torchdag check`: validate only."""
    args = parse(argv, prog, check=True)
    return run_command(lambda: _render(args, prog), prog)


def _render(args: argparse.Namespace, prog: str) -> int:
    writes = args.output is not None and not args.check
    for path in args.files if writes else []:
        _writing(prog, args.output, check_output, args.output, path)
    rendered = pipeline.run(args.files)
    for line in [] if args.quiet else rendered.warnings():
        print(f"warning: {line}", file=sys.stderr)
    # stdout: the table with --summary, else the Workflow unless -o or --check took it
    shown = "".join(f"{line}\n" for line in summary_lines(rendered.plan, short=args.short)) if args.summary else ""
    if writes:
        _writing(prog, args.output, write_output, args.output, rendered.text)
    elif not args.check:
        shown = shown or rendered.text
    if shown:
        _writing(prog, "stdout", emit, shown)
    return 0


def _writing(prog: str, target: str, write, *args) -> None:
    """Call one step of writing; its OSError becomes the one line CannotWrite prints."""
    try:
        write(*args)
    except OSError as err:
        raise CannotWrite(prog, target, err.strerror or str(err)) from None


# --- the `torchdag` command ----------------------------------------------------------------

# status, logs and diagnose: the options each adds to NAME, -n, --kubeconfig and --context.
CLUSTER_COMMANDS: dict[str, tuple[str, tuple[tuple[tuple[str, ...], dict], ...]]] = {
    "status": ("Every rank of a torchdag job: host, address, pod, phase, attempt, restarts, progress and how long "
               "since it last logged (a hang's hint).",
               ((("-w", "--watch"), {"action": "store_true", "help": "redraw every 2 s until the Workflow ends"}),)),
    "logs": ("Every rank's log through the API, merged in time order with a [rank host] prefix.",
             ((("--rank",), {"type": int, "default": None, "help": "only this node rank's log"}),
              (("--attempt",), {"default": None, "help": "this attempt's pods (default: each rank's latest)"}),
              (("-f", "--follow"), {"action": "store_true", "help": "keep printing new lines as they come"}),
              (("--timestamps",), {"action": "store_true", "help": "show each line's time"}))),
    "diagnose": ("What went wrong in a torchdag job: the first failure in time (rank, host, attempt, exit code), its "
                 "cause and its fix. Exit status: 0 healthy, 1 failed and diagnosed, 2 cannot tell.",
                 ((("--json",), {"action": "store_true", "help": "one JSON object on stdout, for scripts"}),)),
}


# A Workflow's name (a DNS-1123 subdomain) or a job's (values' `name`, a DNS-1123 label, which it also is).
WORKFLOW_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LATEST = "@latest"


def workflow_name(text: str) -> str:
    """NAME, refused before any request when it cannot name a Workflow or a job."""
    if text == LATEST:
        return text
    if not text:
        raise argparse.ArgumentTypeError("is empty: give a Workflow's name, a job's name or @latest")
    if len(text) > 253 or not WORKFLOW_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Workflow's or a job's name: lowercase letters, digits, '-' and '.', starting and "
            "ending with a letter or digit, at most 253 characters (kubectl get workflows); or @latest")
    return text


def cluster_parser(name: str, prog: str) -> argparse.ArgumentParser:
    description, options = CLUSTER_COMMANDS[name]
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("name", metavar="NAME", type=workflow_name,
                   help="a Workflow's name; a job's name (values' name:, the torchdag.io/job label), which means "
                        "its newest Workflow; or @latest, the namespace's newest torchdag Workflow")
    p.add_argument("-n", "--namespace", default=None,
                   help="its namespace (default: the kubeconfig context's, or the pod's, else default)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: the files $KUBECONFIG lists, "
                   "merged as kubectl merges them; ~/.kube/config; else the in-cluster ServiceAccount)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: its current one)")
    p.add_argument("--argo-server", default=None, metavar="HOST:PORT",
                   help="Argo's server, to read a Workflow's node status Argo offloaded to its database "
                        "(default: $ARGO_SERVER; https unless ARGO_SECURE=false; token: $ARGO_TOKEN, else the "
                        "kubeconfig's)")
    for flags, settings in options:
        p.add_argument(*flags, **settings)
    return p


def _cluster_command(name: str) -> Callable[[list[str], str], int]:
    """status, logs, diagnose (torchdag/diagnose/commands.py): their Kubernetes client is an
    optional extra, imported only when one of them runs."""
    def run(argv: list[str], prog: str) -> int:
        args = cluster_parser(name, prog).parse_args(argv)
        from .diagnose import commands

        return getattr(commands, name)(args, prog)
    return run


@dataclass(frozen=True)
class Subcommand:
    """One `torchdag NAME ...`: `usage` follows the name in the usage lines, `summary` is its
    paragraph of `torchdag --help`, `main(argv, prog)` runs it (prog: "torchdag NAME")."""

    name: str
    usage: str
    summary: str
    main: Callable[[list[str], str], int]


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("render", "FILE [-f FILE]... [-o OUT] [--check] [--summary [--short]] [-q]",
               "validate FILE and print the Workflow, or write it atomically with -o OUT; --check validates "
               "only, --summary prints the per-node table instead (with -o: writes the Workflow and prints the "
               "table), --short keeps its first and last rows, -q silences warnings (the same as render.py)",
               main),
    Subcommand("check", "FILE [-f FILE]... [-q]",
               "validate only: nothing on stdout, one line per problem on stderr, exit 2", check_main),
    Subcommand("status", "NAME [-n NAMESPACE] [--kubeconfig FILE] [--watch]",
               "every rank of a running job: host, address, pod phase, attempt, restarts, progress and how long "
               "since it last logged", _cluster_command("status")),
    Subcommand("logs", "NAME [-n NAMESPACE] [--kubeconfig FILE] [--rank R] [--attempt K] [-f]",
               "every rank's log merged in time order, each line prefixed [rank host]; --rank shows one",
               _cluster_command("logs")),
    Subcommand("diagnose", "NAME [-n NAMESPACE] [--kubeconfig FILE] [--json]",
               "the first failure in time, its rank, host, cause and fix (docs/failures.md); exit 0 healthy, "
               "1 diagnosed, 2 cannot tell. status, logs and diagnose read the cluster as kubectl does and need "
               f"the Kubernetes client: `{CLUSTER_INSTALL}` in a checkout of torchdag", _cluster_command("diagnose")),
)


def _wrap(text: str, width: int = 78, indent: int = 16) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width - indent:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return ("\n" + " " * indent).join(lines + [line])


def usage() -> str:
    rows = [f"{PROG} {command.name} {command.usage}" for command in SUBCOMMANDS] + [f"{PROG} --version"]
    return "usage: " + "\n       ".join(rows) + "\n"


def help_text() -> str:
    commands = "".join(f"  {c.name + ' ' + c.usage.split()[0]:<13} {_wrap(c.summary)}\n" for c in SUBCOMMANDS)
    return usage() + f"""
Render a torchdag values file (cluster.yaml) into an Argo Workflow, or validate it; read a
running job's ranks, logs and first failure.

commands:
{commands}
  FILE is a values file; - reads standard input; -f FILE (repeatable) adds files merged
  over the ones before them, as helm merges its -f files (mappings key by key, lists and
  other values replaced).

options:
  -h, --help     show this help; `{PROG} COMMAND --help` shows a command's options
  -V, --version  print the version and exit

Exit status: 0 ok, 2 invalid values or usage, 1 the output could not be written,
70 a bug in torchdag.
"""


def torchdag_main(argv: list[str] | None = None) -> int:
    """The `torchdag` command: the subcommand named first gets the rest of argv, untouched."""
    argv = list(sys.argv[1:] if argv is None else argv)
    names = ", ".join(command.name for command in SUBCOMMANDS)
    if not argv:
        sys.stderr.write(usage() + f"{PROG}: error: a command is required ({names})\n")
        return 2
    first, rest = argv[0], argv[1:]
    if first in ("-h", "--help", "help"):
        sys.stdout.write(help_text())
        return 0
    if first in ("-V", "--version"):
        print(f"{PROG} {__version__}")
        return 0
    command = next((c for c in SUBCOMMANDS if c.name == first), None)
    if command is None:
        sys.stderr.write(usage() + f"{PROG}: error: unknown command {first!r} (choose from {names})\n")
        return 2
    return command.main(rest, f"{PROG} {command.name}")
