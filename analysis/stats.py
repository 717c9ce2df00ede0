"""Per-point statistics: median, IQR, confidence intervals, speedup, efficiency.

Definitions (per configuration point, over its ``ok`` replicates of the throughput metric):

* ``median``; ``q1``, ``q3`` (25th/75th percentiles, linear interpolation); ``iqr = q3 - q1``;
  ``iqr_pct = 100 * iqr / median``; ``noisy`` when ``iqr_pct > 10``.
* ``ci_low``, ``ci_high``: 95% distribution-free confidence interval of the median from order
  statistics (:mod:`lab.intervals`; Conover 1999; equal to
  ``scipy.stats.quantile_test``'s); NaN with fewer than 6 replicates, where no pair of order
  statistics covers 95%. The percentile bootstrap this replaced was too narrow with few
  replicates: it covered the median 75% of the time with 3 and about 82% with 9.
* ``speedup``: with a baseline measured interleaved inside the point's own job
  (``role == "baseline"``, ``speedup_source = "interleaved"``), the median over rounds of the
  paired ratio ``point_r / baseline_r`` (the two windows of a round are adjacent in time),
  with the same distribution-free 95% interval of that median. Pairing matters on shared machines: here the
  host switched between states in which the same loop ran 2x faster or slower for seconds at
  a time, and on one quick run's data the ratio of medians gave 0.745x for two GIL-bound
  threads where the paired median gave 0.98x. ``speedup_ratio_of_medians`` =
  ``median / baseline_median`` is kept beside it. Data without interleaved baselines fall back
  to the group's baseline point from its own job (``speedup_source = "separate jobs"``):
  ratio of medians, bootstrap resampling both samples independently. A baseline point's
  speedup is 1.
* ``speedup_norm`` (with ``speedup_norm_ci_low``, ``speedup_norm_ci_high``) and
  ``speedup_norm_source``: the speedup on whole cores, the figure that transfers between runs of
  a machine whose speed moves, from the work's own speed inside the windows where it recorded
  it, else from the capacity probe beside the rounds (:mod:`analysis.wholecores`).
* ``speedup_rerun_low``, ``speedup_rerun_high`` (and ``speedup_norm_rerun_low``, ``_high``):
  the 95% rerun interval, where a rerun of the point with as many rounds is expected to read its
  speedup: the CI widened on the log scale by ``sqrt(2) t(n - 1, 0.975) / z(0.975)`` for ``n``
  rounds and made symmetric about the estimate (:func:`analysis.rerun.rerun_interval`; the
  module gives the sources).
* ``delivered_cpus`` (median over the job's rounds, with ``delivered_cpus_ci_low`` and
  ``_ci_high``): CPUs the machine delivered with all available CPUs busy;
  ``cpus_delivered`` and ``cpus_asked``: with the point's own CPUs busy, and how many it asked
  for (capped at the available CPUs); ``capacity_1cpu_per_s``: the probe's single-CPU rate
  (loop iterations per second), the speed of one CPU while the point was measured.
* ``parallel_efficiency = speedup / p``, ``p`` from the experiment's declared
  ``parallel_units`` (:mod:`lab.declare`).
* ``best``: in its group, the highest speedup whose 95% CI lies above 1, else the baseline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from analysis import wholecores
from analysis.capacity import capacity_columns
from analysis.findings import best_index
from analysis.rerun import add_rerun, rerun_bound
from lab import intervals, registry
from lab.declare import Experiment
from lab.workspeed import CLOCK_COLUMN, UNIT_COLUMN

CONFIDENCE = intervals.CONFIDENCE
N_RESAMPLES = 2000
NOISY_IQR_PCT = 10.0

#: Speedup columns, in summary.csv order.
SPEEDUP_COLUMNS = ["baseline_median", "speedup_ratio_of_medians", "speedup", "speedup_ci_low", "speedup_ci_high"]

#: The capacity-normalised speedup's columns (the speedup on whole cores), in summary.csv order.
NORM_COLUMNS = ["speedup_norm", "speedup_norm_ci_low", "speedup_norm_ci_high"]

#: What the capacity probe measured beside a point, summarised per point (medians).
CAPACITY_COLUMNS = ("capacity_1cpu_per_s", "delivered_cpus", "cpus_asked", "cpus_delivered")


def median_ci(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% distribution-free confidence interval of the median of ``x`` (1-D): the order
    statistics of :func:`lab.intervals.median_ci` (Conover 1999, section 3.2; the same
    as ``scipy.stats.quantile_test(x).confidence_interval()``); ``(nan, nan)`` with fewer than
    6 values, for which no such interval reaches 95%. ``seed`` is unused (kept for callers of
    the bootstrap this replaced)."""
    return intervals.median_ci(np.asarray(x, dtype=float))


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


