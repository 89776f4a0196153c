"""The scale bench's own judgement (bench/bench_cluster.py): how it reads Argo's packed
node status and when it says the render-time size guard agrees with the real controller.
The measurements themselves are `make bench-cluster`'s (docs/e2e.md)."""

from __future__ import annotations

import base64
import gzip
import json
import sys

from helpers import REPO

sys.path.insert(0, str(REPO / "bench"))
from bench_cluster import agreement, packed_size, status_nodes

TOO_LARGE = "workflow is longer than maximum allowed size. compressed size 1100000 > maxSize 1048576"


def nodes(n: int) -> dict:
    return {f"scale-x-{i}": {"id": f"scale-x-{i}", "name": f"scale-x(0).node-{i}", "type": "Pod",
                             "phase": "Succeeded", "templateName": "ascend910-x8"} for i in range(n)}


def test_packed_status_is_read_back_and_smaller_than_the_plain_one():
    plain = {"metadata": {"name": "scale-x"}, "spec": {}, "status": {"phase": "Running", "nodes": nodes(500)}}
    packed_bytes = packed_size(plain)
    assert packed_bytes < len(json.dumps(plain, separators=(",", ":"))) / 5, "repetitive node status compresses"
    # Argo's own packing: gzip, base64, in status.compressedNodes, status.nodes gone (here zlib's
    # level 6 stands in for Go's gzip, which packs less: the bench counts as Go would, no less)
    text = json.dumps(plain["status"]["nodes"], separators=(",", ":")).encode()
    argo_packed = {"metadata": plain["metadata"], "spec": {}, "status": {
        "phase": "Running", "compressedNodes": base64.b64encode(gzip.compress(text, compresslevel=6)).decode()}}
    assert status_nodes(argo_packed["status"]) == plain["status"]["nodes"]
    assert packed_size(argo_packed) == len(json.dumps(argo_packed, separators=(",", ":")))
    assert packed_size(argo_packed) <= packed_bytes < packed_size(argo_packed) * 1.1


def test_managed_fields_count_as_argo_holds_them_once_packed():
    """Argo measures its informer's object, managedFields included: plain nodes are listed
    field by field there, packed ones as one `f:compressedNodes`."""
    owned = {"f:status": {"f:phase": {}, "f:nodes": {f"f:scale-x-{i}": {".": {}, "f:id": {}} for i in range(500)}}}
    managed = [{"manager": "workflow-controller", "operation": "Update", "fieldsV1": owned}]
    plain = {"metadata": {"name": "scale-x", "managedFields": managed}, "spec": {},
             "status": {"phase": "Running", "nodes": nodes(500)}}
    packed = {**plain, "metadata": {"name": "scale-x", "managedFields": [dict(managed[0], fieldsV1={
        "f:status": {"f:phase": {}, "f:compressedNodes": {}}})]}}
    assert packed_size(plain) == packed_size({**packed, "status": plain["status"]})
    assert packed_size(plain) - packed_size({**plain, "metadata": {"name": "scale-x"}}) == len(json.dumps(
        {"managedFields": packed["metadata"]["managedFields"]}, separators=(",", ":"))) - 1


def row(**kw) -> dict:
    base = {"guard": "fits", "budget_bytes": 500_000, "largest_packed_bytes": 300_000, "phase": "Succeeded",
            "message": "", "second_attempt": True}
    return base | kw


def test_agreement_is_judged_on_what_the_guard_let_through_and_what_argo_did():
    assert agreement(row()) == "agrees"
    assert agreement(row(second_attempt=False)).startswith("agrees so far")
    assert agreement(row(largest_packed_bytes=600_000)).startswith("DISAGREES")
    assert agreement(row(phase="Error", message=TOO_LARGE)).startswith("DISAGREES")
    refused = {"guard": "refused", "budget_bytes": None}
    assert agreement(row(**refused, phase="Error", message=TOO_LARGE)) == "agrees"
    assert agreement(row(**refused)).startswith("guard stricter than Argo")
    assert agreement(row(**refused, phase="Failed", message="child failed")).startswith("guard stricter")


def test_a_run_stopped_before_its_end_is_not_called_agreeing():
    # --stop-after: the status still grows as the pods end
    assert agreement(row(phase="Running")).startswith("agrees so far: stopped while Running")
    assert agreement(row(phase="Running", largest_packed_bytes=600_000)).startswith("DISAGREES")
    assert agreement(row(guard="refused", budget_bytes=None, phase="Running")) == "undecided: stopped while Running"
