"""The confidence interval of a median that the lab reports, and its stopping rule uses.

:func:`median_ci` is the distribution-free interval of a median from order statistics: with
``n`` values sorted, ``[x_(k), x_(n-k+1)]`` (1-based) where ``k`` is the largest index whose
coverage ``1 - 2 P(B < k)``, ``B ~ Binomial(n, 1/2)``, is still at least the confidence level
(W. J. Conover, *Practical Nonparametric Statistics*, 3rd ed., 1999, section 3.2; the same
interval as ``scipy.stats.quantile_test(x, p=0.5).confidence_interval()``, which the tests
check it against). It assumes only that the values are independent draws of one distribution,
and holds its level at any ``n``: with fewer than 6 values no pair of order statistics reaches
95% (``[min, max]`` of 5 values covers 93.75%), and the interval is undefined (NaN).

Why not the percentile bootstrap of the median, which this lab used before: with few values
it is far too narrow. With 3 values it is ``[min, max]``, which covers the median 75% of the
time; with 9 it is about ``[x_(3), x_(7)]``, 82% (docs/benchmarks.md, "Honest intervals").

It is written here in pure Python, not taken from scipy, because measurement jobs decide when
to stop with it (:mod:`lab.rounds`) and ``import scipy.stats`` costs 1.5 s per job.
"""

from __future__ import annotations

import math

#: The confidence level of every interval the lab reports.
CONFIDENCE = 0.95

#: Fewest values for which :func:`median_ci` exists at :data:`CONFIDENCE`.
MIN_N = 6


def order_index(n: int, confidence: float = CONFIDENCE) -> int | None:
    """``k`` (1-based) of the order-statistic interval ``[x_(k), x_(n-k+1)]`` of a median of
    ``n`` values: the largest ``k`` with ``1 - 2 P(B <= k - 1) >= confidence``,
    ``B ~ Binomial(n, 1/2)``; None when even ``[min, max]`` falls short. Exact integer
    arithmetic up to :data:`EXACT_UP_TO` values, log-gamma terms beyond (exact sums cost seconds
    at 10,000 values)."""
    if n < 1:
        return None
    if n > EXACT_UP_TO:
        return _order_index_float(n, confidence)
    total = 2**n
    below = 0  # P(B <= k - 1) * 2^n
    best = None
    for k in range(1, (n + 1) // 2 + 1):
        below += math.comb(n, k - 1)
        if 1 - 2 * below / total < confidence:
            break
        best = k
    return best


EXACT_UP_TO = 1000


def _order_index_float(n: int, confidence: float) -> int | None:
    below, best = 0.0, None
    log_half_n = n * math.log(2.0)
    for k in range(1, (n + 1) // 2 + 1):
        j = k - 1
        below += math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) - log_half_n)
        if 1 - 2 * below < confidence:
            break
        best = k
    return best


def median_ci(values, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The distribution-free ``confidence`` interval of the median of ``values`` (see the
    module docstring); ``(nan, nan)`` with too few values. NaNs in ``values`` are dropped."""
    x = sorted(float(v) for v in values if v == v)
    k = order_index(len(x), confidence)
    if k is None:
        return math.nan, math.nan
    return x[k - 1], x[len(x) - k]


def half_width_pct(values, centre: float, confidence: float = CONFIDENCE) -> float:
    """Half the width of :func:`median_ci` as % of ``centre`` (the estimate); NaN when the
    interval does not exist or ``centre`` is 0."""
    lo, hi = median_ci(values, confidence)
    if not (math.isfinite(lo) and math.isfinite(hi)) or centre == 0:
        return math.nan
    return 100.0 * (hi - lo) / 2 / abs(centre)