def _point_row(spec: Experiment, point: dict, grp: pd.DataFrame, baselines: pd.DataFrame, jobs: pd.DataFrame) -> dict:
    """One summary row, with the arrays the speedup needs under private ``_`` keys."""
    ok = grp[grp["status"] == "ok"]
    values = ok["value"].to_numpy(dtype=float)
    row = {**point, "metric": grp["metric"].iloc[0], **_metric_stats(values, grp)}
    row["cpu_util_pct"] = float(np.median(ok["cpu_util_pct"])) if len(ok) else np.nan
    # the point's own windows: its baseline's (one thread, say) wait for nothing it asked for
    wait = pd.to_numeric(ok["cpu_wait_pct"], errors="coerce").dropna() if "cpu_wait_pct" in ok else ()
    row["cpu_wait_pct"] = float(np.median(wait)) if len(wait) else np.nan
    row["noisy"] = bool(row["iqr_pct"] > NOISY_IQR_PCT) if np.isfinite(row["iqr_pct"]) else False
    row |= capacity_columns(ok, jobs[jobs["source"].isin(grp["source"])] if "source" in jobs else grp)
    # a point is oversubscribed where most of its measured rounds were (a round can be alone in it
    # where the flag is measured, lab.pressure.oversubscribed)
    over = ok["oversubscribed"].fillna(False).astype(bool).mean() > 0.5 if "oversubscribed" in ok and len(ok) else False
    row["oversubscribed"] = bool(over)
    row |= _flags(spec, grp, ok)
    own_base = baselines[baselines["source"].isin(grp["source"])]
    row |= _capacity(ok, own_base)
    unit = [UNIT_COLUMN] if UNIT_COLUMN in ok and UNIT_COLUMN in own_base else []
    row[CLOCK_COLUMN] = _clock(ok)
    cols = ["repeat", "value", *(["worker"] if "worker" in ok else []), *unit]
    paired = ok[cols].merge(own_base[["repeat", "value", *unit]], on="repeat", suffixes=("", "_base"))
    row["_values"], row["_base_values"] = values, own_base["value"].to_numpy(dtype=float)
    row["_ratios"] = (paired["value"] / paired["value_base"]).to_numpy(dtype=float)
    row["_unit_k"] = wholecores.unit_ratios(paired)
    probed = "cpus_delivered" in ok and ok["cpus_delivered"].notna().any()
    shares = (wholecores.with_share(x)["_share"].to_numpy(dtype=float) for x in (ok, own_base))
    row["_shares"] = tuple(shares) if probed else (np.array([]), np.array([]))
    row["_workers"] = paired["worker"].fillna(0).to_numpy() if "worker" in paired else np.zeros(len(paired))
    row["_is_base"] = spec.is_baseline(point)
    return row


def _clock(ok: pd.DataFrame) -> str:
    """What a point's ``unit_ms`` timed (:data:`lab.workspeed.CLOCK_COLUMN`: ``elapsed``, ``cpu``):
    the most rounds' value (a tie: the first in alphabetical order), "" where no round says."""
    said = ok[CLOCK_COLUMN].astype(object).fillna("").astype(str) if CLOCK_COLUMN in ok else pd.Series(dtype=str)
    said = said[said != ""]
    return str(said.mode().iloc[0]) if len(said) else ""


def _median(values) -> float:
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna()
    return float(v.median()) if len(v) else np.nan


