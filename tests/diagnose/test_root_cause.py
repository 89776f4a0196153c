"""Root before consequence (issue 41): a user's script raises on rank 1 while every other rank
dies of the lost peer, in logs of real runs (tests/diagnose_logs/user-raise*, recorded by its
record.py: tests/third_party/faulty_user.py under the Workflow's record.py, 2 nodes x 2
processes and 4 x 1), each turned ten ways that put the two in the same second: diagnose
names rank 1, its host and its exception with the last frames in all twenty."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from torchdag.diagnose import core

LOGS = Path(__file__).resolve().parents[1] / "diagnose_logs"
HOSTS = ("host-a", "host-b", "host-c", "host-d")
FINISHED = "2026-12-06T07:52:00Z"
# fixture: (nodes, the root's node)
FIXTURES = {"user-raise": (2, 0), "user-raise4": (4, 1)}
ROOT = "[rank1]: ValueError: bad batch"


def pod(rank: int) -> dict:
    state = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": FINISHED}}
    return {"metadata": {"name": f"job-node-{rank}", "labels": {core.RANK_LABEL: str(rank)},
                         "creationTimestamp": "2026-12-06T07:50:00Z"},
            "spec": {"nodeName": HOSTS[rank]}, "status": {"phase": "Failed", "containerStatuses": [
                {"name": "main", "state": state}]}}


def read(fixture: str) -> list[list[core.LogLine]]:
    nodes, _ = FIXTURES[fixture]
    return [core.parse_log((LOGS / f"{fixture}-node{n}.log").read_text()) for n in range(nodes)]


def text(lines: list[core.LogLine], stamps: bool = True) -> str:
    out = []
    for line in lines:
        if stamps and line.time is not None:
            out.append(f"{line.time.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z {line.text}")
        else:
            out.append(line.text)
    return "\n".join(out) + "\n"


def root_time(logs, root_node) -> dt.datetime:
    return next(line.time for line in logs[root_node] if line.text.startswith(ROOT))


def first_consequence(lines: list[core.LogLine], skip: str = "[rank1]:") -> int | None:
    return next((i for i, line in enumerate(lines) if "Connection closed by peer" in line.text
                 and not line.text.startswith(skip)), None)


def shifted(lines, delta):
    return [core.LogLine(line.time + delta if line.time else None, line.text) for line in lines]


def survivors_at(logs, root_node, offset: dt.timedelta):
    """Every other node's log moved so that its first consequence lands at the root's time + offset."""
    target = root_time(logs, root_node) + offset
    out = []
    for n, lines in enumerate(logs):
        index = first_consequence(lines)
        out.append(lines if n == root_node or index is None else shifted(lines, target - lines[index].time))
    return out


# -- the ten ways ---------------------------------------------------------------------------

def as_recorded(logs, root):
    return logs, True


def consequence_first_same_second(logs, root):
    return survivors_at(logs, root, -dt.timedelta(milliseconds=300)), True


def consequence_same_instant(logs, root):
    return survivors_at(logs, root, dt.timedelta(0)), True


def whole_seconds(logs, root):
    moved = survivors_at(logs, root, -dt.timedelta(milliseconds=100))
    return [[core.LogLine(line.time.replace(microsecond=0) if line.time else None, line.text) for line in lines]
            for lines in moved], True


def no_timestamps(logs, root):
    return logs, False


def summary_only(logs, root):
    """The child's own traceback lost: only torchrun's Root Cause block names the exception; the
    survivors' consequences in the same second as its error file's time, and earlier than the
    summary's own lines."""
    lines = [line for line in logs[root] if not line.text.startswith("[rank1]:")]
    stamp = next(line.text for line in lines if line.text.strip().startswith("time      :"))
    failed = dt.datetime.strptime(stamp.split(":", 1)[1].strip(), "%Y-%m-%d_%H:%M:%S").replace(tzinfo=dt.timezone.utc)
    out = [lines if n == root else lines for n, lines in enumerate(logs)]
    out[root] = lines
    for n, survivor in enumerate(out):
        index = first_consequence(survivor, skip="\0")
        if n != root and index is not None:
            out[n] = shifted(survivor, failed + dt.timedelta(milliseconds=200) - survivor[index].time)
    return out, True


