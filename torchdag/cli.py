"""render.py's command line: load -> validate -> plan -> render -> write.

Nothing is written until every earlier phase has passed, and the output file appears
whole or not at all (temporary file in the same folder, then rename). What `-o` names is
judged before anything is read: never the values file itself, never a folder; an existing
regular file keeps its mode (and owner, where allowed) and a symbolic link keeps pointing
where it did; a character device (/dev/null, a terminal) or a FIFO with a reader is written
through, as a shell redirect would; anything else that is not a regular file is refused.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import os
import secrets
import stat
import sys
from pathlib import Path

from .plan import make_plan
from .problems import ValuesError
from .render import render
from .summary import summary_lines
from .validate import validate
from .values import coalesce, fill_absent, load_values, number_problems, schema_defaults

EXIT_INVALID = 2
EXIT_WRITE_FAILED = 1


def load_valid(values_path: str | Path) -> tuple[dict, str]:
    """Load and validate: (merged values, the file's name for messages), or ValuesError."""
    user_values, source = load_values(values_path)
    values = coalesce(user_values, schema_defaults())
    problems = validate(values)
    # An integer beyond 2^53 is worth a line only where nothing else is wrong with it
    # (`port: 99999999999999999999` is better told its range).
    named = {problem.path for problem in problems}
    problems += [problem for problem in number_problems(user_values)[1] if problem.path not in named]
    if problems:
        raise ValuesError(source, problems)
    return fill_absent(values), source


def build(values_path: str | Path) -> str:
    """The whole pipeline short of writing; raises ValuesError on bad input."""
    values, source = load_valid(values_path)
    return render(make_plan(values), source)


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


class CannotWrite(OSError):
    """An output target torchdag refuses, with the reason as its strerror."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.strerror = reason


def check_output(output: str, values_path: str | Path) -> None:
    """Refuse, before anything is read, an -o that can only end badly: an empty name, a
    name that ends in a folder (`out/`, `out/.`), or the values file itself (by device and
    inode, so a symbolic or hard link to it, or another spelling of its path, is caught)."""
    if not output:
        raise CannotWrite("an empty file name")
    if os.path.basename(output) in ("", ".", ".."):
        raise CannotWrite("names a folder, not a file; give a file name")
    try:
        same = os.path.samestat(os.stat(output), os.stat(values_path))
    except OSError:
        return  # no such output yet, or no such input: the write or the load says what is wrong
    if same:
        raise CannotWrite(f"it is the values file {values_path} itself; give another file name")


def write_output(output: str | Path, text: str) -> None:
    """Write text to the file `output` names, as described in the module docstring."""
    target = os.path.realpath(output)  # through symbolic links: replace the file, keep the link
    try:
        status = os.stat(target)
    except FileNotFoundError:
        status = None
    if status is None or stat.S_ISREG(status.st_mode):
        write_atomically(Path(target), text, status)
    elif stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory; give a file name", str(output))
    elif stat.S_ISCHR(status.st_mode):
        _write_through(target, text, os.O_WRONLY | os.O_TRUNC)
    elif stat.S_ISFIFO(status.st_mode):
        _write_through(target, text, os.O_WRONLY | os.O_NONBLOCK)
    else:
        kind = "a block device" if stat.S_ISBLK(status.st_mode) else "a socket" if stat.S_ISSOCK(status.st_mode) else "not a regular file"
        raise CannotWrite(f"is {kind}; torchdag writes only regular files, character devices and FIFOs")


def _write_through(target: str, text: str, flags: int) -> None:
    """Open and write, no temporary file and no rename (a shell's `>`). A FIFO is opened
    non-blocking first, so one nobody reads fails at once (ENXIO) instead of hanging."""
    try:
        fd = os.open(target, flags | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ENXIO and flags & os.O_NONBLOCK:
            raise CannotWrite("is a FIFO that nothing reads; start its reader first") from None
        raise
    try:
        if flags & os.O_NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        write_all(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is out, so a short write is retried and its error raised.
    (Python's buffered stdout can report a whole write done when a pipe's reader left
    after the first 64 KiB, dropping the rest and exiting 0.)"""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_atomically(path: Path, text: str, existing: os.stat_result | None = None) -> None:
    """The file appears whole or not at all: a temporary file in the same folder, synced,
    then renamed over `path`. An existing file's mode and owner carry over; a new file gets
    0666 less the umask, as a shell redirect would give it."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory; give a file name", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)  # the umask applies
    try:
        try:
            write_all(fd, text.encode("utf-8"))
            if existing is not None:
                _copy_owner_and_mode(fd, existing)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _copy_owner_and_mode(fd: int, existing: os.stat_result) -> None:
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (existing.st_uid, existing.st_gid):
        for uid in (existing.st_uid, -1):  # the owner only root may give away; the group, a member
            try:
                os.fchown(fd, uid, existing.st_gid)
                break
            except PermissionError:
                continue
    os.fchmod(fd, stat.S_IMODE(existing.st_mode))  # after chown, which clears set-id bits


def emit(text: str, prog: str) -> bool:
    """Print on stdout as UTF-8; False (after one line on stderr) when stdout cannot take
    it: a full disk (/dev/full), a closed pipe (`| head -c1` on a large job), none at all."""
    try:
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # not a real file (a test captures it)
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            sys.stdout.flush()  # whatever was printed before goes first
            write_all(fd, text.encode("utf-8"))
    except OSError as err:  # BrokenPipeError (EPIPE) is one
        _silence_stdout()
        print(f"{prog}: cannot write stdout: {err.strerror or err}", file=sys.stderr)
        return False
    return True


def _silence_stdout() -> None:
    """Point stdout's descriptor at /dev/null: what is left in its buffer then goes nowhere
    at exit, instead of failing again ("Exception ignored ... BrokenPipeError")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # none, or not a real file: nothing is flushed to it at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def build_parser(prog: str = "render.py") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Render a torchdag values file (cluster.yaml) into an Argo Workflow.",
        epilog="Exit status: 0 ok, 2 invalid values or usage, 1 the output could not be written.",
    )
    parser.add_argument("values", help="the values file, e.g. examples/cluster.yaml")
    parser.add_argument("-o", "--output", help="write the Workflow to this file (atomically) instead of stdout")
    parser.add_argument("--check", action="store_true", help="validate only; print nothing on success")
    parser.add_argument("--summary", action="store_true",
                        help="print the per-node table (ranks, addresses, NICs, templates) on stdout instead of the "
                             "Workflow; with -o, write the Workflow and print the table")
    parser.add_argument("--short", action="store_true", help="with --summary: only the first and last rows of a large job")
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print warnings")
    return parser


def main(argv: list[str] | None = None, prog: str = "render.py") -> int:
    """render.py, and `torchdag render`/`check` (which pass their own `prog` for messages)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.short and not args.summary:
        parser.error("--short goes with --summary")
    writes = args.output is not None and not args.check
    if writes:
        try:
            check_output(args.output, args.values)
        except OSError as err:
            return _cannot_write(prog, args.output, err)
    try:
        values, source = load_valid(args.values)
        plan = make_plan(values)
        text = render(plan, source)
        warnings = [] if args.quiet else warnings_for(values, source)
    except ValuesError as err:
        for line in err.lines():
            print(line, file=sys.stderr)
        return EXIT_INVALID
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    # stdout: the table with --summary, else the Workflow unless -o or --check took it
    shown = "".join(f"{line}\n" for line in summary_lines(plan, short=args.short)) if args.summary else ""
    if writes:
        try:
            write_output(args.output, text)
        except OSError as err:
            return _cannot_write(prog, args.output, err)
    elif not args.check:
        shown = shown or text
    return 0 if not shown or emit(shown, prog) else EXIT_WRITE_FAILED


def _cannot_write(prog: str, output: str, err: OSError) -> int:
    print(f"{prog}: cannot write {output or repr(output)}: {err.strerror or err}", file=sys.stderr)
    return EXIT_WRITE_FAILED
