"""trainer/progress.py: progress for Argo (ARGO_PROGRESS_FILE) and the stall lines a hang
is found by (TORCHDAG_STALL_REPORT)."""

from __future__ import annotations

import io
import time

from trainer.progress import ProgressFile, StallReporter, stall_report_seconds


def test_progress_is_written_for_argo_by_local_rank_0_only(tmp_path):
    path = tmp_path / "progress"
    progress = ProgressFile(40, {"ARGO_PROGRESS_FILE": str(path), "LOCAL_RANK": "0"})
    progress.update(0, force=True)
    assert path.read_text() == "0/40\n"
    progress.update(3)  # within a second of the last write: not written
    assert path.read_text() == "0/40\n"
    progress.update(40)  # the last step always is
    assert path.read_text() == "40/40\n"
    other = ProgressFile(40, {"ARGO_PROGRESS_FILE": str(tmp_path / "other"), "LOCAL_RANK": "1"})
    other.update(40, force=True)
    assert not (tmp_path / "other").exists()
    ProgressFile(40, {}).update(1, force=True)  # no Argo: nothing to do


def test_an_unwritable_progress_file_is_said_once_and_training_goes_on(tmp_path, capsys):
    progress = ProgressFile(9, {"ARGO_PROGRESS_FILE": str(tmp_path / "missing" / "progress")})
    progress.update(1, force=True)
    progress.update(2, force=True)
    assert capsys.readouterr().err.count("cannot write ARGO_PROGRESS_FILE") == 1


def test_a_stalled_step_is_reported_until_the_next_one():
    out = io.StringIO()
    with StallReporter(3, 1, 50, every=0.2, out=out) as stall:
        stall.step(7)
        time.sleep(0.75)
        lines = out.getvalue().splitlines()
        assert lines and all(line.startswith("[trainer] rank 3 (node 1): no step finished for 0 s (step 7/50): "
                                             "waiting") for line in lines)
        stall.step(8)
        seen = len(out.getvalue().splitlines())
        time.sleep(0.1)
        assert len(out.getvalue().splitlines()) == seen  # a step just finished: quiet
    assert stall_report_seconds({"TORCHDAG_STALL_REPORT": "0"}) == 0
    assert stall_report_seconds({}) == 60 and stall_report_seconds({"TORCHDAG_STALL_REPORT": "x"}) == 60
