"""Process state benchmark: does a fresh process run the same work at another speed?

A 1024 x 1024 matmul on one intra-op thread, in float32 and in bfloat16 (the dtype the workload
experiment's search often picks on CPUs with native bf16), is read ``--readings`` times for
``--seconds`` each in each of ``--processes`` fresh interpreters started one after the other.
Per dtype it prints each process's median GFLOP/s (2 n^3 per call over the reading's time), the
spread of those medians between processes (max / min - 1, and the standard deviation of their
logs) and the spread within a process (the median over processes of the standard deviation of
the logs of its readings). A between-process spread well above the within-process one is
variation that only separate processes show; it is why a point's rounds (config
``rounds.workers``) and the workload's verification (``workload.verify_processes``) are split
over worker processes (:func:`analysis.stats.worker_scale`). bfloat16 runs only where the CPU has
native bf16 (:func:`lab.capabilities.native_bf16`). A benchmark, not a test.

Usage (repository root, the project's venv)::

    python benchmarks/process_state.py [--processes 8] [--readings 8] [--seconds 0.25] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.fileio import emit, output_args_problem  # noqa: E402

#: Matrix size n of the n x n matmul.
N = 1024

#: What each fresh process runs: per dtype, ``readings`` readings of ``seconds`` each (GFLOP/s).
CHILD = """
import json, sys, time, torch
dtypes, readings, seconds, n = json.loads(sys.argv[1])
torch.set_num_threads(1)
mats = {d: (torch.randn(n, n, dtype=getattr(torch, d)), torch.randn(n, n, dtype=getattr(torch, d))) for d in dtypes}
for d, (a, b) in mats.items():
    for _ in range(5):
        a @ b
out = {d: [] for d in dtypes}
for _ in range(readings):
    for d, (a, b) in mats.items():
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ b
            k += 1
        out[d].append(2 * n**3 * k / (time.perf_counter() - t0) / 1e9)
print(json.dumps(out))
"""


def one_process(dtypes: list[str], readings: int, seconds: float) -> dict[str, list[float]]:
    """One fresh interpreter's readings (GFLOP/s) per dtype."""
    args = json.dumps([dtypes, readings, seconds, N])
    proc = subprocess.run([sys.executable, "-c", CHILD, args], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def spread(per_process: list[list[float]]) -> dict:
    """Per-process medians (GFLOP/s), their spread (max / min - 1, %; sd of logs) and the
    median within-process sd of the logs of the readings."""
    medians = [statistics.median(r) for r in per_process]
    within = statistics.median(statistics.stdev(math.log(x) for x in r) for r in per_process)
    between = statistics.stdev(math.log(m) for m in medians)
    return {
        "medians": medians,
        "range_pct": 100.0 * (max(medians) / min(medians) - 1.0),
        "between": between,
        "within": within,
    }


def report(results: dict[str, dict], processes: int, readings: int, seconds: float) -> str:
    """The markdown table."""
    lines = [
        f"{processes} fresh processes, {readings} readings of {seconds} s each, a {N}^2 matmul on one thread.",
        "",
        "| dtype | per-process median GFLOP/s | range | sd of logs between processes | within a process |",
        "|---|---|---|---|---|",
    ]
    for dtype, s in results.items():
        medians = ", ".join(f"{m:.0f}" for m in s["medians"])
        lines.append(f"| {dtype} | {medians} | {s['range_pct']:.0f}% | {s['between']:.3f} | {s['within']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=8, help="fresh processes, one after the other (>= 2)")
    p.add_argument("--readings", type=int, default=8, help="readings per process and dtype (>= 2)")
    p.add_argument("--seconds", type=float, default=0.25, help="length of one reading (s, > 0)")
    p.add_argument("--markdown", help="also write the table to this file")
    args = p.parse_args(argv)
    if args.processes < 2 or args.readings < 2 or not 0 < args.seconds < math.inf:
        p.error(
            f"--processes {args.processes}, --readings {args.readings}, --seconds {args.seconds}: "
            "allowed: at least 2 processes and 2 readings, seconds > 0 and finite"
        )
    if problem := output_args_problem(args, ("markdown",)):
        p.error(problem)
    from lab.capabilities import native_bf16

    dtypes = ["float32", "bfloat16"] if native_bf16()[0] else ["float32"]
    runs = [one_process(dtypes, args.readings, args.seconds) for _ in range(args.processes)]
    results = {d: spread([r[d] for r in runs]) for d in dtypes}
    emit(report(results, args.processes, args.readings, args.seconds), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
