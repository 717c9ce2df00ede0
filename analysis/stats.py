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
* ``parallel_efficiency = speedup / p``, ``p`` from the experiment's declared
  ``parallel_units`` (:mod:`experiments.declare`).
* ``best``: in its group, the highest speedup whose 95% CI lies above 1, else the baseline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from experiments import registry
from experiments.declare import Experiment

CONFIDENCE = 0.95
N_RESAMPLES = 2000
NOISY_IQR_PCT = 10.0

#: Speedup columns, in summary.csv order.
SPEEDUP_COLUMNS = ["baseline_median", "speedup_ratio_of_medians", "speedup", "speedup_ci_low", "speedup_ci_high"]


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


def _metric_stats(values: np.ndarray, grp: pd.DataFrame) -> dict:
    """n, median, IQR, CI of the point's ok values, or its status and reason when it has none."""
    if len(values):
        q1, med, q3 = np.percentile(values, [25, 50, 75])
        lo, hi = median_ci(values)
        return {
            "status": "ok",
            "reason": "",
            "n": len(values),
            **{"median": med, "q1": q1, "q3": q3, "iqr": q3 - q1},
            **{"iqr_pct": 100 * (q3 - q1) / med if med else np.nan, "ci_low": lo, "ci_high": hi},
        }
    reasons = grp["reason"][grp["reason"] != ""] if "reason" in grp else pd.Series(dtype=str)
    nan = dict.fromkeys(("median", "q1", "q3", "iqr", "iqr_pct", "ci_low", "ci_high"), np.nan)
    return {"status": grp["status"].iloc[0], "reason": reasons.iloc[0] if len(reasons) else "", "n": 0, **nan}


def _flags(spec: Experiment, grp: pd.DataFrame, ok: pd.DataFrame) -> dict:
    """Summary values of the experiment's extra columns (median with CI) and flags."""
    row = {}
    for col in spec.summarised_columns:
        extra = ok[col].astype(float).dropna().to_numpy() if col in ok else np.array([])
        row[col] = float(np.median(extra)) if len(extra) else np.nan
        row[f"{col}_ci_low"], row[f"{col}_ci_high"] = median_ci(extra) if len(extra) else (np.nan, np.nan)
    for flag in spec.flags:
        if flag.column not in grp:
            continue
        if flag.aggregate == "text":
            texts = grp[flag.column].fillna("").astype(str)
            texts = texts[texts != ""]
            row[flag.column] = texts.iloc[0] if len(texts) else ""
        elif len(ok):
            values = ok[flag.column].fillna(False).astype(bool)
            row[flag.column] = bool(values.all() if flag.aggregate == "all" else values.any())
        else:
            row[flag.column] = np.nan
    return row


def _point_row(spec: Experiment, point: dict, grp: pd.DataFrame, baselines: pd.DataFrame) -> dict:
    """One summary row, with the arrays the speedup needs under private ``_`` keys."""
    ok = grp[grp["status"] == "ok"]
    values = ok["value"].to_numpy(dtype=float)
    row = {**point, "metric": grp["metric"].iloc[0], **_metric_stats(values, grp)}
    row["cpu_util_pct"] = float(np.median(ok["cpu_util_pct"])) if len(ok) else np.nan
    row["noisy"] = bool(row["iqr_pct"] > NOISY_IQR_PCT) if np.isfinite(row["iqr_pct"]) else False
    row["contended"] = bool(ok["contended"].fillna(False).astype(bool).any()) if "contended" in ok else False
    has_interference = "interference_pct" in ok and len(ok)
    row["interference_pct"] = float(np.median(ok["interference_pct"].astype(float))) if has_interference else np.nan
    over = grp["oversubscribed"].fillna(False).astype(bool).any() if "oversubscribed" in grp else False
    row["oversubscribed"] = bool(over)
    row |= _flags(spec, grp, ok)
    own_base = baselines[baselines["source"].isin(grp["source"])]
    paired = ok[["repeat", "value"]].merge(own_base[["repeat", "value"]], on="repeat", suffixes=("", "_base"))
    row["_values"], row["_base_values"] = values, own_base["value"].to_numpy(dtype=float)
    row["_ratios"] = (paired["value"] / paired["value_base"]).to_numpy(dtype=float)
    row["_is_base"] = spec.is_baseline(point)
    return row


