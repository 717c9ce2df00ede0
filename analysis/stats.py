"""Per-point statistics: median, IQR, bootstrap confidence intervals, speedup, efficiency.

Definitions (per configuration point, over its ``ok`` replicates of the throughput metric):

* ``median``; ``q1``, ``q3`` (25th/75th percentiles, linear interpolation); ``iqr = q3 - q1``;
  ``iqr_pct = 100 * iqr / median``; ``noisy`` when ``iqr_pct > 10``.
* ``ci_low``, ``ci_high``: 95% bootstrap confidence interval of the median
  (``scipy.stats.bootstrap``, percentile method, 2000 resamples, fixed seed); NaN with fewer
  than 2 replicates.
* ``speedup``: with a baseline measured interleaved inside the point's own job
  (``role == "baseline"``, ``speedup_source = "interleaved"``), the median over rounds of the
  paired ratio ``point_r / baseline_r`` (the two windows of a round are adjacent in time),
  with a 95% bootstrap interval of that median. Pairing matters on shared machines: here the
  host switched between states in which the same loop ran 2x faster or slower for seconds at
  a time, and on one quick run's data the ratio of medians gave 0.745x for two GIL-bound
  threads where the paired median gave 0.98x. ``speedup_ratio_of_medians`` =
  ``median / baseline_median`` is kept beside it. Data without interleaved baselines fall back
  to the group's baseline point from its own job (``speedup_source = "separate jobs"``):
  ratio of medians, bootstrap resampling both samples independently. A baseline point's
  speedup is 1.
* ``parallel_efficiency = speedup / p``, ``p`` from :attr:`ExperimentSpec.units`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from analysis.spec import SPECS, ExperimentSpec

CONFIDENCE = 0.95
N_RESAMPLES = 2000
NOISY_IQR_PCT = 10.0


def median_ci(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap confidence interval of the median of ``x`` (1-D)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return np.nan, np.nan
    if np.all(x == x[0]):  # no spread: the bootstrap distribution is degenerate
        return float(x[0]), float(x[0])
    res = stats.bootstrap(
        (x,), np.median, confidence_level=CONFIDENCE, n_resamples=N_RESAMPLES, method="percentile", rng=seed
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _ratio_of_medians(a, b, axis=-1):
    return np.median(a, axis=axis) / np.median(b, axis=axis)


def ratio_ci(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of ``median(a) / median(b)``, resampling ``a`` and ``b`` independently."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return np.nan, np.nan
    res = stats.bootstrap(
        (a, b),
        _ratio_of_medians,
        confidence_level=CONFIDENCE,
        n_resamples=N_RESAMPLES,
        method="percentile",
        vectorized=True,
        paired=False,
        rng=seed,
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def parallel_units(spec: ExperimentSpec, point: dict) -> float:
    """``p`` of a point for parallel efficiency (NaN where it has no meaning)."""
    if spec.units is None:
        return np.nan
    if spec.units == "processes*threads":
        return float(point["processes"]) * float(point["threads"])
    if spec.name == "gil" and point.get("mode") == "sequential":
        return 1.0
    return float(point[spec.units])


def _is_baseline(spec: ExperimentSpec, point: dict) -> bool:
    return all(str(point[k]) == str(v) for k, v in spec.baseline.items())


def summarise(replicates: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """Summarise replicates (from :func:`analysis.load.load_experiment`) per point.

    Returns:
        One row per point, sorted by the swept keys, with the keys, ``metric``, ``status``,
        ``reason``, ``n``, ``median``, ``q1``, ``q3``, ``iqr``, ``iqr_pct``, ``noisy``,
        ``ci_low``, ``ci_high``, ``baseline_median``, ``speedup``, ``speedup_ci_low``,
        ``speedup_ci_high``, ``speedup_ratio_of_medians``, ``speedup_source`` (interleaved,
        separate jobs, baseline; empty where the point or its baseline has no ok replicate),
        ``parallel_efficiency``, ``cpu_util_pct`` (median), ``interference_pct`` (median, % of one CPU),
        ``contended`` (any replicate whose interference exceeded 10% of one CPU),
        ``oversubscribed``, ``best`` (in its group, the highest speedup whose 95% CI lies above 1,
        else the baseline: speedups are measured against interleaved baselines, raw medians of
        separate jobs are not comparable on a drifting host; False throughout a group without
        any measured point)
        (highest median in its group) and the medians of the spec's ``extra_medians``, each
        followed by ``<column>_ci_low`` and ``<column>_ci_high``, its 95% bootstrap CI.
    """
    spec = SPECS[experiment]
    keys = list(spec.keys)
    rows = []
    if "role" not in replicates.columns:
        replicates = replicates.assign(role="point")
    baselines = replicates[replicates["role"] == "baseline"]
    replicates = replicates[replicates["role"] == "point"]
    for key_values, grp in replicates.groupby(keys, sort=True):
        point = dict(zip(keys, key_values))
        ok = grp[grp["status"] == "ok"]
        values = ok["value"].to_numpy(dtype=float)
        row = {**point, "metric": grp["metric"].iloc[0]}
        if len(values):
            q1, med, q3 = np.percentile(values, [25, 50, 75])
            lo, hi = median_ci(values)
            row.update(status="ok", reason="", n=len(values), median=med, q1=q1, q3=q3, iqr=q3 - q1)
            row.update(iqr_pct=100 * (q3 - q1) / med if med else np.nan, ci_low=lo, ci_high=hi)
            row["cpu_util_pct"] = float(np.median(ok["cpu_util_pct"]))
        else:
            status = grp["status"].iloc[0]
            reason = (
                grp["reason"].dropna().astype(str).iloc[0] if "reason" in grp and grp["reason"].notna().any() else ""
            )
            row.update(status=status, reason=reason, n=0, median=np.nan, q1=np.nan, q3=np.nan, iqr=np.nan)
            row.update(iqr_pct=np.nan, ci_low=np.nan, ci_high=np.nan, cpu_util_pct=np.nan)
        row["noisy"] = bool(row["iqr_pct"] > NOISY_IQR_PCT) if np.isfinite(row["iqr_pct"]) else False
        row["contended"] = bool(ok["contended"].astype(str).eq("True").any()) if "contended" in ok else False
        row["interference_pct"] = (
            float(np.median(ok["interference_pct"].astype(float))) if "interference_pct" in ok and len(ok) else np.nan
        )
        row["oversubscribed"] = (
            bool(grp["oversubscribed"].astype(str).eq("True").any()) if "oversubscribed" in grp else False
        )
        for col in spec.extra_medians:
            extra = ok[col].astype(float).dropna().to_numpy() if col in ok else np.array([])
            row[col] = float(np.median(extra)) if len(extra) else np.nan
            row[f"{col}_ci_low"], row[f"{col}_ci_high"] = median_ci(extra) if len(extra) else (np.nan, np.nan)
        if "worker_warning" in grp:
            warn = grp["worker_warning"].dropna().astype(str)
            row["worker_warning"] = warn.iloc[0] if len(warn) else ""
        if "allclose" in grp:
            row["allclose"] = bool(ok["allclose"].astype(str).eq("True").all()) if len(ok) else np.nan
        row["_values"] = values
        own_base = baselines[baselines["source"].isin(grp["source"]) & (baselines["status"] == "ok")]
        row["_base_values"] = own_base["value"].to_numpy(dtype=float)
        paired = ok[["repeat", "value"]].merge(own_base[["repeat", "value"]], on="repeat", suffixes=("", "_base"))
        row["_ratios"] = (paired["value"] / paired["value_base"]).to_numpy(dtype=float)
        rows.append(row)
    summary = pd.DataFrame(rows)
    summary["_is_base"] = [_is_baseline(spec, r) for r in summary[keys].to_dict("records")]
    group_keys = list(spec.group)
    groups = summary.groupby(group_keys, sort=False) if group_keys else [((), summary)]
    for _, grp in groups:
        is_base = grp["_is_base"].tolist()
        base = grp[grp["_is_base"]]
        group_base_vals = base["_values"].iloc[0] if len(base) else np.array([])
        for (idx, r), itself in zip(grp.iterrows(), is_base):
            vals = r["_values"]
            if itself:
                base_vals, source = vals, "baseline"
            elif len(r["_base_values"]):
                base_vals, source = r["_base_values"], "interleaved"
            else:
                base_vals, source = group_base_vals, "separate jobs"
            cols = ["baseline_median", "speedup_ratio_of_medians", "speedup", "speedup_ci_low", "speedup_ci_high"]
            if not (len(vals) and len(base_vals)):  # nothing to divide: no source either
                summary.loc[idx, cols] = [np.nan] * len(cols)
                summary.loc[idx, "speedup_source"] = ""
                continue
            summary.loc[idx, "speedup_source"] = source
            ratio_of_medians = r["median"] / float(np.median(base_vals))
            if itself:
                speedup, (lo, hi) = 1.0, (1.0, 1.0)
            elif source == "interleaved" and len(r["_ratios"]):
                speedup, (lo, hi) = float(np.median(r["_ratios"])), median_ci(r["_ratios"])
            else:
                speedup, (lo, hi) = ratio_of_medians, ratio_ci(vals, base_vals)
            summary.loc[idx, cols] = [float(np.median(base_vals)), ratio_of_medians, speedup, lo, hi]
    for _, grp in summary.groupby(group_keys, sort=False) if group_keys else [((), summary)]:
        # best by speedup (interleaved with the baseline, immune to drift between jobs), and
        # only where its 95% CI clears 1: otherwise nothing beat the baseline. A group with no
        # measured point (all skipped or failed) has no best.
        is_base = grp["_is_base"] & grp["median"].notna()
        better = grp[(grp["speedup_ci_low"] > 1.0) & ~grp["_is_base"]]
        if len(better):
            best = better["speedup"].idxmax()
        elif is_base.any():
            best = is_base.idxmax()
        else:
            best = grp["median"].idxmax() if grp["median"].notna().any() else None
        summary.loc[grp.index, "best"] = [i == best for i in grp.index]
    summary["parallel_efficiency"] = [
        s / parallel_units(spec, r) if np.isfinite(s) else np.nan
        for s, r in zip(summary["speedup"], summary[keys].to_dict("records"))
    ]
    summary["best"] = summary["best"].astype(bool)
    summary.insert(0, "experiment", experiment)
    return summary.drop(columns=["_values", "_base_values", "_ratios", "_is_base"])
