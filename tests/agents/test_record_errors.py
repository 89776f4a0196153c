"""launcher.recordErrors under `make smoke`: a script that raises on one rank, run unedited
through torchdag/agents/record.py, shows its exception and traceback in torchrun's failure
summary (no `error_file: <N/A>`), with torchrun and torch.distributed.launch alike; a script
that uses @record itself keeps its own record."""

from __future__ import annotations

import pytest

from localrun_helpers import Run, free_port, values_with

RAISES = """
import torch.distributed as dist
{decorator}
def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("rank 1 fails here")
    dist.barrier()


if __name__ == "__main__":
    main()
"""
OWN_RECORD = "from torch.distributed.elastic.multiprocessing.errors import record\n@record"


def smoke(tmp_path, decorator: str = "", **launcher) -> str:
    script = tmp_path / "raises.py"
    script.write_text(RAISES.format(decorator=decorator))
    nodes = [{"name": "node-a", "address": "198.18.0.1", "devices": 1, "master": True},
             {"name": "node-b", "address": "198.18.0.2", "devices": 1}]
    values = values_with(tmp_path, script=str(script), args=[], nodes=nodes, launcher=launcher)
    run = Run(str(values), "--port", str(free_port()), "--timeout", "120")
    assert run.finish(150) != 0, run.text[-3000:]
    return run.text


def root_cause(text: str, node: str) -> str:
    """The root-cause section of one node's torchrun failure summary."""
    lines = [line.removeprefix(f"[{node}] ") for line in text.splitlines() if line.startswith(f"[{node}] ")]
    start = lines.index("Root Cause (first observed failure):")
    return "\n".join(lines[start:])


@pytest.mark.torch  # real torchrun jobs
@pytest.mark.parametrize("launcher", ["torchrun", "launch"])
def test_a_failing_rank_shows_its_exception_in_the_summary(tmp_path, launcher):
    text = smoke(tmp_path, type=launcher)
    cause = root_cause(text, "node-1")
    assert "rank      : 1 (local_rank: 0)" in cause, cause
    assert 'raise ValueError("rank 1 fails here")' in cause and "ValueError: rank 1 fails here" in cause, cause
    assert "error_file: <N/A>" not in text and "To enable traceback see" not in text


@pytest.mark.torch
def test_a_script_with_its_own_record_keeps_it(tmp_path):
    cause = root_cause(smoke(tmp_path, decorator=OWN_RECORD), "node-1")
    assert "ValueError: rank 1 fails here" in cause, cause
    assert "agents/record.py" not in cause  # the script's own record, not the runner's over it


@pytest.mark.torch
def test_record_errors_off_leaves_torchruns_default(tmp_path):
    text = smoke(tmp_path, recordErrors=False)
    assert "error_file: <N/A>" in root_cause(text, "node-1")