def _speedup(r: pd.Series, group_base: np.ndarray) -> tuple[str, list[float]]:
    """``(speedup_source, SPEEDUP_COLUMNS values)`` of one summary row (see the module docstring)."""
    vals = r["_values"]
    if r["_is_base"]:
        base, source = vals, "baseline"
    elif len(r["_base_values"]):
        base, source = r["_base_values"], "interleaved"
    else:
        base, source = group_base, "separate jobs"
    if not (len(vals) and len(base)):  # nothing to divide: no source either
        return "", [np.nan] * len(SPEEDUP_COLUMNS)
    ratio_of_medians = r["median"] / float(np.median(base))
    if r["_is_base"]:
        speedup, (lo, hi) = 1.0, (1.0, 1.0)
    elif source == "interleaved" and len(r["_ratios"]):
        speedup, (lo, hi) = float(np.median(r["_ratios"])), median_ci(r["_ratios"])
    else:
        speedup, (lo, hi) = ratio_of_medians, ratio_ci(vals, base)
    return source, [float(np.median(base)), ratio_of_medians, speedup, lo, hi]


def _groups(summary: pd.DataFrame, spec: Experiment):
    return summary.groupby(list(spec.group), sort=False) if spec.group else [((), summary)]


def _best(grp: pd.DataFrame):
    """Index of a group's best row: the highest speedup whose 95% CI clears 1 (interleaved with
    the baseline, immune to drift between jobs), else the measured baseline, else the highest
    median; None for a group with no measured point (all skipped or failed)."""
    better = grp[(grp["speedup_ci_low"] > 1.0) & ~grp["_is_base"]]
    if len(better):
        return better["speedup"].idxmax()
    measured_base = grp["_is_base"] & grp["median"].notna()
    if measured_base.any():
        return measured_base.idxmax()
    return grp["median"].idxmax() if grp["median"].notna().any() else None


def summarise(replicates: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """Summarise replicates (from :func:`analysis.load.load_experiment`) per point.

    Returns:
        One row per point, sorted by the swept keys: ``experiment``, the keys, ``metric``,
        ``status``, ``reason``, ``n``, ``median``, ``q1``, ``q3``, ``iqr``, ``iqr_pct``,
        ``ci_low``, ``ci_high``, ``cpu_util_pct`` (median), ``noisy``, ``contended`` (any
        replicate whose interference exceeded 10% of one CPU), ``interference_pct`` (median, %
        of one CPU), ``oversubscribed``, each declared extra column with ``<column>_ci_low`` and
        ``<column>_ci_high``, each declared flag, ``speedup_source`` (interleaved, separate jobs,
        baseline; empty where the point or its baseline has no ok replicate),
        :data:`SPEEDUP_COLUMNS`, ``best`` and ``parallel_efficiency`` (see the module docstring).

    Raises:
        ValueError: for an experiment that is not registered.
    """
    spec = registry.get(experiment).spec
    keys = list(spec.keys)
    reps = replicates if "role" in replicates else replicates.assign(role="point")
    baselines = reps[(reps["role"] == "baseline") & (reps["status"] == "ok")]
    points = reps[reps["role"] == "point"]
    rows = [_point_row(spec, dict(zip(keys, kv)), g, baselines) for kv, g in points.groupby(keys, sort=True)]
    summary = pd.DataFrame(rows)
    for _, grp in _groups(summary, spec):
        base = grp[grp["_is_base"]]
        group_base = base["_values"].iloc[0] if len(base) else np.array([])
        for idx, r in grp.iterrows():
            source, values = _speedup(r, group_base)
            summary.loc[idx, "speedup_source"] = source
            summary.loc[idx, SPEEDUP_COLUMNS] = values
    summary["best"] = False
    for _, grp in _groups(summary, spec):
        best = _best(grp)
        if best is not None:
            summary.loc[best, "best"] = True
    summary["parallel_efficiency"] = [
        s / spec.units_of(r) if np.isfinite(s) else np.nan
        for s, r in zip(summary["speedup"], summary[keys].to_dict("records"))
    ]
    summary.insert(0, "experiment", experiment)
    return summary.drop(columns=["_values", "_base_values", "_ratios", "_is_base"])
