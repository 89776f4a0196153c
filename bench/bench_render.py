#!/usr/bin/env python3
"""Render benchmark: render.py, `helm template` and TorchX's offline render of the same
N-node x 8-device job, measured in the same run. Prints a table; asserts nothing.

    make bench            # or: .venv/bin/python bench/bench_render.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SIZES = (2, 64, 1024, 4096)  # 4,096 x 8: the largest job the schema allows
DEVICES = 8
ARGO_LIMIT = 1024 * 1024


def values_text(nodes: int) -> str:
    lines = [f"  - {{name: node-{i:04d}, address: 10.{i // 250}.{i % 250}.1, nic: enp189s0f0, "
             f"accelerator: ascend910, devices: {DEVICES}}}"
             for i in range(nodes)]
    head = "name: bench\nimage: registry.example.com/train:1.0\nscript: /workspace/train.py\nnodes:\n"
    return head + "\n".join(lines) + "\n"


def run_measured(argv: list[str], stdout_path: Path | None = None) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in MiB, bytes written to stdout) of one child process."""
    out = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode(errors="replace")
    if stdout_path:
        out.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {stderr[-500:]}")
    size = stdout_path.stat().st_size if stdout_path else 0
    return elapsed, usage.ru_maxrss // 1024, size


def median_run(argv, repeat, stdout_path=None, output_file=None):
    runs = [run_measured(argv, stdout_path) for _ in range(repeat)]
    seconds = statistics.median(r[0] for r in runs)
    rss = max(r[1] for r in runs)
    size = output_file.stat().st_size if output_file else runs[0][2]
    return seconds, rss, size


def json_bytes(workflow_file: Path) -> int:
    """What the API server stores (compact JSON), the measure of Argo's 1 MiB object limit."""
    sys.path.insert(0, str(REPO))
    from torchdag.render import check_documents, json_size

    return sum(json_size(d) for d in check_documents(workflow_file.read_text(encoding="utf-8")))


def many_args_line(args, tmp: Path) -> str:
    """The chart used to be quadratic in the number of args (40,000 args: 18.6 s)."""
    words = ", ".join(f'"--flag{i}=$x"' for i in range(40_000))
    values = tmp / "many-args.yaml"
    values.write_text(f"name: args\nimage: img:1\nscript: /t.py\nargs: [{words}]\n"
                      "nodes: [{name: n1}, {name: n2}]\n")
    py = median_run([sys.executable, "render.py", "-q", str(values)], args.repeat)[0]
    line = f"40,000 script args: render.py {py:.3f} s"
    if Path(args.helm).is_file():
        helm_s = median_run([args.helm, "template", "bench", "chart", "-f", str(values)], args.repeat)[0]
        line += f", helm template {helm_s:.3f} s"
    return line


