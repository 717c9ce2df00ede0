"""The calibration of two runs' 95% CIs judged together: do the two estimates of each point differ
by more than both intervals allow? ``benchmarks/repeatability.py`` reports it beside its coverage.

Coverage asks one run's interval to hold the other run's estimate, noise and all; a run whose
few rounds happened to agree fails it however honest its interval is on average. This asks
the intervals the same question without holding a run's noise against the other run: per
point, ``z = |ln(s2 / s1)| / sqrt(se1^2 + se2^2)``, each run's standard error read off its CI
as ``ln(high / low) / (2 x 1.96)`` (a normal approximation of the interval on the log scale).
Where both CIs hold their level and the machine did not change between the runs, ``z`` exceeds
:data:`Z95` for 5% of the points, and its median is :data:`Z_MEDIAN`.
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


def calibration_lines(df: pd.DataFrame) -> list[str]:
    """:func:`calibration` in words, for every point and for the first screen's."""
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
    return out
