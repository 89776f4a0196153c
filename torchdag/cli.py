"""render.py's command line: load -> validate -> plan -> render -> write.

Nothing is written until every earlier phase has passed, and the output file appears
whole or not at all (temporary file in the same folder, then rename).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from .plan import make_plan
from .problems import ValuesError
from .render import render
from .validate import validate
from .values import coalesce, fill_absent, load_values, schema_defaults

EXIT_INVALID = 2
EXIT_WRITE_FAILED = 1


def load_valid(values_path: str | Path) -> tuple[dict, str]:
    """Load and validate: (merged values, the file's name for messages), or ValuesError."""
    user_values, source = load_values(values_path)
    values = coalesce(user_values, schema_defaults())
    problems = validate(values)
    if problems:
        raise ValuesError(source, problems)
    return fill_absent(values), source


def build(values_path: str | Path) -> str:
    """The whole pipeline short of writing; raises ValuesError on bad input."""
    values, _ = load_valid(values_path)
    return render(make_plan(values))


def warnings_for(values: dict, source: str) -> list[str]:
    """Advice that does not stop rendering (printed on stderr), for valid values."""
    nodes = values["nodes"]
    if len(nodes) == 1:
        return []
    return [
        f"{source}: nodes[{index}].nic: not set; gloo then binds whatever the hostname resolves to "
        "(often loopback: 'connectFullMesh failed'); name the NIC or use nic: auto"
        for index, node in enumerate(nodes)
        if not node.get("nic")
    ]


def write_atomically(path: Path, text: str) -> None:
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory; give a file name", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="render.py",
        description="Render a torchdag values file (cluster.yaml) into an Argo Workflow.",
    )
    parser.add_argument("values", help="the values file, e.g. examples/cluster.yaml")
    parser.add_argument("-o", "--output", help="write the Workflow to this file (atomically) instead of stdout")
    parser.add_argument("--check", action="store_true", help="validate only; print nothing on success")
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print warnings")
    args = parser.parse_args(argv)

    try:
        values, source = load_valid(args.values)
        text = render(make_plan(values))
        warnings = [] if args.quiet else warnings_for(values, source)
    except ValuesError as err:
        for line in err.lines():
            print(line, file=sys.stderr)
        return EXIT_INVALID
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    if args.check:
        return 0
    if args.output:
        try:
            write_atomically(Path(args.output), text)
        except OSError as err:
            print(f"render.py: cannot write {args.output}: {err.strerror or err}", file=sys.stderr)
            return EXIT_WRITE_FAILED
    else:
        sys.stdout.write(text)
    return 0
