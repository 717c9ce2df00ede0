"""Noise against window length: how long a measured window should last to reach an interval
target in the least time.

A point's speedup is the median of per-round ratios of two windows measured side by side; its
95% interval narrows as rounds accumulate, about as ``sigma(L) / sqrt(n)`` where ``sigma(L)`` is
the spread of one round's ratio at window length ``L``. Short windows are cheap but noisy (the
timer, the scheduler's ticks, a host that slows a vCPU for tens of milliseconds at a time);
long windows are steadier but each round costs more. Every round also pays a fixed overhead
``c`` outside its windows (the sampler's edge readings, the capacity probe, a warm-up). The time
a point needs to reach a half-width target ``t`` is then about
``n(L) (2 L + c)`` rounds' worth, with ``n(L) = (z sigma(L) / t)^2`` (``z`` = 1.96); this script
measures ``sigma(L)`` (as the relative IQR of the per-round ratio, divided by 1.349 to estimate a
standard deviation robustly) for several ``L``, on the lab's own points, and prints that time.

Points: the gil experiment's CPU-bound work on 2 processes against sequential (the tasks'
iterations scaled to the window length), and the intraop experiment's 1024^2 matmul on 2
threads against 1 (iterations scaled). Each length gets ``--rounds`` rounds in one job.

A benchmark, not a test. Usage (repository root, the project's venv)::

    python benchmarks/window_length.py [--lengths 0.05 0.1 0.2 0.4 0.8] [--rounds 24] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.fileio import emit, output_args_problem  # noqa: E402

#: 95% two-sided normal quantile.
Z = 1.96


def _calibrate(experiment: str, args: list[str], work: Path) -> float:
    """Seconds one window of ``args`` takes (one quick round)."""
    out = work / "calibrate"
    cmd = [sys.executable, "-m", "lab.point", experiment, *args, "--repeats", "2", "--out", str(out)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    import pandas as pd

    return float(pd.read_csv(out / "metrics.csv")["wall_s"].median())


def measure(kind: str, length: float, rounds: int, probe_ms: float, work: Path) -> dict:
    """One job of ``rounds`` rounds at window length ``length`` (s): the per-round ratios' spread
    and the job's overhead per round."""
    import pandas as pd

    if kind == "gil processes / sequential":
        experiment, metric = "gil", "tasks_per_s"
        base = ["--workload", "cpu", "--mode", "processes", "--workers", "2", "--warmup", "1"]
        per = _calibrate(experiment, [*base, "--cpu-iterations", "1000000", "--mode", "sequential"], work)
        # a sequential window runs 2 tasks: iterations so that the point's window lasts `length`
        iterations = max(10_000, int(1_000_000 * 2 * length / per))
        args, baseline = [*base, "--cpu-iterations", str(iterations)], ["mode=sequential"]
    else:
        experiment, metric = "intraop", "gflop_per_s"
        base = ["--workload", "matmul", "--threads", "2", "--warmup", "1"]
        per = _calibrate(experiment, [*base, "--iterations", "4", "--threads", "1"], work)
        iterations = max(1, int(4 * 2 * length / per))
        args, baseline = [*base, "--iterations", str(iterations)], ["threads=1"]
    out = work / f"{kind.split()[0]}-{length}"
    cmd = [
        sys.executable,
        "-m",
        "lab.point",
        experiment,
        *args,
        "--repeats",
        str(rounds),
        "--rounds-probe-ms",
        str(probe_ms),
    ]
    cmd += ["--baseline", *baseline, "--out", str(out)]
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    job_s = time.perf_counter() - t
    m = pd.read_csv(out / "metrics.csv")
    p = m[m["role"] == "point"].set_index("repeat")
    b = m[m["role"] == "baseline"].set_index("repeat")
    ratio = (p[metric] / b[metric]).dropna()
    q1, q3 = ratio.quantile([0.25, 0.75])
    sigma = (q3 - q1) / 1.349 / ratio.median()
    span = m["window_end_unix"].max() - m["window_start_unix"].min()
    overhead = (span - m["wall_s"].sum()) / len(ratio)
    window = float(m["wall_s"].median())
    return {
        "kind": kind,
        "target_s": length,
        "window_s": window,
        "rounds": len(ratio),
        "sigma_pct": 100 * sigma,
        "overhead_per_round_s": overhead,
        "job_s": job_s,
    }


def time_to_target(row: dict, target_pct: float) -> float:
    """Seconds of rounds a point needs for a 95% half-width of ``target_pct`` % (the module docstring)."""
    n = max(6.0, (Z * row["sigma_pct"] / target_pct) ** 2)
    return n * (2 * row["window_s"] + row["overhead_per_round_s"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.4, 0.8])
    p.add_argument("--rounds", type=int, default=24)
    p.add_argument("--probe-ms", type=float, default=20.0)
    p.add_argument("--targets", type=float, nargs="+", default=[5.0, 10.0], help="95%% half-widths, %% of the estimate")
    p.add_argument("--markdown", default=None)
    args = p.parse_args(argv)
    if problem := output_args_problem(args):
        p.error(problem)
    finite = all(math.isfinite(v) for v in (*args.lengths, args.probe_ms, *args.targets))
    if not finite or min(args.lengths) <= 0 or args.rounds < 2 or args.probe_ms < 0 or min(args.targets) <= 0:
        p.error(
            "--lengths must be finite and > 0 s, --rounds >= 2, --probe-ms finite and >= 0,"
            " --targets finite and > 0 (%)"
        )
    rows = []
    with tempfile.TemporaryDirectory(prefix="windows-") as tmp:
        for kind in ("gil processes / sequential", "intraop matmul 2 threads / 1"):
            for length in args.lengths:
                rows.append(measure(kind, length, args.rounds, args.probe_ms, Path(tmp)))
                print(rows[-1], file=sys.stderr)
    head = "| point | window (s) | rounds | spread of one round's ratio | overhead per round (s) |"
    head += "".join(f" time to +-{t:g}% (s) |" for t in args.targets)
    lines = [head, "|" + "---|" * (5 + len(args.targets))]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['window_s']:.3f} | {r['rounds']} | {r['sigma_pct']:.1f}% |"
            + f" {r['overhead_per_round_s']:.3f} |"
            + "".join(f" {time_to_target(r, t):.1f} |" for t in args.targets)
        )
    text = "\n".join(lines) + "\n"
    emit(text, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
