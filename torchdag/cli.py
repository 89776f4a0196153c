"""render.py's command line (and `torchdag render` / `torchdag check`): the options, then
the pipeline (torchdag/pipeline.py), then the output (torchdag/output.py), every error
through the one handler (torchdag/errors.py)."""

from __future__ import annotations

import argparse
import sys

from . import pipeline
from .errors import CannotWrite, run_command
from .output import check_output, emit, write_output
from .summary import summary_lines


def build_parser(prog: str = "render.py") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Render a torchdag values file (cluster.yaml) into an Argo Workflow.",
        epilog="Exit status: 0 ok, 2 invalid values or usage, 1 the output could not be written, "
               "70 a bug in torchdag.",
    )
    parser.add_argument("values", help="the values file, e.g. examples/cluster.yaml")
    parser.add_argument("-o", "--output", help="write the Workflow to this file (atomically) instead of stdout")
    parser.add_argument("--check", action="store_true", help="validate only; print nothing on success")
    parser.add_argument("--summary", action="store_true",
                        help="print the per-node table (ranks, addresses, NICs, templates) on stdout instead of the "
                             "Workflow; with -o, write the Workflow and print the table")
    parser.add_argument("--short", action="store_true",
                        help="with --summary: only the first and last rows of a large job")
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print warnings")
    return parser


def main(argv: list[str] | None = None, prog: str = "render.py") -> int:
    """render.py, and `torchdag render`/`check` (which pass their own `prog` for messages)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.short and not args.summary:
        parser.error("--short goes with --summary")
    return run_command(lambda: _render(args, prog), prog)


def _render(args: argparse.Namespace, prog: str) -> int:
    writes = args.output is not None and not args.check
    if writes:
        _writing(prog, args.output, check_output, args.output, args.values)
    rendered = pipeline.run(args.values)
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
