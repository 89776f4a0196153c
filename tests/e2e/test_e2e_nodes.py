"""Rendered jobs on real nodes (testbed/node: the kubelet, containerd and runc; images built
here from packages): what only a real node shows. A user's image with python3 and torch and
nothing of torchdag trains to Succeeded with the helpers the Workflow carries; a helper the
Workflow does not carry fails as a real container fails (`can't open file`); an image without
python3 fails saying so."""

from __future__ import annotations

import pytest
from realnodes_helpers import NO_PYTHON_IMAGE, USER_IMAGE

pytestmark = [pytest.mark.go, pytest.mark.e2e]

USER_SCRIPT = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"[user] rank {rank}: sum {total.item():g}; trainer in image: "
      f"{os.path.exists('/opt/torchdag/trainer/train.py')}", flush=True)
dist.destroy_process_group()
"""


def user_job(real_job, count: int, extra: str = "", image: str = USER_IMAGE) -> str:
    (real_job.dir / "train.py").write_text(USER_SCRIPT)
    values = real_job.values([{"devices": 1, **({"master": True} if i == 0 else {})} for i in range(count)], [],
                             extra=extra, image=image, script=str(real_job.dir / "train.py"))
    return real_job.submit(real_job.render(values))


def test_a_users_image_without_torchdag_files_trains_to_succeeded(real_job):
    name = user_job(real_job, 2)
    wf = real_job.wait_finished(name, timeout=300)
    assert wf["status"]["phase"] == "Succeeded", real_job.explain(name)
    logs = "\n".join(real_job.log(pod) for pod in real_job.pods(name))
    for rank in (0, 1):
        assert f"[user] rank {rank}: sum 3; trainer in image: False" in logs, logs[-3000:]