def in_process_seconds(values: Path, repeat: int) -> float:
    """load + validate + plan + render + write inside one warm interpreter."""
    sys.path.insert(0, str(REPO))
    from torchdag.output import write_output
    from torchdag.pipeline import run

    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        write_output(str(values.with_suffix(".out.yaml")), run([str(values)]).text)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def phase_line(values: Path, repeat: int) -> str:
    """Where render.py's time goes: each phase of the pipeline in a fresh interpreter (imports
    included), median of `repeat` runs, in wall seconds and in CPU seconds (steadier on a
    shared machine)."""
    script = ("import sys, time\n"
              "marks = []\n"
              "def mark(): marks.append((time.perf_counter(), time.process_time()))\n"
              "mark(); sys.path.insert(0, '.')\n"
              "from torchdag import pipeline; from torchdag.plan import make_plan; from torchdag.render import render\n"
              "mark(); loaded = pipeline.load(sys.argv[1]); mark()\n"
              "values = pipeline.validate(loaded); mark()\n"
              "plan = make_plan(values); mark()\n"
              "render(plan, loaded.source); mark()\n"
              "print(' '.join(f'{b[i] - a[i]}' for a, b in zip(marks, marks[1:]) for i in (0, 1)))\n")
    runs = [[float(x) for x in subprocess.run([sys.executable, "-c", script, str(values)], cwd=REPO, check=True,
                                               capture_output=True, text=True).stdout.split()] for _ in range(repeat)]
    phases = [(statistics.median(run[2 * i] for run in runs), statistics.median(run[2 * i + 1] for run in runs))
              for i in range(5)]
    named = ", ".join(f"{name} {wall:.3f} s (CPU {cpu:.3f} s)" for name, (wall, cpu) in
                      zip(("imports", "load", "validate", "plan", "render (template, parse back, size)"), phases))
    return f"render.py's phases at the largest size: {named}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--helm", default=os.environ.get("HELM", str(REPO / ".tools" / "bin" / "helm")))
    parser.add_argument("--torchx", default=str(REPO / ".venv-bench" / "bin" / "torchx"))
    args = parser.parse_args()
    # The tools measured beside render.py: name, command for an N-node values file, and the
    # ratio column (its header and how it compares with render.py's row).
    others = []
    if Path(args.helm).is_file() and (REPO / "chart" / "Chart.yaml").is_file():
        others.append(("helm", lambda values, nodes: [args.helm, "template", "bench", "chart", "-f", str(values)],
                       "helm/py", lambda row: row["helm_s"] / row["render_s"]))
    if Path(args.torchx).is_file():
        others.append(("torchx", lambda values, nodes: [
            args.torchx, "run", "--workspace", "", "--dryrun", "-s", "kubernetes", "-cfg", "queue=default",
            "dist.ddp", "-j", f"{nodes}x{DEVICES}", "--script", "train.py"],
            "tx/py size", lambda row: row["torchx_bytes"] / row["render_bytes"]))

    rows = []
    with tempfile.TemporaryDirectory(prefix="torchdag-bench-") as tmp:
        tmp = Path(tmp)
        for nodes in SIZES:
            values = tmp / f"n{nodes}.yaml"
            values.write_text(values_text(nodes))
            out = tmp / f"n{nodes}.workflow.yaml"
            r_sec, r_rss, r_size = median_run([sys.executable, "render.py", str(values), "-o", str(out)], args.repeat,
                                              output_file=out)
            warm = in_process_seconds(values, args.repeat)
            row = {"nodes": nodes, "render_s": r_sec, "render_warm_s": warm, "render_mib": r_rss,
                   "render_bytes": r_size,
                   "json_bytes": json_bytes(out)}
            for name, command, _, _ in others:
                measured = median_run(command(values, nodes), args.repeat, stdout_path=tmp / f"n{nodes}.{name}.out")
                row.update(zip((f"{name}_s", f"{name}_mib", f"{name}_bytes"), measured))
            rows.append(row)
        args_line = many_args_line(args, tmp)
        phases = phase_line(tmp / f"n{SIZES[-1]}.yaml", args.repeat)

    print(f"Render benchmark: N nodes x {DEVICES} Ascend 910, median of {args.repeat} runs, peak RSS of the process")
    print("render.py s = whole CLI process (interpreter start + imports + load/validate/plan/render/write); "
          "warm s = the pipeline alone\n")
    header = f"{'nodes':>5} | {'render.py s':>11} {'warm s':>7} {'MiB':>5} {'bytes':>9} {'JSON B':>9} {'B/node':>6}"
    for name, _, ratio_header, _ in others:
        header += f" | {name + ' s':>8} {'MiB':>5} {'bytes':>9} {ratio_header:>10}"
    print(header)
    print("-" * len(header))
    base = rows[0]["render_bytes"]
    for row in rows:
        per_node = (row["render_bytes"] - base) / (row["nodes"] - SIZES[0]) if row["nodes"] > SIZES[0] else 0
        line = (f"{row['nodes']:>5} | {row['render_s']:>11.3f} {row['render_warm_s']:>7.3f} {row['render_mib']:>5} "
                f"{row['render_bytes']:>9} {row['json_bytes']:>9} {per_node:>6.0f}")
        for name, _, _, ratio in others:
            line += f" | {row[name + '_s']:>8.3f} {row[name + '_mib']:>5} {row[name + '_bytes']:>9} {ratio(row):>10.2f}"
        print(line)
    largest = rows[-1]
    verdict = "under" if largest["json_bytes"] < ARGO_LIMIT else "OVER"
    print(f"\n{largest['nodes']}-node x {DEVICES} Workflow: {largest['render_bytes']} bytes of YAML, "
          f"{largest['json_bytes']} bytes as stored (JSON), "
          f"{verdict} the {ARGO_LIMIT}-byte object limit; rendered in {largest['render_s']:.2f} s")
    print(phases)
    print(args_line)
    measured = {name for name, *_ in others}
    if "helm" not in measured:
        print("helm template: skipped (no chart/ or helm binary; run through `make bench`)")
    if "torchx" not in measured:
        print("torchx: skipped (run through `make bench`, which installs it into .venv-bench)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
