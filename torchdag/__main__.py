"""`python -m torchdag ...`: the `torchdag` command (torchdag/cli.py)."""

import sys

from .cli import torchdag_main

sys.exit(torchdag_main())
