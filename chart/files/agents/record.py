#!/usr/bin/env python3
"""Runs a training script as `__main__` under torchelastic's error recording, unedited.

    torchrun [launcher flags] /opt/torchdag/torchdag/agents/record.py SCRIPT [ARG...]

torchrun's failure summary shows a child's exception and traceback only when the child
writes its error file, which `torch.distributed.elastic.multiprocessing.errors.record`
does; without it the summary reads `error_file: <N/A>` and "To enable traceback see ...".
This runner applies `record` to the script's `__main__`, so every script gets it
(`launcher.recordErrors`, on by default). The script sees the same sys.argv, sys.path[0]
and `__name__` as when torchrun runs it directly; torch.distributed.launch's
`--local-rank=N` (which it puts before the script's own arguments) goes after the script's
path, where the script expects it. A script that uses `@record` itself keeps its own
record: this runner then writes nothing over it. The folder of this file is appended to
sys.path, so a script may `import torchdag_ddp` (docs/byo.md).

It also starts torchdag_flight (beside this file) before the script runs: every rank then
says in its log which collective it waits in, where it is stuck outside one, and how busy
its steps are, for `torchdag diagnose` and `torchdag status` (TORCHDAG_RECORD=0: off); a
script that fails in a collective (its timeout) says which on the way out.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback

LAUNCH_FLAGS = ("--local-rank=", "--local_rank=")  # torch.distributed.launch's, before the script's path


def split(words: list[str]) -> tuple[str, list[str]]:
    """(script, its argv[1:]) from this runner's arguments."""
    leading = []
    while words and words[0].startswith(LAUNCH_FLAGS):
        leading.append(words.pop(0))
    if not words:
        raise SystemExit("record.py: usage: record.py SCRIPT [ARG...] (the training script to run)")
    return words[0], leading + words[1:]


def main() -> None:
    script, argv = split(sys.argv[1:])
    sys.argv = [script, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import torchdag_flight
    from torch.distributed.elastic.multiprocessing.errors import record

    torchdag_flight.install()
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE", "")

    def run_script() -> None:
        try:
            runpy.run_path(script, run_name="__main__")
        except Exception:
            torchdag_flight.report_failure()
            if error_file and os.path.exists(error_file):  # the script's own @record wrote it
                traceback.print_exc()
                raise SystemExit(1) from None
            raise

    record(run_script)()


if __name__ == "__main__":
    main()
