"""GIL experiment: where a processes point's time went, measured from its work spans.

Every task records a span per chunk of its loop (:mod:`lab.pytasks`: wall start and end on the
window's clock, the thread's CPU time inside), and so does the sequential baseline measured in
the same rounds, with chunks of the same size. Three measured parts of a processes point's
shortfall from the CPUs it could use, each a median over its rounds:

* ``chunk_ratio``: the median CPU time of a task's chunk while the processes ran over that of a
  chunk of the sequential baseline (1: each process ran its loop as fast as the sequential loop
  did; 1.06: 6% slower side by side, so the CPUs delivered less each, or the tasks competed for
  something they share). CPU time, not wall time: more processes than CPUs wait for one, which
  ``on_cpu_pct`` (their chunks' CPU time over their wall time) gives;
* ``outside_pct``: the share of the window before the first chunk started and after the last one
  ended (starting and joining the processes, the harness's pipes), % of the window;
* ``imbalance_pct``: from the first task's end to the last task's end, % of the window (a CPU
  idle while the last task runs: with 2 tasks on 2 CPUs, half of it is capacity lost).

Why: on the AVX2 EPYC VM the lab's 2 processes read 1.54-1.88x of sequential while pyperf read
1.70-1.98x and the capacity probe 1.9-2.0 delivered CPUs in the same rounds; by chunk, the
processes ran each chunk in 0.97-1.10x the sequential loop's CPU time in six quick and default
runs, and the window outside the tasks was about 3% (docs/benchmarks.md, 2026-12-05 late night).
The probe's 5 ms loops, taken before each round, do not see what the tasks meet while they run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.findings import transfer_case
from analysis.timelines import select
from lab.workspeed import unit_ms


def _of(df: pd.DataFrame | None, point: dict, role: str) -> pd.DataFrame:
    """``df``'s rows of ``point`` and ``role`` in every round (empty where there are none); a key
    ``df`` lacks (results from before the ``interpreter`` column) does not select."""
    if df is None or df.empty or "role" not in df:
        return pd.DataFrame()
    return select(df, {k: v for k, v in point.items() if k in df}, repeat=None, role=role)


def shortfall(spans: pd.DataFrame | None, replicates: pd.DataFrame | None, point: dict) -> dict | None:
    """Where ``point``'s window went (see the module docstring).

    Args:
        spans: spans.csv rows (``role``, ``repeat``, ``actor``, ``start_s``, ``end_s`` in s from
            the window's start), the point's and its baseline's.
        replicates: replicates.csv rows (``role``, ``repeat``, ``wall_s``, the window's length in s).
        point: the point's ``interpreter``, ``workload``, ``mode`` and ``workers``.

    Returns:
        ``chunk_ratio``, ``chunk_ms`` and ``baseline_chunk_ms`` (median CPU time of a chunk, ms;
        wall time where a span has no ``cpu_s``), ``on_cpu_pct``, ``outside_pct`` and
        ``imbalance_pct`` (0-100), ``rounds`` (windows with spans), and round by round the time
        a chunk took on the point's slowest worker over the baseline's (:func:`_slowest_ratios`):
        ``slowest_ratio`` (median), ``slowest_max``, ``slow_rounds`` (over :data:`SLOW`) of
        ``timed_rounds``; None where the point or its baseline recorded no chunk.
    """
    p, b = _of(spans, point, "point"), _of(spans, point, "baseline")
    if p.empty or b.empty:
        return None
    time = "cpu_s" if "cpu_s" in p and p["cpu_s"].notna().all() and b["cpu_s"].notna().all() else None
    chunk = float(p[time].median() if time else (p["end_s"] - p["start_s"]).median())
    base = float(b[time].median() if time else (b["end_s"] - b["start_s"]).median())
    wall_sum = float((p["end_s"] - p["start_s"]).sum())
    on_cpu = 100.0 * float(p["cpu_s"].sum()) / wall_sum if time and wall_sum > 0 else np.nan
    windows = _of(replicates, point, "point")
    wall = windows.drop_duplicates("repeat").set_index("repeat")["wall_s"] if not windows.empty else pd.Series()
    outside, imbalance = [], []
    for repeat, r in p.groupby("repeat"):
        w = float(wall.get(repeat, np.nan))
        if not w > 0:
            continue
        ends = r.groupby("actor")["end_s"].max()
        outside.append(100.0 * (r["start_s"].min() + w - ends.max()) / w)
        imbalance.append(100.0 * (ends.max() - ends.min()) / w)
    slowest = _slowest_ratios(p, b) if time else np.array([])
    return {
        "slowest_ratio": float(np.median(slowest)) if len(slowest) else np.nan,
        "slowest_max": float(slowest.max()) if len(slowest) else np.nan,
        "slow_rounds": int((slowest > SLOW).sum()),
        "timed_rounds": len(slowest),
        "chunk_ratio": chunk / base if base > 0 else np.nan,
        "chunk_ms": 1000.0 * chunk,
        "baseline_chunk_ms": 1000.0 * base,
        "on_cpu_pct": on_cpu,
        "outside_pct": float(np.median(outside)) if outside else np.nan,
        "imbalance_pct": float(np.median(imbalance)) if imbalance else np.nan,
        "rounds": len(outside),
    }


#: A round whose slower process took more than this many times as long for a chunk as the sequential
#: loop did in the same round is one the machine slowed inside the window (the finding counts them).
SLOW = 1.15


def _slowest_ratios(p: pd.DataFrame, b: pd.DataFrame) -> np.ndarray:
    """Per round with both, the time a chunk took on the point's slowest worker over the
    baseline's (:func:`lab.workspeed.unit_ms` of each side's spans in that round)."""
    units = [{rep: unit_ms(g.to_dict("records")) for rep, g in side.groupby("repeat")} for side in (p, b)]
    ratios = [units[0][r] / units[1][r] for r in units[0] if units[1].get(r, 0) > 0]
    return np.array([x for x in ratios if np.isfinite(x)], dtype=float)


def line(parts: dict, workers: int, what: str) -> str:
    """The finding: ``CPU-bound Python, where 2 processes' time went: each chunk of their loop
    took 1.06x the CPU time of the sequential loop's (6.67 ms against 6.30 ms, medians over the
    same rounds); 3.2% of the window was outside the tasks (starting and joining the processes);
    a CPU sat idle for the last 7.9% of the window, after the first task ended (medians of 6
    rounds).`` Where the chunks were on a CPU under 90% of their wall time (more processes than
    CPUs), it says so."""
    text = (
        f"{what}, where {workers} processes' time went: each chunk of their loop took "
        f"{parts['chunk_ratio']:.2f}x the CPU time of the sequential loop's ({parts['chunk_ms']:.2f} ms against "
        f"{parts['baseline_chunk_ms']:.2f} ms, medians over the same rounds)"
    )
    if parts["on_cpu_pct"] < 90:
        text += f", and they were on a CPU {parts['on_cpu_pct']:.0f}% of their wall time"
    if parts.get("slow_rounds"):
        text += (
            f"; round by round, a chunk on the slower process took a median {parts['slowest_ratio']:.2f}x the"
            f" time a chunk of the sequential loop took in the same round (over {SLOW:.2f}x in"
            f" {parts['slow_rounds']} of {parts['timed_rounds']} rounds, up to {parts['slowest_max']:.2f}x):"
            " the machine slowed a process"
            " inside those windows, and the window waited for it, which the speedup on whole cores divides out"
        )
    if parts["rounds"]:
        text += (
            f"; {parts['outside_pct']:.1f}% of the window was outside the tasks (starting and joining the "
            f"processes); a CPU sat idle for the last {parts['imbalance_pct']:.1f}% of the window, after the "
            f"first task ended (medians of {parts['rounds']} round{'s' if parts['rounds'] != 1 else ''})"
        )
    return text + "."


#: A chunk's CPU time in the threads that differs from the sequential loop's by at least this share
#: is a difference in the loop's own pace, which the threads' speedup carries (a finding, not noise).
PACE_DIFF = 0.05


def paced_of(row) -> float:
    """``row``'s speedup at its baseline's pace, where its rounds timed their own units
    (``speedup_norm`` where ``speedup_norm_source`` is ``in-window``: :mod:`analysis.wholecores`)
    and its headline gives that figure (:func:`analysis.findings.transfer_case`); NaN elsewhere."""
    if row is None or row.get("speedup_norm_source") != "in-window" or transfer_case(row) != "on_whole_cores":
        return np.nan
    return float(row["speedup_norm"])


def pace(parts: dict | None, speedup: float, paced: float = np.nan) -> str:
    """Where CPU-bound threads under the GIL ran the loop itself at another pace than the
    sequential baseline in the same rounds (``parts``: :func:`shortfall` of the threads point;
    its ``chunk_ratio`` at least :data:`PACE_DIFF` from 1), that pace in words, with the speedup
    it leaves at the sequential loop's pace: ``paced`` where given (the point's speedup on whole
    cores, which its rounds' own CPU time per chunk gives round by round: :mod:`lab.workspeed`),
    else ``speedup x chunk_ratio``: ``each chunk of the
    threads' loop took 0.79x the CPU time of the sequential loop's in the same rounds (4.45 ms
    against 5.62 ms): the loop itself ran 1.26x as fast per CPU-second in the threads, the
    machine's doing, not the GIL's; at the sequential loop's pace they read 0.97x``; "" where
    not measured or within :data:`PACE_DIFF`.

    Why: on an AVX-512 EPYC VM 2 GIL-bound threads read 1.18-1.26x over sequential in four quick
    runs, one CPU busy at a time, while each chunk of their loop took 0.77-0.80x the sequential
    loop's CPU time: 0.94-0.97x at the sequential loop's pace (docs/benchmarks.md, 2026-12-07).
    """
    ratio = (parts or {}).get("chunk_ratio", np.nan)
    if not (np.isfinite(ratio) and ratio > 0 and np.isfinite(speedup) and abs(ratio - 1) >= PACE_DIFF):
        return ""
    return (
        f"each chunk of the threads' loop took {ratio:.2f}x the CPU time of the sequential loop's in the same "
        f"rounds ({parts['chunk_ms']:.2f} ms against {parts['baseline_chunk_ms']:.2f} ms): the loop itself ran "
        f"{1 / ratio:.2f}x as fast per CPU-second in the threads, the machine's doing, not the GIL's; at the "
        f"sequential loop's pace they read {(paced if np.isfinite(paced) else speedup * ratio):.2f}x"
        + (" (round by round)" if np.isfinite(paced) else "")
    )
