"""The rules conftest.py sets for every session: property tests draw the same examples on
every run (the Hypothesis profile `ci`), and a test that rewrites a tracked file is seen."""

from __future__ import annotations

import os
import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st
from tracked_files import changed_files, tracked_digests


def drawn_examples() -> list:
    seen = []

    @given(st.lists(st.integers(), min_size=3), st.text(min_size=3))
    def probe(numbers, text):
        seen.append((tuple(numbers), text))

    probe()
    return seen


def test_property_tests_draw_the_same_examples_on_every_run():
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci":
        return  # a developer asked for fresh examples (HYPOTHESIS_PROFILE=explore)
    assert settings.get_current_profile_name() == "ci"
    assert settings.default.derandomize and settings.default.database is None
    first, second = drawn_examples(), drawn_examples()
    assert len(first) > 10 and first == second


def test_a_rewritten_tracked_file_is_seen(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "kept.txt").write_text("a\n")
    (tmp_path / "edited.txt").write_text("b\n")
    (tmp_path / "link").symlink_to("kept.txt")
    git("add", ".")
    (tmp_path / "untracked.txt").write_text("scratch\n")
    before = tracked_digests(tmp_path)
    assert set(before) == {"kept.txt", "edited.txt", "link"}
    (tmp_path / "edited.txt").write_text("b, rewritten\n")
    (tmp_path / "untracked.txt").write_text("scratch, rewritten\n")  # not tracked: free to change
    (tmp_path / "link").unlink()
    (tmp_path / "link").symlink_to("edited.txt")
    assert changed_files(before, tracked_digests(tmp_path)) == ["edited.txt", "link"]
    assert changed_files(before, before) == []
    assert tracked_digests(tmp_path / "not-a-checkout-at-all") is None
