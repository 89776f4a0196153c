"""The known failure signatures (signatures.yaml): loaded once, matched line by line."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

SOURCES = ("log", "event", "state")
KINDS = ("root", "consequence")
FILE = Path(__file__).with_name("signatures.yaml")


@dataclass(frozen=True)
class Signature:
    id: str
    source: str
    pattern: re.Pattern
    cause: str
    fix: str
    kind: str = "root"

    @property
    def effect(self) -> bool:
        """A consequence: what a rank prints after another rank failed."""
        return self.kind == "consequence"

    def describe(self, match: re.Match) -> tuple[str, str]:
        """cause and fix with {1}, {2}... filled from the match's groups (a group that did not take part: empty)."""
        groups = ["" if g is None else g.strip() for g in match.groups()]

        def fill(text: str) -> str:
            return re.sub(r"\{(\d+)\}", lambda m: groups[int(m.group(1)) - 1] if int(m.group(1)) <= len(groups)
                          else "", text)
        return fill(self.cause), fill(self.fix)


@functools.lru_cache(maxsize=1)
def load(path: str = str(FILE)) -> tuple[Signature, ...]:
    with open(path, encoding="utf-8") as f:
        entries = yaml.safe_load(f)
    out = []
    for entry in entries:
        if entry["source"] not in SOURCES:
            raise ValueError(f"{path}: signature {entry['id']}: source must be one of {', '.join(SOURCES)}")
        if entry.get("kind") not in KINDS:
            raise ValueError(f"{path}: signature {entry['id']}: kind must be one of {', '.join(KINDS)}")
        out.append(Signature(entry["id"], entry["source"], re.compile(entry["pattern"]), entry["cause"],
                             entry["fix"], entry["kind"]))
    return tuple(out)


def match(text: str, source: str, signatures: tuple[Signature, ...] | None = None) -> tuple[Signature, re.Match] | None:
    """The first signature of this source (file order) that the text matches."""
    for sig in signatures or load():
        if sig.source == source:
            found = sig.pattern.search(text)
            if found:
                return sig, found
    return None
