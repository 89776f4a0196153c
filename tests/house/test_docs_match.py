"""Examples in the docs that are output: each is what the tool prints today (docs/smoke.md's
`ignored:` lines, chart/README.md's example refusal), and the docs state one time for the
fast tier."""

from __future__ import annotations

import re
import subprocess
import sys

from chart_helpers import helm_template
from helpers import CASES, REPO, write


def localrun_dry_run(path) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "testbed.localrun", str(path), "--dry-run", "--cpu"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in (done.stdout + done.stderr).splitlines()]


def smoke_doc_lines() -> list[str]:
    text = (REPO / "docs" / "smoke.md").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.startswith("    [localrun] ignored:")]


def test_smoke_docs_ignored_lines_are_what_localrun_prints(tmp_path):
    documented = smoke_doc_lines()
    assert len(documented) >= 4, documented
    printed = localrun_dry_run(CASES / "gang-volcano.yaml") + localrun_dry_run(CASES / "pod-network.yaml")
    missing = [line for line in documented if line not in printed]
    assert not missing, f"docs/smoke.md shows lines localrun does not print: {missing}"


def test_the_chart_readmes_example_refusal_is_what_helm_prints(helm, tmp_path):
    readme = (REPO / "chart" / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```text\n(Error: execution error at .*?)\n```", readme, re.DOTALL)[1].splitlines()
    values = write(tmp_path, "name: bladetrain\nimage: registry.example.com/train:1.0\nscript: /code/train.py\n"
                             "nodes:\n  - {name: 192.168.110.22, nic: enp11s0f0, master: true}\n"
                             "  - {name: 192.168.110.23, nic: enp125s0f0, master: true}\n"
                             "  - {name: 192.168.110.22, nic: eno1}\n")
    result = helm_template(helm, values, release="training")
    assert result.returncode != 0
    assert result.stderr.splitlines()[:len(block)] == block


def fast_tier_times() -> dict[str, str]:
    """How long each doc says `make test-fast` takes."""
    texts = {
        "README.md (setup)": re.search(r"`make test-fast` needs what `make render` needs plus `npm`: [^.]*?, "
                                       r"(a [a-z ]+?) \(measured",
                                       (REPO / "README.md").read_text(encoding="utf-8"))[1],
        "README.md (commands)": re.search(r"\| `make test-fast` \|[^|]*\(([^)]+)\) \|",
                                          (REPO / "README.md").read_text(encoding="utf-8"))[1],
        "Makefile": re.search(r"^test-fast:.*## .*\(([^)]+)\)$", (REPO / "Makefile").read_text(encoding="utf-8"),
                              re.MULTILINE)[1],
        "docs/architecture.md": re.search(r"values test, in ([^:.]+)[:.]",
                                          (REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))[1],
    }
    return texts


def test_the_docs_agree_on_how_long_the_fast_tier_takes():
    """One phrase everywhere; the README's setup paragraph gives the measurement behind it."""
    times = fast_tier_times()
    assert len(set(times.values())) == 1, times


def test_the_reserved_env_names_docs_values_lists_are_the_schemas():
    from sync_chart import reserved_env

    row = next(line for line in (REPO / "docs" / "values.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `env` |"))
    listed = row[row.index("`PYTHONUNBUFFERED`"):row.index("; so are")]
    assert re.findall(r"`([A-Z_]+)`", listed) == reserved_env()
    assert "`env-reserved`" in row and "`env-launcher-default`" in row
