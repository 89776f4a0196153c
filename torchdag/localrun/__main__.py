"""`python -m torchdag.localrun VALUES [options]`: see torchdag/localrun/__init__.py."""

import sys

from ..errors import run_command
from .cli import main

sys.exit(run_command(main, "python -m torchdag.localrun"))
