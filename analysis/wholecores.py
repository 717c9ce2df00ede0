"""The speedup on whole cores: the figure that transfers between runs of a machine whose speed moves.

``speedup_norm`` (with ``speedup_norm_ci_low``, ``speedup_norm_ci_high``) is the speedup a point
would read had each of its busy CPUs delivered a whole core, as its baseline's did;
``speedup_norm_source`` says what it was measured from:

* ``in-window``: the work's own speed inside the windows (:mod:`lab.workspeed`), where the point
  and its baseline both recorded ``unit_ms`` (the time one fixed unit of work took on the
  window's slowest worker; for threads under the GIL, which run one at a time, its CPU time) in
  every round. Each round's paired ratio ``point_r / baseline_r`` is
  multiplied by ``k_r = unit_point_r / unit_baseline_r`` (how much slower the CPUs ran the same
  work in the point's window than in the baseline's, next to it in time), and ``speedup_norm`` is
  the median of those products with the same distribution-free 95% interval as the speedup's
  (:func:`lab.intervals.median_ci`). A point of 2 processes whose slowest worker ran its units at
  1.3x the baseline's CPU time in a round where it read 1.48x reads 1.92x in that round.
  Round by round, because the correction is measured inside the very window it corrects: over
  the 20 stored quick runs of an AVX-512 EPYC VM (2 vCPUs), gil's 2 CPU-bound processes read
  1.08-2.00x and 1.93-1.96x so corrected, and multiprocessing's 2 x 1 read 1.47-1.98x and
  1.99-2.00x (docs/benchmarks.md, 2026-12-07 afternoon): what is left below 2 is the point's own
  cost outside its units (starting and joining processes, handing results back). What it cannot tell from the host's
  doing is a slowdown the workers cause each other through the hardware they share (memory
  bandwidth, a shared cache): such work is measured as it runs, and its figure on whole cores
  reads too high by that much; the measured speedup stands beside it.
* ``probe``: the capacity probe measured beside every round (:mod:`lab.probe`) gives each
  window's ``share``: the share of a whole core per busy CPU that the machine delivered to the
  window's work (1 where the cores are whole, 0.67 where two busy vCPUs delivered 1.35 cores,
  1 for work that keeps one CPU busy, such as sleeping threads or threads under the GIL:
  :func:`with_share`). ``speedup_norm = speedup * k``, ``k`` the median share of the baseline's
  windows over the median share of the point's, over the job. A point of 2 processes at 1.33x
  in a job where 2 CPUs delivered 1.35 cores has a speedup on whole cores of 1.97x. Its interval
  adds the uncertainty of ``k`` (the order-statistic interval of the point's median share) to
  the speedup's, in quadrature on the log scale. Why the job's median and not each round's
  reading: the probe runs between the windows, for a few milliseconds, and on the 2-vCPU VM the
  delivered capacity moves within tenths of a second (a 20 ms probe's readings 30 ms apart
  correlate 0.7, 200 ms apart 0.4); a round's ratio correlated with its own round's reading only
  0.14-0.28 over 40 rounds, so dividing round by round added the probe's noise without following
  the window; the job's median follows what moves between jobs and runs (docs/benchmarks.md,
  "Delivered capacity").
* empty: a baseline (1), or a point with neither (equal to the speedup).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lab import intervals
from lab.workspeed import UNIT_COLUMN


def with_share(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``_share``: per window, the share of a whole core per busy CPU that the
    machine delivered to the window's work (1 where the probe did not run: nothing to correct).

    The work's busy CPUs ``u`` are what it used (``cpu_util_pct`` x available CPUs / 100),
    between 1 and the CPUs it asked for: sleeping threads and threads under the GIL keep one CPU
    busy at most, so the machine's parallel capacity does not limit them and their share is 1.
    The CPUs delivered to ``u`` busy CPUs are interpolated linearly between 1 (one CPU delivers
    itself) and ``cpus_delivered`` at ``cpus_asked``: ``share = D(u) / u``."""
    need = ("cpus_delivered", "cpus_asked", "cpu_util_pct", "available_cpus")
    if any(c not in rows for c in need) or not len(rows):
        return rows.assign(_share=1.0)
    asked = pd.to_numeric(rows["cpus_asked"], errors="coerce")
    got = pd.to_numeric(rows["cpus_delivered"], errors="coerce")
    used = pd.to_numeric(rows["cpu_util_pct"], errors="coerce") * pd.to_numeric(rows["available_cpus"]) / 100
    u = used.clip(lower=1.0).where(asked > 1, 1.0).clip(upper=asked)
    delivered = 1 + (u - 1) * (got - 1) / (asked - 1).where(asked > 1)
    share = (delivered / u).where(asked > 1, 1.0)
    return rows.assign(_share=share.where(share > 0).fillna(1.0))


def unit_ratios(paired: pd.DataFrame) -> np.ndarray:
    """Per paired round, ``k_r = unit_point_r / unit_baseline_r`` (the module docstring), from a
    point's rows merged with its baseline's on ``repeat`` (the baseline's columns suffixed
    ``_base``); empty unless both sides recorded ``unit_ms`` in every round."""
    cols = (UNIT_COLUMN, f"{UNIT_COLUMN}_base")
    if not len(paired) or any(c not in paired for c in cols):
        return np.array([])
    k = (pd.to_numeric(paired[cols[0]], errors="coerce") / pd.to_numeric(paired[cols[1]], errors="coerce")).to_numpy()
    return k if np.all(np.isfinite(k) & (k > 0)) else np.array([])


def norm(r: pd.Series) -> tuple[list[float], str]:
    """``([speedup_norm, _ci_low, _ci_high], speedup_norm_source)`` of one summary row (the module
    docstring), from its speedup columns and the arrays ``analysis.stats`` keeps under ``_ratios``
    (paired ratios), ``_unit_k`` (:func:`unit_ratios`, aligned with them) and ``_shares`` (the
    point's and the baseline's :func:`with_share`)."""
    if r["_is_base"]:
        return [1.0, 1.0, 1.0], ""
    sp, lo, hi = r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]
    ratios, k = r["_ratios"], r["_unit_k"]
    if len(k) and len(k) == len(ratios) and np.isfinite(sp):
        whole = np.asarray(ratios, dtype=float) * k
        return [float(np.median(whole)), *intervals.median_ci(whole)], "in-window"
    point, base = r["_shares"]
    if not (len(point) and np.isfinite(sp)):
        return [sp, lo, hi], ""
    share_p, share_b = float(np.median(point)), float(np.median(base)) if len(base) else 1.0
    k = share_b / share_p if share_p > 0 else 1.0
    if not (np.isfinite(lo) and np.isfinite(hi) and lo > 0):
        return [sp * k, lo * k, hi * k], "probe"
    k_lo, k_hi = intervals.median_ci(point)  # the point's median share; the baseline's is 1 for one CPU
    spread = np.log(k_hi / k_lo) / 2 if np.isfinite(k_lo) and k_lo > 0 else 0.0
    down = np.hypot(np.log(sp / lo), spread)
    up = np.hypot(np.log(hi / sp), spread)
    return [sp * k, sp * k * np.exp(-down), sp * k * np.exp(up)], "probe"
