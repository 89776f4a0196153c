"""Writing the output: atomically, and only what may be written.

The output file appears whole or not at all (a temporary file in the same folder, then a
rename). What `-o` names is judged before anything is read: never the values file itself,
never a folder; an existing regular file keeps its mode (and owner, where allowed) and a
symbolic link keeps pointing where it did; a character device (/dev/null, a terminal) or
a FIFO with a reader is written through, as a shell redirect would; anything else that is
not a regular file is refused. Every failure is an OSError; the command line reports it
as errors.CannotWrite.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
import sys
from pathlib import Path


def refused(reason: str) -> OSError:
    """An output target torchdag refuses, as an OSError whose strerror is the reason (the
    command line reports every OSError of writing the same way: errors.CannotWrite)."""
    return OSError(errno.EINVAL, reason)


def check_output(output: str, values_path: str | Path) -> None:
    """Refuse, before anything is read, an -o that can only end badly: an empty name, a
    name that ends in a folder (`out/`, `out/.`), or the values file itself (by device and
    inode, so a symbolic or hard link to it, or another spelling of its path, is caught)."""
    if not output:
        raise refused("an empty file name")
    if os.path.basename(output) in ("", ".", ".."):
        raise refused("names a folder, not a file; give a file name")
    try:
        same = os.path.samestat(os.stat(output), os.stat(values_path))
    except OSError:
        return  # no such output yet, or no such input: the write or the load says what is wrong
    if same:
        raise refused(f"it is the values file {values_path} itself; give another file name")


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
        kind = ("a block device" if stat.S_ISBLK(status.st_mode)
                else "a socket" if stat.S_ISSOCK(status.st_mode) else "not a regular file")
        raise refused(f"is {kind}; torchdag writes only regular files, character devices and FIFOs")


def _write_through(target: str, text: str, flags: int) -> None:
    """Open and write, no temporary file and no rename (a shell's `>`). A FIFO is opened
    non-blocking first, so one nobody reads fails at once (ENXIO) instead of hanging."""
    try:
        fd = os.open(target, flags | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ENXIO and flags & os.O_NONBLOCK:
            raise refused("is a FIFO that nothing reads; start its reader first") from None
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


def emit(text: str) -> None:
    """Print on stdout as UTF-8, or raise OSError (after pointing stdout at /dev/null) when
    stdout cannot take it: a full disk (/dev/full), a closed pipe (`| head -c1` on a large
    job), none at all."""
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
    except OSError:  # BrokenPipeError (EPIPE) is one
        _silence_stdout()
        raise


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
