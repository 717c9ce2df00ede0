"""Between-process spread benchmark: does a point's speedup move between processes more than
its rounds let on?

Each of a few points is measured by ``--processes`` separate processes, one after the other
(``python -m lab.point <name>``, ``--repeats`` interleaved rounds each, one worker). Per
point it reports the per-process median speedups, the standard deviation of their logs
(between processes) and the mean standard error one process's rounds give for its median,
``sqrt(pi / 2) s / sqrt(n)`` (within). A ratio above 1 is variation that only separate
processes show; it is what config ``rounds.workers`` and the analysis's worker scale factor
(:func:`analysis.stats.worker_scale`) account for. This is a benchmark, not a test.

Usage (from the repository root, in the project's venv)::

    python benchmarks/between_processes.py [--processes 4] [--repeats 6] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.fileio import output_args_problem, write_text  # noqa: E402

#: Standard error of a sample median over that of the mean for normal data, sqrt(pi / 2)
#: (the median's asymptotic efficiency 2 / pi; Kendall and Stuart, vol. 1, section 10.10).
MEDIAN_SE = math.sqrt(math.pi / 2)

#: ``(label, experiment, metric, arguments, baseline)``: points of the quick config whose
#: speedups moved between runs on the development VM.
POINTS = (
    ("intraop tiny, 4 threads over 1", "intraop", "samples_per_s", ["--workload", "tiny", "--threads", "4",
     "--iterations", "200"], "threads=1"),
    ("dataloader tensor, 2 workers over 0", "dataloader", "samples_per_s", ["--dataset", "tensor",
     "--num-workers", "2", "--items", "2000"], "num_workers=0"),
    ("gil sleep loop, 2 processes over sequential", "gil", "tasks_per_s", ["--workload", "io", "--mode",
     "processes", "--workers", "2", "--io-iterations", "15"], "mode=sequential"),
    ("gil CPU-bound, 2 processes over sequential", "gil", "tasks_per_s", ["--workload", "cpu", "--mode",
     "processes", "--workers", "2", "--cpu-iterations", "2000000"], "mode=sequential"),
)  # fmt: skip


def measure(experiment: str, args: list[str], baseline: str, repeats: int, out: Path) -> pd.DataFrame:
    """One process's rounds of a point: its metrics.csv."""
    cmd = [sys.executable, "-m", "lab.point", experiment, *args, "--repeats", str(repeats)]
    subprocess.run([*cmd, "--baseline", baseline, "--out", str(out)], cwd=ROOT, check=True, capture_output=True)
    return pd.read_csv(out / "metrics.csv")


def spread(frames: list[pd.DataFrame], metric: str) -> dict:
    """Per-process median speedups, the between-process sd of their logs, the mean within-process
    standard error of a median log ratio, and their ratio."""
    medians, errors = [], []
    for m in frames:
        p = m[m["role"] == "point"].set_index("repeat")[metric]
        b = m[m["role"] == "baseline"].set_index("repeat")[metric]
        logs = np.log((p / b).dropna().to_numpy())
        medians.append(float(np.median(logs)))
        errors.append(MEDIAN_SE * float(np.std(logs, ddof=1)) / math.sqrt(len(logs)))
    between, within = float(np.std(medians, ddof=1)), float(np.mean(errors))
    return {"medians": [math.exp(x) for x in medians], "between": between, "within": within, "ratio": between / within}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--markdown", default=None)
    args = p.parse_args(argv)
    if problem := output_args_problem(args):
        p.error(problem)
    if args.processes < 2 or args.repeats < 2:
        p.error(f"--processes and --repeats must be >= 2 (a spread needs two), got {args.processes} and {args.repeats}")
    lines = [
        f"{args.processes} processes per point, {args.repeats} rounds each, one after the other.",
        "",
        "| point | median speedup per process | sd between processes (log) | se within a process (log) | ratio |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, experiment, metric, point_args, baseline) in enumerate(POINTS):
            frames = [
                measure(experiment, point_args, baseline, args.repeats, Path(tmp) / f"{i}-{k}")
                for k in range(args.processes)
            ]
            s = spread(frames, metric)
            per = ", ".join(f"{x:.3f}" for x in s["medians"])
            lines.append(f"| {label} | {per} | {s['between']:.3f} | {s['within']:.3f} | {s['ratio']:.1f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.markdown:
        write_text(Path(args.markdown), text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
