"""How a vCPU's speed moves from one millisecond to the next: the host's fast and slow phases.

The capacity probe (:mod:`lab.probe`) reads a vCPU's speed in loops of a few milliseconds and a
measured window lasts 0.1-1 s. Whether a short reading stands for the window beside it depends on
how the host's speed moves at that time scale: a host that switches a vCPU between a fast and a
slow state every few milliseconds (another tenant on its SMT sibling, the host's own time
slicing) gives short readings that land in one state or the other, and parallel windows whose
tasks end unevenly, while a window averages over many switches.

How: one worker process per CPU of this process's affinity, pinned to it (``python -I -S``,
standard library only), runs the seed article's counting loop (``for i in range(n): i = i + 1``)
in chunks of ``--chunk-ms`` at the CPU's fast speed for ``--seconds``, recording each chunk's
start and duration on the shared monotonic clock (``time.perf_counter``), first each CPU alone
(the others idle), then all at once. Per CPU and mode: the fast level (iterations/s of the 10th
percentile chunk, the speed the vCPU reaches; the faster of its two modes', since a vCPU can run
slow for the whole of one), the median speed over it, the share of time in
slow chunks (a chunk is slow when it took more than ``--slow`` times the fast level's duration),
the slow chunks' speed over the fast level, and the median length of the slow and of the fast
phases (runs of consecutive chunks in one state, ms; a phase shorter than a chunk reads as one
chunk). With all CPUs busy it also gives how often two CPUs were in the same state at the same
instant, against the share expected were their states independent (``p0 p1 + (1-p0)(1-p1)``):
well above it, the host slows the vCPUs together (frequency, a shared core); near it, each vCPU
has a slow state of its own. Last, for each window length of ``--windows``, the cores delivered
with all busy read over windows of that length: split evenly (the CPU count times the slowest
CPU's speed in the window, as the capacity probe's all-CPU level and a window of N processes
are limited by the last to end) and added (every CPU's speed), over one CPU's speed alone read
the same way. Were a vCPU's slow bursts short and independent, the slowest CPU of a short window
would often be in one and that of a long window seldom: the split figure would grow with the
length, and a probe whose loops are much shorter than the windows it stands beside would read
the machine at its own length, not at theirs (measured on the AVX2 EPYC VM, docs/benchmarks.md:
it did not).

A benchmark, not a test; run it with nothing else running. Usage (repository root, the project's
venv)::

    python benchmarks/host_phases.py [--seconds 8] [--chunk-ms 0.5] [--slow 1.4] [--windows 5 20 200 1000]
        [--markdown out.md]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from lab.fileio import emit, output_args_problem  # noqa: E402

#: The worker: pinned to CPU ``argv[1]``, calibrates a chunk to ``argv[3]`` ms at its fastest
#: (the shortest of 40 trial chunks), waits for the start time ``argv[4]`` (perf_counter s), then
#: runs chunks until ``argv[2]`` s have passed and prints ``{"n": iterations, "chunks": [[start,
#: seconds], ...]}``.
_WORKER = r"""
import json, os, sys, time
cpu, seconds, chunk_ms, start = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
os.sched_setaffinity(0, {cpu})
clock = time.perf_counter
def count(n):
    for i in range(n):
        i = i + 1
for _ in range(16):
    count(1000)
trial = []
for _ in range(40):
    t = clock(); count(20000); trial.append(clock() - t)
n = max(1000, int(20000 * chunk_ms / 1000 / min(trial)))
while clock() < start:
    pass
out, end = [], start + seconds
while (t := clock()) < end:
    count(n)
    out.append((t, clock() - t))
print(json.dumps({"n": n, "chunks": out}))
"""


def record(cpus: list[int], seconds: float, chunk_ms: float) -> dict[int, dict]:
    """Each of ``cpus`` runs chunks at once for ``seconds``: ``{cpu: {"n", "chunks"}}``."""
    import time

    start = time.perf_counter() + 0.3 + 0.05 * len(cpus)  # every worker started and calibrated by then
    args = [str(seconds), str(chunk_ms), repr(start)]
    procs = {
        c: subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WORKER, str(c), *args], stdout=subprocess.PIPE, text=True
        )
        for c in cpus
    }
    out = {}
    for c, p in procs.items():
        text, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"the worker on CPU {c} exited with {p.returncode}")
        out[c] = json.loads(text)
    return out


def states(chunks: list, slow: float, fast: float) -> list[bool]:
    """Each chunk's state (True: slow): longer than ``slow`` times ``fast`` (s, the fast level's
    chunk)."""
    return [d > slow * fast for _, d in chunks]


def phases(chunks: list, slow_flags: list[bool]) -> dict[bool, list[float]]:
    """Lengths (ms) of the runs of consecutive chunks in one state, by state (True: slow)."""
    runs: dict[bool, list[float]] = {True: [], False: []}
    begin = 0
    for i in range(1, len(chunks) + 1):
        if i == len(chunks) or slow_flags[i] != slow_flags[begin]:
            t0, _ = chunks[begin]
            t1, d1 = chunks[i - 1]
            runs[slow_flags[begin]].append(1000 * (t1 + d1 - t0))
            begin = i
    return runs


def fast_level(rec: dict) -> float:
    """One CPU's fast level in a record (M iterations/s): the speed of its 10th-percentile chunk."""
    return rec["n"] / statistics.quantiles([d for _, d in rec["chunks"]], n=10)[0] / 1e6


