"""Where render.py writes: `-o` never lands on the values file or replaces a device or a
FIFO, keeps a file's mode and owner; a stdout that cannot take the output is one line and
exit 1; the command's name and --summary."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli_helpers import BASE, EXAMPLE, REPO, one_line, render_py, write
from helpers import CLUSTER_SUMMARY
from torchdag import cli, pipeline

# --- where -o writes --------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["same", "dot", "symlink", "hardlink"])
def test_output_onto_the_values_file_is_refused(spelling, tmp_path, capsys):
    values = write(tmp_path, BASE)
    target = {"same": lambda: str(values), "dot": lambda: f"{tmp_path}/./{values.name}",
              "symlink": lambda: (tmp_path / "l.yaml").symlink_to(values) or str(tmp_path / "l.yaml"),
              "hardlink": lambda: os.link(values, tmp_path / "h.yaml") or str(tmp_path / "h.yaml")}[spelling]()
    assert cli.main([str(values), "-o", target]) == 1
    assert one_line(capsys.readouterr().err) == (
        f"render.py: cannot write {target}: it is the values file {values} itself; give another file name")
    assert values.read_text(encoding="utf-8") == BASE


@pytest.fixture
def null_device(tmp_path):
    """A character device to write to: a private /dev/null (mknod, as root), else the real one."""
    if os.geteuid() == 0:
        node = tmp_path / "null"
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        return node
    return Path(os.devnull)


def test_output_onto_a_character_device_writes_through_it(null_device, tmp_path, capsys):
    values = write(tmp_path, BASE)
    assert cli.main([str(values), "-o", str(null_device), "-q"]) == 0
    assert capsys.readouterr() == ("", "")
    assert stat.S_ISCHR(null_device.stat().st_mode), "the device was replaced by a regular file"
    assert not list(null_device.parent.glob(f".{null_device.name}.*"))


def test_output_onto_a_fifo(tmp_path, capsys):
    """Nobody reading: refused at once (a blocking open would hang). A reader: it gets the Workflow."""
    values = write(tmp_path, BASE)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert cli.main([str(values), "-o", str(fifo), "-q"]) == 1
    assert one_line(capsys.readouterr().err) == (f"render.py: cannot write {fifo}: is a FIFO that nothing reads; "
                                                 "start its reader first")
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text(encoding="utf-8")))
    reader.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the reader's open() blocks until a writer comes; wait until it is in it
        status = cli.main([str(values), "-o", str(fifo), "-q"])
        if status == 0:
            break
        capsys.readouterr()
        time.sleep(0.05)
    reader.join(10)
    assert status == 0 and received == [pipeline.run(values).text] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_replacing_a_file_keeps_its_mode_and_owner_and_its_links(tmp_path):
    values = write(tmp_path, BASE)
    existing = write(tmp_path, "old\n", "workflow.yaml")
    existing.chmod(0o640)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    os.chown(existing, *owner)
    link = tmp_path / "link.yaml"
    link.symlink_to(existing.name)
    assert cli.main([str(values), "-o", str(link), "-q"]) == 0
    assert link.is_symlink() and os.readlink(link) == existing.name, "the link was replaced by a file"
    assert existing.read_text(encoding="utf-8") == pipeline.run(values).text
    status = existing.stat()
    assert stat.S_IMODE(status.st_mode) == 0o640 and (status.st_uid, status.st_gid) == owner


def test_a_new_file_gets_the_umask(tmp_path):
    values = write(tmp_path, BASE)
    previous = os.umask(0o027)
    try:
        assert cli.main([str(values), "-o", str(tmp_path / "new" / "workflow.yaml"), "-q"]) == 0
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new" / "workflow.yaml").stat().st_mode) == 0o640


@pytest.mark.parametrize("target, reason", [
    ("", "an empty file name"), ("out/", "names a folder, not a file; give a file name"),
    ("out/.", "names a folder, not a file; give a file name"),
])
def test_output_names_that_are_no_file(target, reason, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    values = write(tmp_path, BASE)
    assert cli.main([str(values), "-o", target]) == 1
    assert one_line(capsys.readouterr().err) == f"render.py: cannot write {target or repr(target)}: {reason}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.yaml"]


# --- a stdout that cannot take it ---------------------------------------------------------------

def big_values(tmp_path: Path, nodes: int = 1500) -> Path:
    """A job whose Workflow is larger than a pipe's 64 KiB buffer."""
    listed = "".join(f"  - {{name: n{i:04d}, address: 10.0.{i // 250}.{i % 250 + 1}, nic: eth0, "
                     "accelerator: ascend910, devices: 8}\n"
                     for i in range(nodes))
    return write(tmp_path, f"name: big\nimage: img:1\nscript: /t.py\nnodes:\n{listed}", "big.yaml")


