"""The capacity probe's noise against its loop length: how short ``rounds.probe_ms`` may be.

Every round of every job pays the probe (:mod:`lab.probe`): ``probe_ms`` on one CPU and again on
all of them, outside the measured windows. A job uses the median of its rounds' readings (the
speedup on whole cores divides by the job's median share of a core, analysis/stats.py), so what
matters is how far a job-sized group of short readings lands from the same group of long ones,
not how noisy one reading is.

How: one :class:`~lab.probe.Probe` per loop length, all started at once; readings taken from
each in turn (5 ms, 10 ms, 20 ms, 5 ms, ...) for ``--seconds``, so that the machine's drift
reaches every length alike. Per length it prints the readings, the wall time of one reading, the
delivered CPUs' median and IQR, the one-CPU rate's IQR over its median, and, over consecutive
groups of ``--group`` readings (a job's rounds), how far each group's median delivered CPUs lies
from the same group's median at the longest length (median and largest absolute difference).

A benchmark, not a test. Usage (repository root, the project's venv, nothing else running)::

    python benchmarks/probe_noise.py [--lengths 2 5 10 20] [--seconds 60] [--group 12] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from lab.fileio import emit, output_args_problem  # noqa: E402
from lab.probe import Probe  # noqa: E402


def read(lengths: list[float], seconds: float) -> dict[float, list[dict]]:
    """Readings of one probe per loop length (ms), taken in turn for ``seconds``."""
    ncpu = len(os.sched_getaffinity(0))
    probes = {ms: Probe(ncpu, ms) for ms in lengths}
    out: dict[float, list[dict]] = {ms: [] for ms in lengths}
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for ms, p in probes.items():
                out[ms].append(p.measure())
    finally:
        for p in probes.values():
            p.close()
    return out


def summarise(readings: dict[float, list[dict]], group: int) -> list[dict]:
    """Per length: its noise and how far its job-sized medians lie from the longest length's."""
    ref_ms = max(readings)
    n = min(len(r) for r in readings.values()) // group * group
    ref = np.array([r["delivered_cpus"] for r in readings[ref_ms][:n]]).reshape(-1, group)
    rows = []
    for ms, rs in sorted(readings.items()):
        delivered = np.array([r["delivered_cpus"] for r in rs])
        single = np.array([r["capacity_1cpu_per_s"] for r in rs])
        q1, q2, q3 = np.percentile(delivered, [25, 50, 75])
        s1, s2, s3 = np.percentile(single, [25, 50, 75])
        groups = delivered[:n].reshape(-1, group)
        diff = np.abs(np.median(groups, axis=1) - np.median(ref, axis=1))
        rows.append(
            {
                "probe_ms": ms,
                "readings": len(rs),
                "reading_ms": 1000 * float(np.median([r["probe_s"] for r in rs[1:]])),
                "delivered": (q2, q1, q3),
                "single_iqr_pct": 100 * (s3 - s1) / s2,
                "groups": len(groups),
                "group_diff": (float(np.median(diff)), float(diff.max())) if ms != ref_ms else (0.0, 0.0),
            }
        )
    return rows


def table(rows: list[dict], group: int) -> str:
    """The markdown table of :func:`summarise`'s rows."""
    ref = max(r["probe_ms"] for r in rows)
    lines = [
        f"| loop (ms) | readings | one reading (ms) | delivered CPUs, median (IQR) | one CPU, IQR / median"
        f" | groups of {group}: median delivered off the {ref:g} ms loop's, median / largest |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        q2, q1, q3 = r["delivered"]
        med, top = r["group_diff"]
        off = "(reference)" if r["probe_ms"] == ref else f"{med:.3f} / {top:.3f} ({r['groups']} groups)"
        lines.append(
            f"| {r['probe_ms']:g} | {r['readings']} | {r['reading_ms']:.1f} | {q2:.2f} ({q1:.2f}-{q3:.2f})"
            f" | {r['single_iqr_pct']:.1f}% | {off} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=float, nargs="+", default=[2.0, 5.0, 10.0, 20.0], help="loop lengths (ms)")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to take readings (s)")
    p.add_argument("--group", type=int, default=12, help="readings per job-sized group (a job's rounds)")
    p.add_argument("--markdown", default=None)
    args = p.parse_args(argv)
    if problem := output_args_problem(args):
        p.error(problem)
    if min(args.lengths) <= 0 or len(set(args.lengths)) < 2:
        p.error(f"--lengths needs at least two different loop lengths above 0 ms, got {args.lengths}")
    if args.seconds <= 0 or args.group < 2:
        p.error(f"--seconds must be > 0 and --group >= 2, got {args.seconds:g} and {args.group}")
    readings = read(args.lengths, args.seconds)
    if min(len(r) for r in readings.values()) < 2 * args.group:
        p.error(f"fewer than {2 * args.group} readings per length in {args.seconds:g} s: take more --seconds")
    text = table(summarise(readings, args.group), args.group)
    emit(text, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
