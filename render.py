#!/usr/bin/env python3
"""Render a torchdag values file into an Argo Workflow: `python render.py cluster.yaml [-o FILE] [--check]`."""

import sys

from torchdag.cli import main

if __name__ == "__main__":
    sys.exit(main())
