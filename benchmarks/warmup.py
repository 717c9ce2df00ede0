"""How many untimed calls a window needs after its thread count changes.

Interleaved rounds switch the intra-op thread count before every window (the point and its
baseline use different counts), and the intraop experiment runs ``warmup`` untimed calls after
each switch so that a resized thread pool does not slow the first timed call. Every untimed
call is time outside the measured windows (issue 20: most of the run should be spent measuring),
so the count should be the smallest that removes the transient.

This script switches between 1 and 2 intra-op threads as the rounds do and times each of the
first ``--calls`` calls after every switch on its own. It prints, per workload and thread count,
the median time of call ``k`` over the median of the settled calls (``k`` >= 4): a value near 1
for call ``k`` means ``k`` untimed calls are enough. The workloads and their sizes are the
intraop experiment's (``experiments/intraop/measure.py``, ``make_workload``).

A benchmark, not a test. Usage (repository root, the project's venv)::

    python benchmarks/warmup.py [--switches 30] [--calls 8] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.fileio import output_args_problem, write_text  # noqa: E402

#: Calls from this index on count as settled (the reference of each ratio).
SETTLED_FROM = 4


def measure(workload: str, switches: int, calls: int) -> dict[int, list[list[float]]]:
    """Per thread count (1, 2), per switch, the wall time (s) of each of the first ``calls``
    calls after the switch."""
    from experiments.intraop.measure import Params, make_workload
    from lab.threads import set_torch_threads

    fn, _, _ = make_workload(Params(workload=workload))
    for _ in range(5):
        fn()
    times: dict[int, list[list[float]]] = {1: [], 2: []}
    for _ in range(switches):
        for threads in (1, 2):
            set_torch_threads(threads, inter_op=1)
            run = []
            for _ in range(calls):
                t = time.perf_counter()
                fn()
                run.append(time.perf_counter() - t)
            times[threads].append(run)
    return times


def table(results: dict[str, dict[int, list[list[float]]]], shown: int) -> str:
    """Markdown: per workload and thread count, call ``k`` / settled median for ``k < shown``."""
    head = "| workload | threads | settled call (ms) | " + " | ".join(f"call {k}" for k in range(shown)) + " |"
    lines = [head, "|" + "---|" * (3 + shown)]
    for workload, by_threads in results.items():
        for threads, runs in by_threads.items():
            settled = statistics.median(x for run in runs for x in run[SETTLED_FROM:])
            ratios = [statistics.median(run[k] for run in runs) / settled for k in range(shown)]
            cells = " | ".join(f"{r:.3f}" for r in ratios)
            lines.append(f"| {workload} | {threads} | {settled * 1e3:.3f} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--switches", type=int, default=30, help="thread-count switches per workload (each way)")
    ap.add_argument("--calls", type=int, default=8, help=f"calls timed after each switch (> {SETTLED_FROM})")
    ap.add_argument(
        "--workloads", nargs="+", default=["matmul", "mlp", "tiny"], choices=["matmul", "matmul_bf16", "mlp", "tiny"]
    )
    ap.add_argument("--markdown", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    if problem := output_args_problem(args):
        ap.error(problem)
    if args.calls <= SETTLED_FROM or args.switches < 1:
        ap.error(f"--calls must be > {SETTLED_FROM} and --switches >= 1")
    results = {w: measure(w, args.switches, args.calls) for w in args.workloads}
    out = table(results, SETTLED_FROM)
    print(out, end="")
    if args.markdown:
        write_text(args.markdown, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