def _capacity(ok: pd.DataFrame, base: pd.DataFrame) -> dict:
    """The probe's readings beside a point (:data:`CAPACITY_COLUMNS`): medians over its rounds
    (``cpus_asked``, ``cpus_delivered``: of the point's own windows), with the 95% interval of
    ``delivered_cpus``."""
    both = pd.concat([ok, base], ignore_index=True)
    out = {c: _median(ok[c]) if c in ok else np.nan for c in ("cpus_asked", "cpus_delivered")}
    for c in ("capacity_1cpu_per_s", "delivered_cpus"):
        out[c] = _median(both[c]) if c in both else np.nan
    rounds = both.drop_duplicates("repeat") if "repeat" in both else both  # one reading per round
    d = pd.to_numeric(rounds["delivered_cpus"], errors="coerce").dropna() if "delivered_cpus" in rounds else []
    out["delivered_cpus_ci_low"], out["delivered_cpus_ci_high"] = median_ci(np.asarray(d, dtype=float))
    return out


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


def worker_inflation(ratios: np.ndarray, workers: np.ndarray) -> float | None:
    """How much a point's rounds vary between worker processes beyond what they vary within
    one: ``lambda = F (d2 - 2) / d2``, the one-way analysis of variance's ``F = MSB / MSW`` of
    the log ratios grouped by worker (``d2 = N - W`` within degrees of freedom), made unbiased:
    under no difference between workers ``E[F] = d2 / (d2 - 2)``, so ``E[lambda] = 1``; with one
    it estimates the factor by which it inflates the variance of the pooled mean. None with
    fewer than 2 workers, ``d2 < 3`` or no spread within them."""
    logs = np.log(np.asarray(ratios, dtype=float))
    ws = np.asarray(workers)
    keep = np.isfinite(logs)
    logs, ws = logs[keep], ws[keep]
    groups = [logs[ws == w] for w in np.unique(ws)]
    n, k = len(logs), len(groups)
    d2 = n - k
    if k < 2 or d2 < 3:
        return None
    msw = sum(((g - g.mean()) ** 2).sum() for g in groups) / d2
    if msw == 0:
        return None
    msb = sum(len(g) * (g.mean() - logs.mean()) ** 2 for g in groups) / (k - 1)
    return float(msb / msw * (d2 - 2) / d2)


def worker_scale(summary: pd.DataFrame) -> float:
    """The factor by which an experiment's speedup intervals are widened for the spread
    between worker processes (:mod:`lab.workers`): ``S = sqrt(mean lambda)``, at least
    1, over the experiment's interleaved points measured in 2 or more workers
    (:func:`worker_inflation`), in the spirit of the Particle Data Group's scale factor for
    measurements that disagree more than their errors allow (Review of Particle Physics,
    Introduction, section 5.2.2; R. T. Birge, Phys. Rev. 40, 207, 1932). 1 where no point was
    measured in 2 or more workers.

    Oversubscribed points (more threads than CPUs) are left out of the mean, and widened by the
    rest's ``S`` (1 where every point measured in 2 or more workers is oversubscribed): their
    workers disagree by design (spinning OpenMP workers run one window through its 2 s cap and
    the next in 0.4 s), which is their finding, not the machine's. In one run (d1-1,
    2026-12-07) the default 2 x 2 point's lambda of 34 made ``S`` 2.85 and widened 2 x 1's CI to
    1.01-2.00; over eight pairs of quick runs the rule left the first screen's rerun coverage as
    it was (90.5% against 90.3%; docs/benchmarks.md)."""
    found = []
    for _, r in summary.iterrows():
        if r["_is_base"] or not len(r["_ratios"]) or r["speedup_source"] != "interleaved":
            continue
        if _flagged(r, "oversubscribed"):
            continue
        lam = worker_inflation(r["_ratios"], r["_workers"])
        if lam is not None:
            found.append(lam)
    return float(np.sqrt(max(1.0, float(np.mean(found))))) if found else 1.0


def _flagged(row: pd.Series, flag: str) -> bool:
    """Whether ``row`` has ``flag`` set to true (False where the column is missing or NaN)."""
    value = row.get(flag, False)
    return isinstance(value, (bool, np.bool_)) and bool(value)


