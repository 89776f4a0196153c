"""python -m testbed.images build|names (the Makefile's `images` target)."""

from __future__ import annotations

import argparse
import sys

from .store import Store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.images",
                                     description="The real nodes' images: built from packages, cached by their inputs.")
    parser.add_argument("--dir", help="the image cache (default: $TORCHDAG_IMAGES_DIR or ~/.cache/torchdag/images)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build and import into the store whatever this checkout's images lack")
    commands.add_parser("names", help="each image name pods use and the store's image behind it")
    args = parser.parse_args(argv)
    from pathlib import Path

    store = Store(Path(args.dir) if args.dir else None)
    names = store.ensure() if args.command == "build" else store.names()
    for public, ref in names.items():
        print(f"{public}  {ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
