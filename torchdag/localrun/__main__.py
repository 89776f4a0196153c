"""`python -m torchdag.localrun VALUES [options]`: see torchdag/localrun/__init__.py."""

import sys

from .cli import main

sys.exit(main())
