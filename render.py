#!/usr/bin/env python3
"""Render a torchdag values file into an Argo Workflow: `python render.py cluster.yaml [-o FILE] [--check] [-q]`.

A thin alias, runnable from a checkout without installing anything but requirements-render.txt:
`torchdag render` (pip install .) calls the same torchdag.cli.main and writes the same bytes.
"""

import sys

if sys.version_info < (3, 11):  # before torchdag is imported: its code needs 3.11 (pyproject's requires-python)
    sys.exit("render.py needs Python 3.11 or later, and this is %d.%d: run it with " % sys.version_info[:2] +
             "python3.11 (any 3.11 or later), or, with no Python, helm template NAME chart -f VALUES, which "
             "prints the same Workflow (README)")

from torchdag.cli import main  # after the version check

if __name__ == "__main__":
    sys.exit(main())
