"""Several values files (`render.py base.yaml -f site.yaml`): the file each problem is reported
in. A field one file sets is reported in that file; a key no file sets, which a rule asks for
because of another key (executorServiceAccountName for automountServiceAccountToken: false,
serviceAccountName for rbac.create), is reported in the file that set that other key, where
the user changed something; a required key no file sets, in the first file."""

from __future__ import annotations

import pytest

from helpers import EXAMPLES_DIR, write
from torchdag.cli import main

BASE = (EXAMPLES_DIR / "cpu.yaml").read_text(encoding="utf-8")

# (added to base.yaml, site.yaml, the field, the file it is reported in)
CASES = [
    ("", "automountServiceAccountToken: false\n", "executorServiceAccountName", "site"),
    ("automountServiceAccountToken: false\n", "port: 29501\n", "executorServiceAccountName", "base"),
    ('executorServiceAccountName: ""\n', "automountServiceAccountToken: false\n", "executorServiceAccountName",
     "base"),  # base sets the empty value: its own file
    ("", "rbac: {create: true}\n", "serviceAccountName", "site"),
    ("rbac: {createServiceAccount: true}\n", "port: 29501\n", "serviceAccountName", "base"),
    ("", "scheduling: {gang: kueue}\n", "scheduling.queue", "site"),
]


@pytest.mark.parametrize("base_extra,site_text,field,owner", CASES,
                         ids=[f"{field}-in-{owner}-{index}" for index, (_, _, field, owner) in enumerate(CASES)])
def test_a_problem_is_reported_in_the_file_that_caused_it(base_extra, site_text, field, owner, tmp_path, capsys):
    files = {"base": write(tmp_path, BASE + base_extra, "base.yaml"), "site": write(tmp_path, site_text, "site.yaml")}
    assert main([str(files["base"]), "-f", str(files["site"]), "--check"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{files[owner]}: {field}: "), lines


def test_a_required_key_no_file_sets_is_reported_in_the_first(tmp_path, capsys):
    base = write(tmp_path, BASE.replace("script: /opt/torchdag/trainer/train.py\n", ""), "base.yaml")
    site = write(tmp_path, "port: 29501\n", "site.yaml")
    assert main([str(base), "-f", str(site), "--check"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"{base}: script: is required"]