def summary_only_local_clock(logs, root):
    """As summary_only, with the node's clock 8 hours east of UTC in torchrun's summary."""
    out, stamps = summary_only(logs, root)
    moved = []
    for line in out[root]:
        if line.text.strip().startswith("time      :"):
            when = dt.datetime.strptime(line.text.split(":", 1)[1].strip(), "%Y-%m-%d_%H:%M:%S")
            line = core.LogLine(line.time, f"  time      : {(when + dt.timedelta(hours=8)):%Y-%m-%d_%H:%M:%S}")
        moved.append(line)
    out[root] = moved
    return out, stamps


def pods_reversed(logs, root):
    return consequence_first_same_second(logs, root)[0], True


def tails_only(logs, root):
    moved = consequence_first_same_second(logs, root)[0]
    return [lines[-80:] for lines in moved], True


def another_root_later_same_second(logs, root):
    """Another rank's own error 0.4 s after rank 1's: still rank 1 first."""
    moved = consequence_first_same_second(logs, root)[0]
    other = next(n for n in range(len(moved)) if n != root)
    when = root_time(moved, root) + dt.timedelta(milliseconds=400)
    moved[other] = moved[other] + [core.LogLine(when, "[rank3]: OSError: [Errno 28] No space left on device")]
    moved[other].sort(key=lambda line: line.time or dt.datetime.max.replace(tzinfo=dt.timezone.utc))
    return moved, True


WAYS = [as_recorded, consequence_first_same_second, consequence_same_instant, whole_seconds, no_timestamps,
        summary_only, summary_only_local_clock, pods_reversed, tails_only, another_root_later_same_second]


@pytest.mark.parametrize("way", WAYS, ids=[w.__name__ for w in WAYS])
@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_the_raising_rank_is_first_however_the_seconds_tie(fixture, way):
    nodes, root = FIXTURES[fixture]
    logs, stamps = way(read(fixture), root)
    pods = [pod(n) for n in range(nodes)]
    texts = {f"job-node-{n}": text(lines, stamps) for n, lines in enumerate(logs)}
    if way is pods_reversed:
        pods.reverse()
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed"}}
    result = core.diagnose(workflow, core.build_views(workflow, pods, [], texts))
    first = result.first
    assert (result.status, first.process_rank, first.pod.host, first.signature) == (
        1, 1, HOSTS[root], "python-exception"), "\n".join(core.report_lines("job", result))
    assert "ValueError: bad batch at step 30 on rank 1" in first.cause
    assert first.evidence[-1] == "ValueError: bad batch at step 30 on rank 1: (32, 64)", first.evidence
    assert any("in check_batch" in line for line in first.evidence), first.evidence  # the last frames
    # every other rank's lost peer is named after it, as a consequence
    lost = [f for f in result.others if f.signature == "peer-lost"]
    assert lost and all(f.effect for f in lost)
    text_out = "\n".join(core.report_lines("job", result))
    assert f"first failure: rank 1 ({HOSTS[root]})" in text_out


def test_a_consequence_alone_is_named_as_one():
    """Only the survivor's log (the raising rank's pod gone): its lost peer is named, and said
    to be a consequence, not a cause."""
    logs = read("user-raise4")
    workflow = {"metadata": {"name": "job"}, "status": {"phase": "Failed"}}
    result = core.diagnose(workflow, core.build_views(workflow, [pod(0)], [], {"job-node-0": text(logs[0])}))
    assert (result.status, result.first.signature, result.first.effect) == (2, "peer-lost", True)
    lines = "\n".join(core.report_lines("job", result))
    assert "(a consequence: no rank shows a root cause)" in lines and "is a consequence" in lines, lines


def test_every_signature_is_root_or_consequence():
    from torchdag.diagnose import signatures

    text_yaml = signatures.FILE.read_text()
    assert text_yaml.count("\n- id: ") == text_yaml.count("\n  kind: ") == len(signatures.load())
    kinds = {s.id: s.kind for s in signatures.load()}
    assert kinds["python-exception"] == "root" and kinds["peer-lost"] == "consequence"
    assert kinds["collective-timeout"] == "consequence" and kinds["torchrun-summary"] == "consequence"
