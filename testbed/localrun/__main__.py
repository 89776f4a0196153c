"""`python -m testbed.localrun VALUES [options]`: see testbed/localrun/__init__.py."""

import sys

from torchdag.errors import run_command

from .cli import main

sys.exit(run_command(main, "python -m testbed.localrun"))
