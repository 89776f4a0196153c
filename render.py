#!/usr/bin/env python3
"""Render a torchdag values file into an Argo Workflow: `python render.py cluster.yaml [-o FILE] [--check] [-q]`.

A thin alias, runnable from a checkout without installing anything but requirements-render.txt:
`torchdag render` (pip install .) calls the same torchdag.cli.main and writes the same bytes.
"""

import sys

from torchdag.cli import main

if __name__ == "__main__":
    sys.exit(main())
