#!/usr/bin/env python3
"""What each test tier costs, against its budget: the time budget `make bench` reports.

Runs `make test-fast` and then `make test` (warm: the venvs and .tools are built by then), each
with pytest writing a JUnit report, and prints for each one its wall time against the budget
(test-fast 3 minutes; make test's tests 25 minutes on a 2-core machine) and where the time goes:
the test seconds of each folder and tier (pytest-xdist runs two workers, so the test seconds add
up to about twice the wall time). Then `ci-cold`: CI's own `bash .ci/run` in a fresh clone of
HEAD with every cache empty (Go's build and module caches, pip's, npm's: each a new folder,
removed after), as on a fresh CI machine, against CI's 75-minute target (90 is CI's limit). What
was installed system-wide (Debian's PostgreSQL, Go itself) is not removed: a fresh machine would
spend a minute or two more on it. A number, not a pass/fail: a test that timed itself would fail
on a busy machine and prove nothing on an idle one.

    python bench/bench_tiers.py                     # test-fast, test (warm), ci-cold (about 2 hours)
    python bench/bench_tiers.py test ci-cold        # the two figures the README states
    python bench/bench_tiers.py test-fast           # one of them
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUDGET_S = {"test-fast": 3 * 60, "test": 25 * 60, "ci-cold": 75 * 60}
LABEL = {"test-fast": "make test-fast", "test": "make test (warm)", "ci-cold": ".ci/run (fresh clone, cold caches)"}


def run_target(target: str, report: Path, scratch: Path) -> tuple[float, int]:
    """`make TARGET` (or, for ci-cold, .ci/run in a fresh clone with empty caches) with pytest
    writing a JUnit report; its wall time and exit status."""
    env = dict(os.environ, PYTEST_ADDOPTS=f"{os.environ.get('PYTEST_ADDOPTS', '')} --junitxml={report}".strip())
    cwd, command = REPO, ["make", "-s", target]
    if target == "ci-cold":
        cwd = scratch / "clone"
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(cwd)], check=True)
        caches = scratch / "caches"
        env.update(CI="true", GOCACHE=str(caches / "go-build"), GOMODCACHE=str(caches / "go-mod"),
                   GOFLAGS=f"{env.get('GOFLAGS', '')} -modcacherw".strip(), PIP_CACHE_DIR=str(caches / "pip"),
                   npm_config_cache=str(caches / "npm"))
        command = ["bash", ".ci/run"]
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
    return time.monotonic() - start, done.returncode


def _writable(func, path, _exc) -> None:
    """rmtree's error handler: Go's module cache is read-only unless made otherwise."""
    os.chmod(path, stat.S_IWRITE | stat.S_IREAD | stat.S_IEXEC)
    func(path)


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
    parser.add_argument("targets", nargs="*", choices=sorted(BUDGET_S), default=["test-fast", "test", "ci-cold"])
    args = parser.parse_args()
    status = 0
    scratch = Path(tempfile.mkdtemp(prefix="bench-tiers-"))
    try:
        for target in args.targets:
            report = scratch / f"{target}.xml"
            wall, code = run_target(target, report, scratch)
            status = status or code
            budget = BUDGET_S[target]
            verdict = "within" if wall <= budget else "OVER"
            print(f"{LABEL[target]}: {wall / 60:.1f} min wall ({verdict} its {budget // 60}-minute budget)"
                  + ("" if code == 0 else f", exit status {code}"), flush=True)
            if not report.exists():
                continue
            seconds, count = seconds_by_folder(report)
            print(f"  {count} tests, {sum(seconds.values()) / 60:.1f} min of test time over the pytest workers:")
            for folder, spent in sorted(seconds.items(), key=lambda item: -item[1]):
                print(f"    tests/{folder + '/':<14} {spent / 60:6.1f} min", flush=True)
    finally:
        shutil.rmtree(scratch, onerror=_writable)
    return status


if __name__ == "__main__":
    sys.exit(main())
