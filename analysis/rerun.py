"""The 95% rerun interval: where a rerun of a point on this machine is expected to read its speedup.

A point's 95% confidence interval says where its true median speedup lies. A rerun's estimate
carries noise of its own, so even a calibrated 95% CI holds a replication's estimate only about
83% of the time (G. Cumming and R. Maillardet, "Confidence intervals and replication: Where will
the next mean fall?", Psychological Methods 11(3), 2006). The rerun interval is the replication
interval of D. R. Spence and D. J. Stanley ("Prediction interval: What to expect when you're
expecting ... a replication", PLoS ONE 11(9), 2016): for a mean of ``n`` values whose spread
``s`` is estimated from them, ``x +- t(n - 1, 0.975) s sqrt(1/n + 1/m)`` holds a replication of
``m`` values 95% of the time. Here the replication has as many rounds (``m = n``), and the
estimate's own 95% CI stands for ``z(0.975) s / sqrt(n)``, so the rerun interval of a symmetric
CI is the CI widened on the log scale around the estimate by

    ``f(n) = sqrt(2) x t(n - 1, 0.975) / z(0.975)``:  ``low' = s (low / s)^f(n)``,

1.85 at 6 rounds, 1.59 at 12 and 1.48 at 30 (sqrt(2) = 1.41 as ``n`` grows). The ``sqrt(2)``
is the rerun's own noise (two independent estimates of equal spread differ by sqrt(2) times
one's); the Student quantile in place of the normal one is the CI's width being itself an
estimate from ``n`` rounds, so that a point whose few rounds happened to agree is not held to a
narrow interval. Measured on the stored pairs of quick runs of an AVX2 EPYC VM (12 pairs, 111
first-screen points; ``benchmarks/repeatability.py --no-run --label ...``): with ``sqrt(2)``
alone the rerun interval held 87.8% of the reruns' figures, while the two runs' CIs judged
together differed beyond their level for 6% of the points (5% expected): the intervals were
honest, the rerun interval's widening was short (docs/benchmarks.md).

The rerun interval is symmetric on the log scale about the estimate, even where the CI is not.
A rerun's estimate ``Y`` and this run's ``X`` are two draws of one estimator, so ``log Y - log X``
is symmetric about 0 whatever the skew of either: a median of 6-9 rounds whose CI is about
``[min, max]`` can sit near one end by chance (run p1-1's 2 processes at 1.926x on whole cores, CI
1.913-1.933; its rerun read 1.940x), and that end says how far this estimate may lie from the
truth on that side, not how near a rerun will read.
The two sides' log half-widths ``a`` (below) and ``b`` (above) are two estimates of one draw's
spread; their root mean square ``sqrt((a^2 + b^2) / 2)`` pools them, and the difference of two
draws is ``sqrt(2)`` times as wide, times the Student factor: ``f(n) sqrt((a^2 + b^2) / 2)``,
which is ``f(n) a`` for a symmetric CI and so the Spence-Stanley interval above. Measured on
the stored pairs of quick runs of the AVX-512 EPYC VM (the first screen's figures as the
headlines give them), the rerun interval so built held 67 of 70 reruns' figures in m1, o1 and p1
(95.7%; 63 of 70, 90.0%, with each side widened alone) at a median width of 11.8% (11.1%); in
q1, run after the change, 20 of 22 at 4.6% (21 of 22 at 3.9% with each side widened alone); the
four pairs pooled, 87 of 92 (94.6%) at 8.4% (84, 91.3%, at 7.7%); recomputed from the stored CIs
of 19 older pairs of three machines, 413 of 440 (93.9%; 402, 91.4%) (docs/benchmarks.md,
2026-12-08).

It holds what moves within a run, not a machine that changes between runs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from lab.intervals import CONFIDENCE

#: The 95% rerun intervals of the speedup and of the speedup on whole cores (summary.csv).
RERUN_COLUMNS = ["speedup_rerun_low", "speedup_rerun_high", "speedup_norm_rerun_low", "speedup_norm_rerun_high"]

#: The rerun's own noise: two independent estimates of equal spread differ by sqrt(2) times one's.
RERUN_WIDENING = float(np.sqrt(2.0))


def rerun_factor(n) -> np.ndarray:
    """``f(n) = sqrt(2) t(n - 1, q) / z(q)``, ``q = (1 + CONFIDENCE) / 2`` (the module docstring):
    how much wider on the log scale the rerun interval of a point measured in ``n`` rounds is than
    its CI; ``n`` a scalar or an array, NaN below 2 rounds."""
    n = np.asarray(n, dtype=float)
    ok = n >= 2
    q = (1 + CONFIDENCE) / 2
    return np.where(ok, RERUN_WIDENING * stats.t.ppf(q, np.where(ok, n - 1, 1)) / stats.norm.ppf(q), np.nan)


def rerun_bound(estimate, bound, factor):
    """``estimate * (bound / estimate) ** factor``: a bound widened on the log scale about the
    estimate, each side by itself (a CI by the spread between worker processes,
    :func:`analysis.stats.worker_scale`); scalars or arrays, NaN where either is not positive."""
    s, b = np.asarray(estimate, dtype=float), np.asarray(bound, dtype=float)
    ok = (s > 0) & (b > 0)
    return np.where(ok, s * (np.where(ok, b, 1.0) / np.where(ok, s, 1.0)) ** factor, np.nan)


def rerun_interval(estimate, low, high, n) -> tuple[np.ndarray, np.ndarray]:
    """The 95% rerun interval of an estimate with 95% CI ``[low, high]`` from ``n`` rounds
    (scalars or arrays): ``estimate * exp(-+h)``, ``h = f(n) sqrt((a^2 + b^2) / 2)`` with
    ``a = log(estimate / low)``, ``b = log(high / estimate)`` and ``f`` :func:`rerun_factor`
    (the module docstring: symmetric on the log scale, as the difference of two draws of one
    estimator is). It holds the CI. NaN where any of the three is not a finite positive number,
    ``low`` lies above the estimate or ``high`` below it, or ``n`` is below 2."""
    s, lo, hi = (np.asarray(v, dtype=float) for v in (estimate, low, high))
    ok = np.isfinite(s) & np.isfinite(lo) & np.isfinite(hi) & (s > 0) & (lo > 0) & (hi > 0) & (lo <= s) & (s <= hi)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a, b = np.log(np.where(ok, s / lo, 1.0)), np.log(np.where(ok, hi / s, 1.0))
        h = rerun_factor(n) * np.sqrt((a * a + b * b) / 2)
        return np.where(ok, s * np.exp(-h), np.nan), np.where(ok, s * np.exp(h), np.nan)


def add_rerun(summary: pd.DataFrame, speedup: list[str], norm: list[str]) -> None:
    """Add :data:`RERUN_COLUMNS` to ``summary``: each row's :func:`rerun_interval` of both
    speedups from their CIs and its rounds (column ``n``).

    Args:
        speedup, norm: the ``[estimate, ci_low, ci_high]`` columns of the speedup and of the
            speedup on whole cores.
    """
    n = pd.to_numeric(summary["n"], errors="coerce")
    for cols, out in ((speedup, RERUN_COLUMNS[:2]), (norm, RERUN_COLUMNS[2:])):
        low, high = rerun_interval(*(pd.to_numeric(summary[c], errors="coerce") for c in cols), n)
        summary[out[0]], summary[out[1]] = low, high