def describe(rec: dict, slow: float, fast_mips: float) -> dict:
    """One CPU's row: fast level, median speed, slow share and level, phase lengths, judged
    against ``fast_mips`` (M iterations/s: the faster of the CPU's two modes', since a vCPU may
    run slow for the whole of one)."""
    chunks, n = rec["chunks"], rec["n"]
    fast = n / (fast_mips * 1e6)
    flags = states(chunks, slow, fast)
    durations = [d for _, d in chunks]
    slow_d = [d for d, f in zip(durations, flags) if f]
    runs = phases(chunks, flags)
    return {
        "chunks": len(chunks),
        "fast_mips": fast_mips,
        "median_mips": n / statistics.median(durations) / 1e6,
        "median_over_fast": fast / statistics.median(durations),
        "slow_share": sum(slow_d) / sum(durations),
        "slow_over_fast": fast / statistics.median(slow_d) if slow_d else None,
        "slow_phase_ms": statistics.median(runs[True]) if runs[True] else None,
        "fast_phase_ms": statistics.median(runs[False]) if runs[False] else None,
    }


def together(a: dict, b: dict, slow: float, fast: tuple[float, float]) -> tuple[float, float]:
    """``(agreement, expected)``: how often CPU ``a``'s chunk and the chunk CPU ``b`` was running
    at its start were in the same state (judged against ``fast``, the two CPUs' fast levels,
    M iterations/s), and that share were the two independent."""
    fa = states(a["chunks"], slow, a["n"] / (fast[0] * 1e6))
    fb = states(b["chunks"], slow, b["n"] / (fast[1] * 1e6))
    starts = [t for t, _ in b["chunks"]]
    same = n = 0
    for (t, _), s in zip(a["chunks"], fa):
        j = bisect.bisect_right(starts, t) - 1
        if j < 0:
            continue
        n += 1
        same += s == fb[j]
    pa, pb = sum(fa) / len(fa), sum(fb) / len(fb)
    return same / max(n, 1), pa * pb + (1 - pa) * (1 - pb)


def window_rates(rec: dict, length_s: float, t0: float, t1: float) -> np.ndarray:
    """One CPU's speed (iterations/s) over each consecutive window of ``length_s`` from ``t0`` to
    ``t1``: the iterations done inside it, each chunk's spread evenly over its duration."""
    starts = np.array([t for t, _ in rec["chunks"]])
    durations = np.array([d for _, d in rec["chunks"]])
    edges = np.arange(t0, t1 + 1e-12, length_s)
    i = np.clip(np.searchsorted(starts, edges, side="right") - 1, 0, len(starts) - 1)
    done = rec["n"] * (i + np.clip((edges - starts[i]) / durations[i], 0.0, 1.0))
    return np.diff(done) / length_s


def delivered_by_length(alone: dict[int, dict], busy: dict[int, dict], lengths_ms: list[float]) -> list[dict]:
    """Cores delivered with all CPUs busy, read over windows of each length: ``split``, the CPU
    count times the slowest CPU's speed in the window (work split evenly over the CPUs, as the
    capacity probe's all-CPU level and a window of N processes are limited by the last to end),
    and ``summed``, every CPU's speed in the window added; each over the mean of the CPUs' median
    speeds alone over windows of that length. Median and quartiles over the windows."""
    rows = []
    for ms in lengths_ms:
        length = ms / 1000
        ref = float(np.mean([np.median(window_rates(r, length, *_span([r]))) for r in alone.values()]))
        t0, t1 = _span(list(busy.values()))
        rates = np.array([window_rates(r, length, t0, t1) for r in busy.values()])
        if rates.shape[1] < 4:
            continue
        split = len(busy) * rates.min(axis=0) / ref
        summed = rates.sum(axis=0) / ref
        rows.append({"ms": ms, "windows": rates.shape[1], "split": np.percentile(split, [50, 25, 75])})
        rows[-1]["summed"] = np.percentile(summed, [50, 25, 75])
    return rows


