"""The capacity probe inside the lab's own jobs: its loops placed by the kernel or pinned, a late start forgiven or not.

Why: a probe reading is only worth its noise, and the readings of real jobs were far noisier than
those of a probe alone on an idle machine (quick run x1-1, AVX2 EPYC VM: a quarter of 436
readings under 1.5 of 2 CPUs, jit's ``mode=script`` job at a median of 1.05). Their spans showed
both loops of the all-CPU level on one CPU, and, pinned, one loop starting 1.4-1.6 ms late.
:data:`lab.probe.PIN` pins each probe worker to a CPU of its own and
:data:`lab.probe.LATE_START_FORGIVEN_S` does not count up to 2 ms of a loop's late start; this script
measures what each changes, in the jobs where it happened.

How: the same ``lab.point`` jobs (the quick config's settings: 3 worker processes, 5 ms probe
loops, the sampler at 40 Hz), each run ``--reps`` times in each of :data:`SETTINGS`, the settings
in turn and their order reversed every other repetition, so drift reaches all alike. Per
setting it prints the readings' delivered
CPUs (median, IQR), the share of readings under 75% and over 110% of the CPUs, and each point's
median over its jobs of the job's median reading.

A benchmark, not a test. Usage (repository root, the project's venv, nothing else running)::

    python benchmarks/probe_pin.py [--reps 2] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lab.fileio import emit, output_args_problem  # noqa: E402

#: Jobs of the quick run whose readings were the noisiest (x1-1), as ``lab.point`` arguments.
POINTS = {
    "jit cnn script": "jit --model cnn --mode script --iterations 80 --warmup-calls 10 --baseline mode=eager",
    "intraop matmul 1 thread": "intraop --workload matmul --threads 1 --iterations 8",
    "intraop tiny 4 threads": "intraop --workload tiny --threads 4 --iterations 200 --baseline threads=1",
    "gil cpu processes": "gil --workload cpu --mode processes --workers 2 --cpu-iterations 4000000"
    " --baseline mode=sequential",
}

#: ``(name, PIN, LATE_START_FORGIVEN_S)``: the probe before 2026-12-06, pinned only, and the probe now.
SETTINGS = (
    ("placed by the kernel, a late start counted (before)", False, 0.0),
    ("pinned, a late start counted", True, 0.0),
    ("pinned, up to 2 ms of a late start forgiven (now)", True, 0.002),
)

#: The options every job gets: the quick config's rounds, probe and sampler.
COMMON = "--repeats 6 --rounds-workers 3 --rounds-probe-ms 5 --sample-hz 40"


def run_job(args: str, pin: bool, forgiven_s: float, out: Path) -> pd.DataFrame:
    """One ``lab.point`` job with :data:`lab.probe.PIN` set to ``pin`` and
    :data:`lab.probe.LATE_START_FORGIVEN_S` to ``forgiven_s``; one row per round (one reading a round):
    ``delivered_cpus`` and ``probe_s`` (the reading's wall time, s).

    Raises:
        RuntimeError: where the job fails (its output's tail in the message).
    """
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import lab.probe; lab.probe.PIN = {pin}; "
        f"lab.probe.LATE_START_FORGIVEN_S = {forgiven_s!r}; "
        "from lab.point import main; raise SystemExit(main(sys.argv[1:]))"
    )
    argv = [sys.executable, "-c", code, *args.split(), *COMMON.split(), "--out", str(out)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[3:])} failed ({done.returncode}): {done.stderr[-800:]}")
    rows = pd.read_csv(out / "metrics.csv")
    return rows.groupby("repeat")[["delivered_cpus", "probe_s"]].first()


def measure(reps: int) -> pd.DataFrame:
    """``reps`` jobs of every point per setting, the settings' order reversed every other
    repetition; one row per reading: ``point``, ``setting``, ``job`` (its number), ``delivered_cpus``,
    ``probe_s``."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="probe-pin-") as tmp:
        for rep in range(reps):
            for name, args in POINTS.items():
                for setting, pin, forgiven_s in SETTINGS if rep % 2 == 0 else SETTINGS[::-1]:
                    out = Path(tmp) / f"{len(rows)}"
                    for r in run_job(args, pin, forgiven_s, out).to_dict("records"):
                        rows.append({"point": name, "setting": setting, "job": rep, **r})
    return pd.DataFrame(rows)


def table(readings: pd.DataFrame, ncpu: int) -> str:
    """Markdown: per setting, the readings' spread; per point, the median of its job medians."""
    lines = [
        f"| probe | readings | delivered CPUs of {ncpu}, median (IQR) | under {0.75 * ncpu:g} | over {1.1 * ncpu:g}"
        " | one reading (ms) | per point: median of the jobs' medians |",
        "|---|---|---|---|---|---|---|",
    ]
    for setting, g in readings.groupby("setting", sort=False):
        d = g["delivered_cpus"].to_numpy()
        q1, q2, q3 = np.percentile(d, [25, 50, 75])
        per = g.groupby(["point", "job"])["delivered_cpus"].median().groupby("point").median()
        points = "; ".join(f"{p} {v:.2f}" for p, v in per.items())
        lines.append(
            f"| {setting} | {len(d)} | {q2:.2f} ({q1:.2f}-{q3:.2f})"
            f" | {100 * np.mean(d < 0.75 * ncpu):.0f}% | {100 * np.mean(d > 1.1 * ncpu):.0f}%"
            f" | {1000 * g['probe_s'].median():.1f} | {points} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=2, help="jobs of every point per setting (>= 1)")
    p.add_argument("--markdown", default=None)
    args = p.parse_args(argv)
    if problem := output_args_problem(args):
        p.error(problem)
    if args.reps < 1:
        p.error(f"--reps must be >= 1, got {args.reps}")
    ncpu = len(os.sched_getaffinity(0))
    if ncpu < 2:
        p.error(f"the all-CPU level needs at least 2 available CPUs, this process has {ncpu}")
    emit(table(measure(args.reps), ncpu), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
