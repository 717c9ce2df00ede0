"""Do absolute rates carry between two runs of one machine at equal one-CPU speed?

``compare`` puts hosts side by side by the ratio of their medians (tasks/s, GFLOP/s, samples/s,
epochs/s). Two runs of one machine whose speed moved between them (the history of one host
under two labels) should read about 1x at every point once the speed is taken out, if the
capacity probe's one-CPU speed (``capacity_1cpu_per_s``, a pure-Python loop, :mod:`lab.probe`)
measured what moved. For every point compared in stored pairs ``<label>-1``/``<label>-2`` this
reports how far from 1 the ratio of run 2 over run 1 reads:

* ``as measured``: the ratio of the medians (:func:`analysis.compare.compare_values`);
* ``x point's speed``: times run 1's probe speed over run 2's, each the median beside the point
  (what ``compare`` did as ``ratio_norm`` before 2026-12-07, with the share of a core);
* ``x run's speed``: times the runs' own median probe speeds over their jobs (run.json
  ``capacity.single_median``);

as the median of ``|ln ratio|`` (0.05: 5% apart) and the share of points a correction brings
closer to 1 than the measured ratio; and the elasticity, the least-squares slope of ``ln(rate
ratio)`` on ``ln(probe speed ratio)`` (``scipy.stats.linregress``, with its 95% interval): 1 where
a rate follows the probe's speed, 0 where it does not. A benchmark, not a test. Usage
(repository root, the project's venv)::

    python benchmarks/rate_transfer.py --label j1,k1,l1 [--results results] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from runpair import labels_problem, missing_runs_problem  # noqa: E402

from analysis.compare import compare_hosts  # noqa: E402
from analysis.hosts import load_host  # noqa: E402
from analysis.tables import DataError  # noqa: E402
from lab import registry  # noqa: E402
from lab.fileio import emit, output_args_problem  # noqa: E402

#: The corrections judged, by the column of :func:`pair_points` that holds run 1's speed over run 2's.
CORRECTIONS = {"as measured": None, "x point's speed": "point_speed", "x run's speed": "run_speed"}


def _run_speed(run_dir: Path) -> float:
    """The run's median one-CPU speed over its jobs (run.json ``capacity.single_median``,
    loop iterations/s); NaN without it."""
    try:
        return float((json.loads((run_dir / "run.json").read_text()).get("capacity") or {})["single_median"])
    except (OSError, ValueError, KeyError, TypeError):
        return float("nan")


def pair_points(results: Path, label: str) -> pd.DataFrame:
    """One row per point compared between ``<label>-1`` (the baseline) and ``<label>-2``:
    ``pair``, ``experiment``, ``point``, ``metric``, ``ratio`` (run 2's median over run 1's) and
    the probe's speed of run 1 over run 2, beside the point (``point_speed``) and over the runs
    (``run_speed``); NaN where a run lacks it.

    Raises:
        DataError: a stored file that cannot be read (:func:`analysis.hosts.load_host`).
    """
    exps = list(registry.experiments())
    one, two = (results / f"{label}-{i}" for i in (1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a point with too few replicates for a test says so in its row
        table = compare_hosts([load_host(one, exps), load_host(two, exps)], one.name, exps)["comparison"]
    base = table[table["status"] == "baseline"].set_index(["experiment", "point"])["capacity_1cpu_per_s"]
    rows = table[table["status"] == "compared"]
    speed = [base.get((e, p), np.nan) for e, p in zip(rows["experiment"], rows["point"])]
    return pd.DataFrame(
        {
            "pair": label,
            "experiment": rows["experiment"].to_numpy(),
            "point": rows["point"].to_numpy(),
            "metric": rows["metric"].to_numpy(),
            "ratio": rows["ratio"].astype(float).to_numpy(),
            "point_speed": np.asarray(speed, dtype=float) / rows["capacity_1cpu_per_s"].astype(float).to_numpy(),
            "run_speed": _run_speed(one) / _run_speed(two),
        }
    )


def judge(df: pd.DataFrame) -> pd.DataFrame:
    """Per correction (:data:`CORRECTIONS`), over the points where every correction is known:
    ``points``, ``median_abs_log`` (median ``|ln ratio|``), ``closer_pct`` (% of points whose
    corrected ratio lies closer to 1 than the measured one; 0 for the measured ratio itself),
    and, for the corrections, ``elasticity`` with ``elasticity_low``/``elasticity_high`` (95%):
    the slope of ``ln ratio`` on ``ln`` of the speed ratio (run 2's speed over run 1's)."""
    cols = [c for c in CORRECTIONS.values() if c]
    df = df[np.isfinite(df[["ratio", *cols]]).all(axis=1) & (df["ratio"] > 0) & (df[cols] > 0).all(axis=1)]
    raw = np.abs(np.log(df["ratio"]))
    out = []
    for name, col in CORRECTIONS.items():
        corrected = raw if col is None else np.abs(np.log(df["ratio"] * df[col]))
        row = {"correction": name, "points": len(df), "median_abs_log": np.nan, "closer_pct": np.nan}
        if len(df):
            row["median_abs_log"] = float(np.median(corrected))
            row["closer_pct"] = 100.0 * float(np.mean(corrected < raw))
        if col is not None and len(df) > 2 and np.ptp(np.log(df[col])) > 0:
            fit = stats.linregress(-np.log(df[col]), np.log(df["ratio"]))
            half = stats.t.ppf(0.975, len(df) - 2) * fit.stderr
            row |= {"elasticity": fit.slope, "elasticity_low": fit.slope - half, "elasticity_high": fit.slope + half}
        out.append(row)
    return pd.DataFrame(out)


def markdown(df: pd.DataFrame, labels: list[str]) -> str:
    """The judgement over all points, over the points whose probe speed moved more than 10%
    between the runs, and per metric."""

    def table(title: str, part: pd.DataFrame) -> list[str]:
        head = "| | points | median ln-distance from 1 | closer to 1 than measured | elasticity (95%) |"
        lines = [f"**{title}**", "", head, "|---|---|---|---|---|"]
        for _, r in judge(part).iterrows():
            e = ""
            if pd.notna(r.get("elasticity")):
                e = f"{r['elasticity']:.2f} ({r['elasticity_low']:.2f}-{r['elasticity_high']:.2f})"
            closer = "" if r["correction"] == "as measured" else f"{r['closer_pct']:.0f}%"
            lines.append(f"| {r['correction']} | {r['points']} | {r['median_abs_log']:.3f} | {closer} | {e} |")
        return [*lines, ""]

    moved = df[np.abs(np.log(df["point_speed"])) > np.log(1.1)]
    lines = [f"Pairs: {', '.join(labels)} ({df['pair'].nunique()} with points compared).", ""]
    lines += table("Every point", df) + table("Points whose probe speed moved more than 10% between the runs", moved)
    for metric, part in df.groupby("metric"):
        lines += table(f"Metric {metric}", part)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", required=True, help="pairs <label>-1/<label>-2, several comma-separated (x1,w1)")
    p.add_argument("--results", default=str(ROOT / "results"), help="the results directory of the runs")
    p.add_argument("--markdown", default=None, help="also write the report to this file")
    args = p.parse_args(argv)
    if problem := output_args_problem(args):
        p.error(problem)
    labels, results = [x.strip() for x in args.label.split(",")], Path(args.results)
    if problem := labels_problem(args.label, labels, no_run=True):
        p.error(problem)
    if problem := missing_runs_problem(results, labels, "--label", args.label):
        p.error(problem)
    try:
        df = pd.concat([pair_points(results, x) for x in labels], ignore_index=True)
    except DataError as e:
        p.error(f"--label {args.label}: {e}")
    if df.empty:
        p.error(f"--label {args.label}: no point compared in any pair (no experiment summaries)")
    emit(markdown(df, labels), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
