#!/usr/bin/env python3
"""What each test tier costs, against its budget: the time budget `make bench` reports.

Runs `make test-fast` and then `make test` (warm: the venvs and .tools are built by then), each
with pytest writing a JUnit report, and prints for each one its wall time against the budget
(test-fast 3 minutes; make test's tests 25 minutes on a 2-core machine) and where the time goes:
the test seconds of each folder and tier (pytest-xdist runs two workers, so the test seconds add
up to about twice the wall time). A number, not a pass/fail: a test that timed itself would fail
on a busy machine and prove nothing on an idle one.

    python bench/bench_tiers.py              # both targets (about half an hour)
    python bench/bench_tiers.py test-fast    # one of them
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUDGET_S = {"test-fast": 3 * 60, "test": 25 * 60}


def run_target(target: str, report: Path) -> tuple[float, int]:
    """`make TARGET` with pytest writing a JUnit report; its wall time and exit status."""
    env = dict(os.environ, PYTEST_ADDOPTS=f"{os.environ.get('PYTEST_ADDOPTS', '')} --junitxml={report}".strip())
    start = time.monotonic()
    done = subprocess.run(["make", "-s", target], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
    return time.monotonic() - start, done.returncode


def seconds_by_folder(report: Path) -> tuple[dict[str, float], int]:
    """Test seconds per subject folder (tests/<folder>/), from the JUnit report's classnames."""
    seconds: dict[str, float] = collections.Counter()
    count = 0
    for case in ET.parse(report).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else "(root)"
        seconds[folder] += float(case.get("time") or 0)
        count += 1
    return dict(seconds), count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", choices=sorted(BUDGET_S), default=["test-fast", "test"])
    args = parser.parse_args()
    status = 0
    with tempfile.TemporaryDirectory() as scratch:
        for target in args.targets:
            report = Path(scratch) / f"{target}.xml"
            wall, code = run_target(target, report)
            status = status or code
            budget = BUDGET_S[target]
            verdict = "within" if wall <= budget else "OVER"
            print(f"make {target}: {wall / 60:.1f} min wall ({verdict} its {budget // 60}-minute budget)"
                  + ("" if code == 0 else f", exit status {code}"))
            if not report.exists():
                continue
            seconds, count = seconds_by_folder(report)
            print(f"  {count} tests, {sum(seconds.values()) / 60:.1f} min of test time over the pytest workers:")
            for folder, spent in sorted(seconds.items(), key=lambda item: -item[1]):
                print(f"    tests/{folder + '/':<14} {spent / 60:6.1f} min")
    return status


if __name__ == "__main__":
    sys.exit(main())
