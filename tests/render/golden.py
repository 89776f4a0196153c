#!/usr/bin/env python3
"""Golden files: tests/golden/<group>/<name>.yaml is what render.py prints for
examples/<name>.yaml and tests/cases/<name>.yaml. `make golden` (this script with
--write) regenerates them; the tests only compare, and a missing golden fails."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Run as a script (`make golden`), it needs what pytest puts on the path: tests/ (helpers) and the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import REPO

sys.path.insert(0, str(REPO))

from torchdag import pipeline

GOLDEN_DIR = REPO / "tests" / "golden"
SOURCES = {"examples": REPO / "examples", "cases": REPO / "tests" / "cases"}


def golden_pairs() -> list[tuple[Path, Path]]:
    """(values file, its golden file) for every example and case."""
    pairs = []
    for group, folder in SOURCES.items():
        for values in sorted(folder.glob("*.yaml")):
            pairs.append((values, GOLDEN_DIR / group / values.name))
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the golden files")
    args = parser.parse_args()
    if not args.write:
        parser.error("only --write is supported; the tests do the comparing")
    expected = set()
    for values, golden in golden_pairs():
        golden.parent.mkdir(parents=True, exist_ok=True)
        text = pipeline.run(values).text
        expected.add(golden)
        if not golden.exists() or golden.read_text(encoding="utf-8") != text:
            golden.write_text(text, encoding="utf-8")
            print(f"wrote {golden.relative_to(REPO)}")
    for stale in GOLDEN_DIR.glob("*/*.yaml"):
        if stale not in expected:
            stale.unlink()
            print(f"removed {stale.relative_to(REPO)} (its values file is gone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