def _span(recs: list[dict]) -> tuple[float, float]:
    """The time every record in ``recs`` covers: the latest first start to the earliest last end."""
    t0 = max(r["chunks"][0][0] for r in recs)
    t1 = min(r["chunks"][-1][0] + r["chunks"][-1][1] for r in recs)
    return t0, t1


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(
    rows: list[tuple[str, int, dict]],
    pairs: list[tuple[int, int, float, float]],
    delivered: float | None,
    ncpu: int,
    by_length: list[dict] = (),
) -> str:
    """The markdown report: one row per mode and CPU, then the pairs' agreement, the cores
    ``delivered`` with all busy (the sum over CPUs of each one's median speed over its own alone)
    and, per window length, :func:`delivered_by_length`'s rows."""
    lines = [
        "| mode | CPU | chunks | fast level (M it/s) | median speed / fast | time in slow chunks"
        " | slow speed / fast | slow phase, median (ms) | fast phase, median (ms) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, cpu, r in rows:
        lines.append(
            f"| {mode} | {cpu} | {r['chunks']} | {r['fast_mips']:.1f} | {r['median_over_fast']:.2f}"
            f" | {100 * r['slow_share']:.0f}% | {_fmt(r['slow_over_fast'], '.2f')}"
            f" | {_fmt(r['slow_phase_ms'], '.1f')} | {_fmt(r['fast_phase_ms'], '.1f')} |"
        )
    for a, b, agree, expected in pairs:
        lines.append(
            f"\nAll busy, CPUs {a} and {b} in the same state at the same instant: {100 * agree:.0f}% of"
            f" chunks, against {100 * expected:.0f}% were their states independent."
        )
    if delivered is not None:
        lines.append(
            f"\nAll {ncpu} CPUs busy delivered {delivered:.2f} cores: the sum over the CPUs of each one's median"
            " speed over its own median speed alone."
        )
    if by_length:
        lines += [
            "\nCores delivered with all busy, read over windows of each length (median, IQR over the windows):"
            " work split evenly (the CPU count times the slowest CPU's speed, as the probe's all-CPU level"
            " reads it) and every CPU's speed added, over one CPU's speed alone.\n",
            "| window (ms) | windows | split evenly | added |",
            "|---|---|---|---|",
        ]
        for r in by_length:
            (s50, s25, s75), (a50, a25, a75) = r["split"], r["summed"]
            lines.append(
                f"| {r['ms']:g} | {r['windows']} | {s50:.2f} ({s25:.2f}-{s75:.2f}) | {a50:.2f} ({a25:.2f}-{a75:.2f}) |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=8.0, help="how long each mode runs its chunks (s)")
    p.add_argument("--chunk-ms", type=float, default=0.5, help="one chunk's length at the fast speed (ms)")
    p.add_argument("--slow", type=float, default=1.4, help="a chunk this many times the fast level's is slow")
    p.add_argument(
        "--windows", type=float, nargs="+", default=[5.0, 20.0, 200.0, 1000.0], help="window lengths to read (ms)"
    )
    p.add_argument("--markdown", default=None)
    args = p.parse_args(argv)
    if problem := output_args_problem(args):
        p.error(problem)
    for bad, what in (
        (not 0 < args.seconds < math.inf, f"--seconds {args.seconds:g}: allowed: above 0, finite"),
        (not 0.05 <= args.chunk_ms <= 100, f"--chunk-ms {args.chunk_ms:g}: allowed: 0.05-100 (ms)"),
        (
            not 1 < args.slow < math.inf,
            f"--slow {args.slow:g}: allowed: above 1, finite (times the fast level's chunk)",
        ),
        (
            not all(args.chunk_ms <= w <= 1000 * args.seconds / 4 for w in args.windows),
            f"--windows {' '.join(f'{w:g}' for w in args.windows)}: allowed: from --chunk-ms to a quarter of"
            f" --seconds ({args.chunk_ms:g}-{250 * args.seconds:g} ms)",
        ),
    ):
        if bad:
            p.error(what)
    cpus = sorted(os.sched_getaffinity(0))
    solo = {c: record([c], args.seconds, args.chunk_ms)[c] for c in cpus}
    recs = record(cpus, args.seconds, args.chunk_ms) if len(cpus) > 1 else {}
    # each CPU's fast level: the faster of its two modes' (a vCPU can run slow for a whole mode)
    fast = {c: max(fast_level(r) for r in (solo[c], recs.get(c)) if r) for c in cpus}
    alone = {c: describe(solo[c], args.slow, fast[c]) for c in cpus}
    rows = [("alone", c, r) for c, r in alone.items()]
    pairs, delivered, by_length = [], None, []
    if recs:
        busy = {c: describe(recs[c], args.slow, fast[c]) for c in cpus}
        rows += [("all busy", c, r) for c, r in busy.items()]
        pairs = [(a, b, *together(recs[a], recs[b], args.slow, (fast[a], fast[b]))) for a, b in zip(cpus, cpus[1:])]
        delivered = sum(busy[c]["median_mips"] / alone[c]["median_mips"] for c in cpus)
        by_length = delivered_by_length(solo, recs, args.windows)
    emit(table(rows, pairs, delivered, len(cpus), by_length), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