def test_stdout_on_a_full_disk(tmp_path):
    with open("/dev/full", "w") as full:
        done = render_py(str(EXAMPLE), stdout=full, stderr=subprocess.PIPE, capture_output=False)
    assert done.returncode == 1 and done.stderr == "render.py: cannot write stdout: No space left on device\n"


@pytest.mark.parametrize("reader", ["closed before", "leaves after one byte"])
def test_stdout_into_a_closed_pipe(reader, tmp_path):
    """`render.py big.yaml | head -c1`: the rest cannot be written. One line and exit 1, no
    traceback and no "Exception ignored ... BrokenPipeError" at exit; and never exit 0, which
    Python's own buffered stdout can report after a short write."""
    values = big_values(tmp_path)
    read_end, write_end = os.pipe()
    if reader == "closed before":
        os.close(read_end)
    process = subprocess.Popen([sys.executable, str(REPO / "render.py"), str(values), "-q"], stdout=write_end,
                               stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    if reader != "closed before":
        os.read(read_end, 1)
        os.close(read_end)
    _, err = process.communicate(timeout=10)
    assert process.returncode == 1 and err == "render.py: cannot write stdout: Broken pipe\n", err


def test_stdout_closed(tmp_path):
    done = render_py(str(EXAMPLE), "-q", stdout=None, stderr=subprocess.PIPE, capture_output=False,
                     preexec_fn=lambda: os.close(1))
    assert done.returncode == 1 and done.stderr == "render.py: cannot write stdout: Bad file descriptor\n"


# --- prog, --summary ----------------------------------------------------------------------------

@pytest.mark.parametrize("prog", ["render.py", "torchdag render"])
def test_prog_names_the_command_in_help_usage_errors_and_write_errors(prog, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"], prog=prog)
    assert exited.value.code == 0 and capsys.readouterr().out.startswith(f"usage: {prog} [-h]")
    with pytest.raises(SystemExit) as exited:
        cli.main([], prog=prog)
    assert exited.value.code == 2
    assert f"{prog}: error: the following arguments are required: values" in capsys.readouterr().err
    (tmp_path / "dir").mkdir()
    assert cli.main([str(EXAMPLE), "-o", str(tmp_path / "dir"), "-q"], prog=prog) == 1
    assert capsys.readouterr().err == f"{prog}: cannot write {tmp_path / 'dir'}: is a directory; give a file name\n"


def test_the_torchdag_command_passes_its_name(tmp_path, capsys):
    assert cli.torchdag_main(["render", str(EXAMPLE), "-o", f"{tmp_path}/x/.", "-q"]) == 1
    assert capsys.readouterr().err.startswith(f"torchdag render: cannot write {tmp_path}/x/.: names a folder")
    with pytest.raises(SystemExit):
        cli.torchdag_main(["check", "--help"])
    assert capsys.readouterr().out.startswith("usage: torchdag check [-h]")



# big_values(nodes=20): twenty 910 nodes of 8 (world size 160); --short keeps 4 + 4 rows.
BIG_SHORT_SUMMARY = """\
torchdag job big: 20 node(s), world size 160, backend hccl (auto: ascend910 nodes)
master: n0000 (rank 0) at 10.0.0.1:29500
gang scheduling: none; whole-job restarts: 0
HCCL_EXEC_TIMEOUT: 544 s (timeouts.processGroup 600 s, as CANN reads it: a multiple of 68, at most 17340)
script: start the process group with TORCHDAG_BACKEND=hccl: torchdag_ddp.setup() (docs/byo.md)
helpers: from the Workflow (a ConfigMap of 8 files) at /opt/torchdag/torchdag/agents
rbac: kubectl apply -n <namespace> -f docs/rbac/job.yaml,docs/rbac/helpers.yaml
rank  node   address    nic   accelerator  devices  template
   0  n0000  10.0.0.1   eth0  ascend910    8        ascend910-x8
   1  n0001  10.0.0.2   eth0  ascend910    8        ascend910-x8
   2  n0002  10.0.0.3   eth0  ascend910    8        ascend910-x8
   3  n0003  10.0.0.4   eth0  ascend910    8        ascend910-x8
... 12 more node(s) ...
  16  n0016  10.0.0.17  eth0  ascend910    8        ascend910-x8
  17  n0017  10.0.0.18  eth0  ascend910    8        ascend910-x8
  18  n0018  10.0.0.19  eth0  ascend910    8        ascend910-x8
  19  n0019  10.0.0.20  eth0  ascend910    8        ascend910-x8
"""


def test_summary_instead_of_the_workflow(tmp_path, capsys):
    assert cli.main([str(EXAMPLE), "--summary"]) == 0
    out = capsys.readouterr().out
    assert out == CLUSTER_SUMMARY


def test_summary_with_output_writes_the_workflow_and_prints_the_table(tmp_path, capsys):
    out = tmp_path / "workflow.yaml"
    assert cli.torchdag_main(["render", str(EXAMPLE), "--summary", "-o", str(out)]) == 0
    assert capsys.readouterr().out == CLUSTER_SUMMARY
    assert out.read_text(encoding="utf-8") == pipeline.run(EXAMPLE).text


def test_summary_short_and_check(tmp_path, capsys):
    big = big_values(tmp_path, nodes=20)
    assert cli.main([str(big), "--summary", "--short", "--check"]) == 0
    out = capsys.readouterr().out
    assert out == BIG_SHORT_SUMMARY
    with pytest.raises(SystemExit) as exited:  # --check writes nothing: an -o beside it is refused
        cli.main([str(big), "--summary", "--check", "-o", str(tmp_path / "no.yaml")])
    assert exited.value.code == 2 and "--check writes nothing" in capsys.readouterr().err
    assert not (tmp_path / "no.yaml").exists()
    with pytest.raises(SystemExit) as exited:
        cli.main([str(big), "--short"])
    assert exited.value.code == 2 and "--short goes with --summary" in capsys.readouterr().err


def test_summary_on_a_full_disk_is_one_line():
    with open("/dev/full", "w") as full:
        done = render_py(str(EXAMPLE), "--summary", stdout=full, stderr=subprocess.PIPE, capture_output=False)
    assert done.returncode == 1 and done.stderr == "render.py: cannot write stdout: No space left on device\n"


@pytest.mark.parametrize("target", ["is-a-dir", "under-a-file/workflow.yaml"])
def test_unwritable_output_is_one_line_not_a_traceback(target, tmp_path):
    (tmp_path / "is-a-dir").mkdir()
    (tmp_path / "under-a-file").write_text("a file, not a folder\n")
    out = tmp_path / target
    result = subprocess.run([sys.executable, str(REPO / "render.py"), str(EXAMPLE), "-o", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"render.py: cannot write {out}: ") and len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["is-a-dir", "under-a-file"]
    assert not list((tmp_path / "is-a-dir").iterdir())