def _widen(summary: pd.DataFrame) -> None:
    """Widen the interleaved speedups' CIs (both kinds) by ``worker_scale`` (:func:`rerun_bound`)."""
    for idx, r in summary.iterrows():
        scale = r["worker_scale"]
        if scale <= 1 or r["speedup_source"] != "interleaved":
            continue
        for est, lo_col, hi_col in (SPEEDUP_COLUMNS[2:], NORM_COLUMNS):
            widened = rerun_bound(r[est], [r[lo_col], r[hi_col]], scale)
            if np.isfinite(widened).all():  # else both bounds stay as they are
                summary.loc[idx, [lo_col, hi_col]] = widened


def _groups(summary: pd.DataFrame, spec: Experiment):
    return summary.groupby(list(spec.group), sort=False) if spec.group else [((), summary)]


def summarise(replicates: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """Summarise replicates (from :func:`analysis.load.load_experiment`) per point.

    Returns:
        One row per point, sorted by the swept keys: ``experiment``, the keys, ``metric``,
        ``status``, ``reason``, ``n``, ``median``, ``q1``, ``q3``, ``iqr``, ``iqr_pct``,
        ``ci_low``, ``ci_high``, ``cpu_util_pct`` and ``cpu_wait_pct`` (medians, the latter over
        the point's own windows), ``noisy``, the capacity columns of
        :func:`capacity_columns` (``contended``, ``interference_pct``, ``steal_pct``,
        ``throttled_s``, ``cpu_freq_mhz``, ``top_other``, ``top_other_pid``,
        ``top_other_cpu_pct``, ``rounds_stopped``), ``oversubscribed``, each declared extra column
        with ``<column>_ci_low`` and ``<column>_ci_high``, each declared flag, ``speedup_source``
        (interleaved, separate jobs, baseline; empty where the point or its baseline has no ok
        replicate), :data:`SPEEDUP_COLUMNS`, :data:`NORM_COLUMNS`, ``speedup_norm_source``,
        :data:`analysis.rerun.RERUN_COLUMNS`, the probe's :data:`CAPACITY_COLUMNS` with
        ``delivered_cpus_ci_low`` and ``_ci_high``, ``best`` and ``parallel_efficiency`` (see the
        module docstring).

    Raises:
        ValueError: for an experiment that is not registered.
    """
    spec = registry.get(experiment).spec
    keys = list(spec.keys)
    reps = replicates if "role" in replicates else replicates.assign(role="point")
    baselines = reps[(reps["role"] == "baseline") & (reps["status"] == "ok")]
    points = reps[reps["role"] == "point"]
    rows = [_point_row(spec, dict(zip(keys, kv)), g, baselines, reps) for kv, g in points.groupby(keys, sort=True)]
    summary = pd.DataFrame(rows)
    for _, grp in _groups(summary, spec):
        base = grp[grp["_is_base"]]
        group_base = base["_values"].iloc[0] if len(base) else np.array([])
        for idx, r in grp.iterrows():
            source, values = _speedup(r, group_base)
            summary.loc[idx, "speedup_source"] = source
            summary.loc[idx, SPEEDUP_COLUMNS] = values
            summary.loc[idx, NORM_COLUMNS], summary.loc[idx, "speedup_norm_source"] = wholecores.norm(summary.loc[idx])
    summary["worker_scale"] = worker_scale(summary)
    _widen(summary)
    add_rerun(summary, SPEEDUP_COLUMNS[2:], NORM_COLUMNS)
    summary["best"] = False
    for _, grp in _groups(summary, spec):
        best = best_index(grp)
        if best is not None:
            summary.loc[best, "best"] = True
    summary["parallel_efficiency"] = [
        s / spec.units_of(r) if np.isfinite(s) else np.nan
        for s, r in zip(summary["speedup"], summary[keys].to_dict("records"))
    ]
    summary.insert(0, "experiment", experiment)
    drop = ["_values", "_base_values", "_ratios", "_unit_k", "_shares", "_workers", "_is_base"]
    return summary.drop(columns=drop)
