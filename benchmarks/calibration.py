"""The calibration of two runs' 95% CIs judged together: do the two estimates of each point differ
by more than both intervals allow? ``benchmarks/repeatability.py`` reports it beside its coverage.

Coverage asks one run's interval to hold the other run's estimate, noise and all; a run whose
few rounds happened to agree fails it however honest its interval is on average. This asks
the intervals the same question without holding a run's noise against the other run: per
point, ``z = |ln(s2 / s1)| / sqrt(se1^2 + se2^2)``, each run's standard error read off its CI
as ``ln(high / low) / (2 x 1.96)`` (a normal approximation of the interval on the log scale).
Where both CIs hold their level and the machine did not change between the runs, ``z`` exceeds
:data:`Z95` for 5% of the points, and its median is :data:`Z_MEDIAN`.

:func:`hindsight` sizes the width goal against the data: over pooled pairs, the width each
first-screen point would have needed, in hindsight, to hold 90% of its own reruns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

#: |z| beyond which two runs' speedups differ by more than their two 95% CIs allow together
#: (the normal's 97.5% quantile), and the median |z| where both CIs hold their level (the
#: half-normal's median): :func:`calibration`'s yardsticks.
Z95, Z_MEDIAN = float(sps.norm.ppf(0.975)), float(sps.halfnorm.median())


def calibration(df: pd.DataFrame, headline: bool = False) -> dict:
    """Whether each run's 95% CI is honest about the other run, judged on both at once: per point
    compared (as :func:`coverage`; over the first screen's with ``headline``),
    ``z = |ln(s2 / s1)| / sqrt(se1^2 + se2^2)``, each run's standard error read off its CI as
    ``ln(high / low) / (2 x 1.96)`` (a normal approximation of the interval on the log scale).
    Where both CIs hold their level and the machine did not change between the runs, ``z``
    exceeds :data:`Z95` for 5% of the points and its median is :data:`Z_MEDIAN` (0.67). Unlike
    :func:`coverage`, which asks one run's interval to hold the other run's estimate, noise and
    all, this does not punish a run for the other's noise, nor reward a wide interval twice.

    Returns:
        ``points`` (with a CI in both runs), ``beyond`` (their count with z > :data:`Z95`),
        ``share`` (beyond / points) and ``z_median``; NaN shares without points.
    """
    if headline:
        df = df[df["headline"]]
    se = [np.log(df[f"speedup_ci_high_{i}"] / df[f"speedup_ci_low_{i}"]) / (2 * Z95) for i in (1, 2)]
    usable = df["in_ci_1"].notna() & df["in_ci_2"].notna() & (se[0] >= 0) & (se[1] >= 0)
    z = (np.log(df["speedup_2"] / df["speedup_1"]).abs() / np.sqrt(se[0] ** 2 + se[1] ** 2))[usable]
    z = z[np.isfinite(z)]
    beyond = int((z > Z95).sum())
    share = beyond / len(z) if len(z) else float("nan")
    return {
        "points": int(len(z)),
        "beyond": beyond,
        "share": share,
        "z_median": float(z.median()) if len(z) else float("nan"),
    }


#: Directions a point needs for :func:`hindsight` to take its quantile: five pairs' worth (one
#: pair gives a point two directions of one difference, which any quantile reads as its width).
HINDSIGHT_MIN_DIRECTIONS = 10


def hindsight(df: pd.DataFrame, level: float = 0.9) -> dict:
    """The width a point's interval would need, known in hindsight, to hold ``level`` of its own
    reruns: per point of the first screen (``df``'s ``headline`` rows, pooled over pairs: column
    ``point`` within ``experiment``), the ``level`` quantile ``h`` of ``|ln(rerun / estimate)|``
    over its directions (each run's headline figure against the other run's value of it, the
    directions :func:`coverage` counts for the figure ``lead``), so that ``[s e^-h, s e^h]``
    holds that share of them; its width is ``e^h - e^-h`` of the estimate. What the widths say:
    a rule that gives each point one width, however well chosen, needs about their median for
    ``level`` coverage; a rule that widens with each run's own noise (the rerun interval) can do
    better, since it knows which of a point's runs were noisy. A point with fewer than
    :data:`HINDSIGHT_MIN_DIRECTIONS` directions is left out (``left_out``: their count).

    Returns:
        ``directions`` counted, ``points`` (distinct), ``left_out``, ``coverage`` (share of directions inside
        their point's width; about ``level``) and ``width_pct_median`` (median over directions of
        their point's width, % of the estimate); NaN without directions.
    """
    rows = df[df["headline"]]
    parts = []
    for i, other in ((1, 2), (2, 1)):
        usable = rows[f"in_rerun_lead_{i}"].notna()
        d = np.log(rows[f"lead_on_{i}_{other}"] / rows[f"lead_{i}"]).abs()[usable]
        parts.append(pd.DataFrame({"key": rows["experiment"] + " " + rows["point"], "d": d}).dropna())
    every = pd.concat(parts, ignore_index=True)
    counts = every.groupby("key")["d"].transform("size")
    left_out = int(every.loc[counts < HINDSIGHT_MIN_DIRECTIONS, "key"].nunique())
    every = every[counts >= HINDSIGHT_MIN_DIRECTIONS]
    if every.empty:
        nan = float("nan")
        return {"directions": 0, "points": 0, "left_out": left_out, "coverage": nan, "width_pct_median": nan}
    h = every.groupby("key")["d"].transform(lambda d: d.quantile(level))
    return {
        "directions": int(len(every)),
        "points": int(every["key"].nunique()),
        "left_out": left_out,
        "coverage": float((every["d"] <= h * (1 + 1e-9)).mean()),  # a pair's two directions differ by an ulp
        "width_pct_median": float((100 * (np.exp(h) - np.exp(-h))).median()),
    }


def calibration_lines(df: pd.DataFrame) -> list[str]:
    """:func:`calibration` in words, for every point and for the first screen's, then
    :func:`hindsight`'s widths at 90%."""
    out = []
    for headline, which in ((False, "every point"), (True, "the first screen's points")):
        k = calibration(df, headline)
        if not k["points"]:
            out.append(f"Calibration, {which}: no point has a 95% CI in both runs.")
            continue
        out.append(
            f"Calibration, {which}: the two runs' speedups differ by more than their two 95% CIs allow"
            f" together for {k['beyond']} of {k['points']} ({100 * k['share']:.0f}%; 5% where both"
            f" hold their level), median |z| {k['z_median']:.2f} ({Z_MEDIAN:.2f} expected)."
        )
    h = hindsight(df)
    fewer = f"; {h['left_out']} with fewer left out" if h["left_out"] else ""
    pairs = df["pair"].nunique() if "pair" in df else 1
    if not h["directions"]:
        out.append(
            f"In hindsight: the width each first-screen point needed for 90% of its reruns takes"
            f" {HINDSIGHT_MIN_DIRECTIONS} reruns of it (each run's figure against the other's: 2 a pair, so 5 pairs"
            f" pooled with --label); {pairs} pair{'s' if pairs != 1 else ''} given."
        )
    else:
        out.append(
            f"In hindsight, one width per point that held 90% of its own reruns (the first screen's {h['points']}"
            f" points with {HINDSIGHT_MIN_DIRECTIONS} reruns or more, each run's figure against the other's:"
            f" {h['directions']} reruns{fewer})"
            f" would have a median width of {h['width_pct_median']:.1f}% (coverage {100 * h['coverage']:.0f}%):"
            " what a rule that gives a point one width would need."
        )
    return out
