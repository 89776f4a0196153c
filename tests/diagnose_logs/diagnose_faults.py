#!/usr/bin/env python3
"""The trainer (trainer/train.py) with one injected fault, for the diagnose tests:

    TORCHDAG_FAULT=raise|kill|stop  TORCHDAG_FAULT_RANK=R  TORCHDAG_FAULT_STEP=N  diagnose_faults.py ARGS...

At step N, rank R raises RuntimeError (raise), SIGKILLs itself (kill, an OOM stand-in) or
SIGSTOPs itself (stop, a hang); with `nic`, rank R's GLOO_SOCKET_IFNAME names a NIC this
machine lacks (ens9), as a wrong `nic:` would. Every other rank trains as usual.
"""

import os
import signal
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from trainer import ddp, train  # noqa: E402 -- after the path above

FAULT = os.environ.get("TORCHDAG_FAULT", "")
RANK = int(os.environ.get("TORCHDAG_FAULT_RANK", "1"))
STEP = int(os.environ.get("TORCHDAG_FAULT_STEP", "5"))
_run_batch = ddp.Trainer._run_batch


def faulty_batch(self, source, targets):
    if self.rank == RANK and self.step == STEP:
        if FAULT == "raise":
            raise RuntimeError(f"injected failure at step {STEP}")
        if FAULT in ("kill", "stop"):
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL if FAULT == "kill" else signal.SIGSTOP)
    return _run_batch(self, source, targets)


ddp.Trainer._run_batch = faulty_batch
if FAULT == "nic" and os.environ.get("RANK") == str(RANK):
    os.environ["GLOO_SOCKET_IFNAME"] = "ens9"

if __name__ == "__main__":
    code = train.main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
