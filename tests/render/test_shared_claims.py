"""Claims mounted on every machine. Every `volumes` entry is mounted into every node's pod,
one pod per machine, so a persistentVolumeClaim must be ReadWriteMany (or ReadOnlyMany,
mounted readOnly): a ReadWriteOnce claim attaches to one machine and every other pod waits in
a Multi-Attach error. The access mode is the claim's, which the values cannot show; what
they do show is a claim mounted read-write by two or more machines, the usual ReadWriteOnce
mistake: both renderers warn about it (render.py on stderr, the chart in its NOTES)."""

from __future__ import annotations

import pytest
from chart_notes import helm_notes

from helpers import EXAMPLES_DIR, write
from torchdag.cli import main

CPU = (EXAMPLES_DIR / "cpu.yaml").read_text(encoding="utf-8")  # three machines
SINGLE = ("name: one\nimage: registry.example.com/train:1.0\nscript: /code/train.py\n"
          "nodes:\n  - {name: gpu-a01, accelerator: nvidia, devices: 8}\n")
CLAIM = "  - {name: data, mountPath: /data, persistentVolumeClaim: {claimName: datasets}}\n"
READ_ONLY = "  - {name: ro, mountPath: /ro, readOnly: true, persistentVolumeClaim: {claimName: models}}\n"
HOST = "  - {name: scratch, mountPath: /scratch, hostPath: {path: /mnt/scratch}}\n"
WARNING = ("volumes[{index}].persistentVolumeClaim: claim 'datasets' is mounted read-write on all 3 machines: it "
           "must be ReadWriteMany, as a ReadWriteOnce claim attaches to one machine and every other pod waits in a "
           "Multi-Attach error")

# (volumes, the index of the warned claim or None)
CASES = [
    (CLAIM, 0),
    (HOST + READ_ONLY + CLAIM, 2),
    (READ_ONLY, None),  # read-only: ReadOnlyMany works too; nothing to tell from the values
    (HOST, None),
    (CLAIM.replace("persistentVolumeClaim", "readOnly: false, persistentVolumeClaim"), 0),
]


@pytest.mark.parametrize("volumes,index", CASES, ids=["claim", "claim-third", "read-only", "host-path",
                                                      "read-only-false"])
def test_a_claim_every_machine_mounts_read_write_is_warned_about(volumes, index, helm, tmp_path, capsys):
    values = write(tmp_path, CPU + "volumes:\n" + volumes)
    assert main([str(values), "-o", str(tmp_path / "wf.yaml")]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "Multi-Attach" in line]
    notes = helm_notes(helm, values)
    if index is None:
        assert warned == [] and "Multi-Attach" not in notes
    else:
        assert warned == [f"warning: {values}: {WARNING.format(index=index)} (a ReadOnlyMany claim needs "
                          "readOnly: true)"]
        assert f"WARNING: {WARNING.format(index=index)}" in notes


def test_one_machine_may_mount_a_read_write_once_claim(helm, tmp_path, capsys):
    values = write(tmp_path, SINGLE + "volumes:\n" + CLAIM)
    assert main([str(values), "-o", str(tmp_path / "wf.yaml")]) == 0
    assert "Multi-Attach" not in capsys.readouterr().err
    assert "Multi-Attach" not in helm_notes(helm, values)
