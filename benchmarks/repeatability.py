"""Repeatability and coverage: two quick runs, and whether each run's intervals hold the other's values.
Run config.quick.yaml twice, back to back (or compare stored pairs with --no-run).

For every configuration point measured in both runs it reports

* the ratio of the two runs' medians of the throughput metric and of their speedups (run 2 /
  run 1), and the share of points whose medians and speedups agree within +-10%;
* the **coverage**: the share of points whose second-run speedup lies inside the first run's
  95% CI, and the reverse (first-run speedup inside the second run's CI), over the points
  whose speedup has an interval in the run that provides it (a group's baseline, speedup 1 by
  definition, is left out, as are skipped points);
* the median width of the speedup CIs (full width, % of the speedup), and the points whose
  rounds stopped on the time budget (config ``rounds``);
* the **calibration** (:func:`calibration.calibration`): the share of points whose two
  speedups differ by more than their two 95% CIs allow together (5% where both hold their level), which asks the
  intervals the question coverage asks without holding a run's noise against the other run.

With ``--no-run`` it pools pairs (``--label x1,w1``): one pair's first screen is a handful of
points. It also says what makes two runs other than two runs of one thing (:func:`runs_differ`).

A point whose job chose what it measured (``job.json`` ``outcome``: the workload's verification
measures the configuration its search chose) and chose differently in the two runs measured two
different things: it is listed, and left out of the coverage.

What to expect: a calibrated 95% CI holds a replication's estimate only about 83% of the time
(Cumming and Maillardet, Psychological Methods 11(3), 2006), so the headlines give the rerun
interval (:mod:`analysis.rerun`); :func:`coverage` measures both, in both directions.

This is a benchmark, not a test: it measures how reproducible the pipeline's numbers and
intervals are on this machine. Usage (from the repository root, in the project's venv)::

    python benchmarks/repeatability.py [--label rep] [--cores 4] [--markdown out.md] [--no-run]
    python benchmarks/repeatability.py --no-run --label x1,w1,v1 [--markdown out.md]

It runs ``snakemake --cores 4 --configfile config.quick.yaml --config host=<label>-1`` and
``... host=<label>-2``, then compares ``results/<label>-{1,2}/<experiment>/summary.csv``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from calibration import calibration_lines  # noqa: E402
from runpair import labels_problem, machine_between, runs_differ, stored_pairs  # noqa: E402

from analysis.findings import transfer_case  # noqa: E402
from analysis.tables import DataError, read_table  # noqa: E402
from lab import registry  # noqa: E402
from lab.declare import point_label  # noqa: E402
from lab.fileio import emit, output_args_problem, write_text  # noqa: E402

TOLERANCE = 0.10

#: Summary columns each run contributes, suffixed _1 and _2.
FIELDS = ("metric", "median", "speedup", "speedup_ci_low", "speedup_ci_high", "n", "rounds_stopped", "status", "best")
FIELDS += ("speedup_norm", "speedup_norm_ci_low", "speedup_norm_ci_high")
FIELDS += ("speedup_rerun_low", "speedup_rerun_high", "speedup_norm_rerun_low", "speedup_norm_rerun_high")
FIELDS += ("cpus_asked", "cpus_delivered")

#: The figures whose coverage is reported: the measured speedup, the speedup on whole cores,
#: and per point and run the one the report's headline form leads with
#: (:func:`analysis.findings.transfer_case`; ``lead``).
FIGURES = {"speedup": "measured", "speedup_norm": "on whole cores", "lead": "as a headline gives it"}

#: The intervals whose coverage is reported: the 95% CI and the 95% rerun interval
#: (:mod:`analysis.rerun`: the CI widened on the log scale), the one made for this
#: question, where a rerun's estimate will fall.
INTERVALS = {"ci": "95% CI", "rerun": "rerun interval"}


def run(label: str, cores: int) -> float:
    """One quick run under host label ``label``, in this checkout (``results/<label>/``);
    returns its wall time (s).

    Raises:
        subprocess.CalledProcessError: if Snakemake fails.
    """
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores), "--configfile", "config.quick.yaml"]
    cmd += ["--config", f"host={label}", "--forcerun", "host_info"]
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def compare(a: str, b: str, results: Path = ROOT / "results") -> pd.DataFrame:
    """Per point measured in both runs: each run's :data:`FIELDS` (suffixes ``_1``, ``_2``),
    ``is_baseline``, the ratios run 2 / run 1 of the medians and speedups, whether they agree
    within :data:`TOLERANCE`, and whether each run's speedup lies in the other's CI."""
    rows = []
    for exp, registered in registry.experiments().items():
        pa, pb = results / a / exp / "summary.csv", results / b / exp / "summary.csv"
        if not (pa.exists() and pb.exists()):
            continue
        spec = registered.spec
        keys = list(spec.keys)
        sa, sb = (read_table(p, exp) for p in (pa, pb))
        for s in (sa, sb):
            for col in FIELDS:
                if col not in s:
                    s[col] = {"rounds_stopped": "", "best": False}.get(col, np.nan)
        m = sa.merge(sb, on=keys, suffixes=("_1", "_2"))
        for _, r in m.iterrows():
            point = {k: r[k] for k in keys}
            where = Path(exp, *(f"{k}~{point[k]}" for k in keys))
            chose = [_outcome(results / run / where / "job.json") for run in (a, b)]
            rows.append(
                {
                    "experiment": exp,
                    "point": point_label(point),
                    "is_baseline": spec.is_baseline(point),
                    "same_choice": chose[0] == chose[1],
                    "choice_1": chose[0],
                    "choice_2": chose[1],
                    **{f"{f}_{i}": r[f"{f}_{i}"] for f in FIELDS for i in (1, 2)},
                }
            )
    return judge(pd.DataFrame(rows))


def _choices(one, two, prefix: str = "") -> str:
    """Where two jobs' outcomes differ, as ``key: value 1 / value 2`` (nested dicts by dotted key)."""
    if not (isinstance(one, dict) and isinstance(two, dict)):
        return f"{prefix}{one} / {two}"
    keys = [k for k in dict.fromkeys([*one, *two]) if one.get(k) != two.get(k)]
    named = [f"{prefix[:-2]}.{k}: " if prefix else f"{k}: " for k in keys]
    return "; ".join(_choices(one.get(k), two.get(k), name) for k, name in zip(keys, named))


def _outcome(job_json: Path) -> dict | None:
    """What a point's job decided while it measured (``job.json`` ``outcome``: the workload's
    verification measures the configuration its search chose); None without one."""
    try:
        return json.loads(job_json.read_text()).get("outcome")
    except (OSError, ValueError):
        return None


def compare_pairs(labels: list[str], results: Path) -> tuple[pd.DataFrame, str]:
    """:func:`compare` of each pair ``<label>-1``, ``<label>-2``, pooled (column ``pair``), and
    what the machine did across each pair and what else differed between its runs, in words
    (each pair's line led by its label where there are several); a pair with no point measured
    in both runs (an interrupted run: no experiment summaries) is named as left out."""
    frames, between = [], []
    for label in labels:
        one, two = f"{label}-1", f"{label}-2"
        df = compare(one, two, results)
        if df.empty:
            between.append(f"{label}: left out, no point measured in both runs (no experiment summaries).")
            continue
        frames.append(df.assign(pair=label))
        said = " ".join(s for s in (machine_between(results, one, two), runs_differ(results, one, two)) if s)
        between.append(f"{label}: {said}" if len(labels) > 1 and said else said)
    pooled = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return pooled, "\n\n".join(s for s in between if s)


def judge(df: pd.DataFrame) -> pd.DataFrame:
    """Add to a frame of both runs' fields the ratios, the ±10% agreement and the coverage
    columns ``in_ci_1`` (run 2's speedup inside run 1's CI) and ``in_ci_2`` (the reverse);
    NaN where that interval does not exist, for baselines, for points not ok in both runs and
    for points whose jobs chose what they measured differently (``same_choice`` False)."""
    if df.empty:
        return df
    out = df.copy()
    out["median_ratio"] = out["median_2"] / out["median_1"]
    out["speedup_ratio"] = out["speedup_2"] / out["speedup_1"]
    # NaN where either run has no such figure (a skipped point, the workload search's row): not a disagreement
    for fig in ("median", "speedup"):
        ratio = out[f"{fig}_ratio"]
        out[f"{fig}_agrees"] = ((ratio - 1).abs() <= TOLERANCE).where(np.isfinite(ratio))
    usable = ~out["is_baseline"].astype(bool) & (out["status_1"] == "ok") & (out["status_2"] == "ok")
    if "same_choice" in out:  # a job that chose what to measure differently measured two things
        usable &= out["same_choice"].astype(bool)
    _lead(out)
    for fig in FIGURES:
        tag = "" if fig == "speedup" else f"{fig}_"
        for kind, i, other in ((k, i, o) for k in INTERVALS for i, o in ((1, 2), (2, 1))):
            lo, hi = _bound(out, fig, kind, "low", i), _bound(out, fig, kind, "high", i)
            value = out[f"lead_on_{i}_{other}" if fig == "lead" else f"{fig}_{other}"]
            has = usable & np.isfinite(lo) & np.isfinite(hi) & np.isfinite(value)
            out[f"in_{kind}_{tag}{i}"] = np.where(has, (lo <= value) & (value <= hi), np.nan)
            out[f"{kind}_width_pct_{tag}{i}"] = np.where(has, 100 * (hi - lo) / out[f"{fig}_{i}"], np.nan)
    out["headline"] = out["best_1"].fillna(False).astype(bool) | out["best_2"].fillna(False).astype(bool)
    return out


def _lead(out: pd.DataFrame) -> None:
    """Add, per run ``i``, the figure its headline form leads with (``lead_figure_i``: speedup or
    speedup_norm, :func:`analysis.findings.transfer_case` of that run's row) as the columns of a
    figure ``lead``: ``lead_i`` (run i's value of run i's lead), ``lead_{kind}_{side}_i`` (its
    interval), and ``lead_on_i_j`` (run j's value of run i's lead figure, which run i's interval
    is asked to hold)."""
    for i in (1, 2):
        suffix = f"_{i}"
        mine = [c for c in out if c.endswith(suffix)]
        rows = out[mine].set_axis([c.removesuffix(suffix) for c in mine], axis=1)
        norm = rows.apply(lambda r: transfer_case(r) == "on_whole_cores", axis=1).astype(bool).to_numpy()
        out[f"lead_figure_{i}"] = np.where(norm, "speedup_norm", "speedup")
        out[f"lead_{i}"] = np.where(norm, out[f"speedup_norm_{i}"], out[f"speedup_{i}"])
        out[f"lead_on_{i}_{3 - i}"] = np.where(norm, out[f"speedup_norm_{3 - i}"], out[f"speedup_{3 - i}"])
        for col in (f"{kind}_{side}" for kind in INTERVALS for side in ("low", "high")):
            out[f"lead_{col}_{i}"] = np.where(norm, out[f"speedup_norm_{col}_{i}"], out[f"speedup_{col}_{i}"])


def _bound(out: pd.DataFrame, fig: str, kind: str, side: str, i: int) -> pd.Series:
    """Run ``i``'s ``side`` (low, high) of interval ``kind`` (a key of :data:`INTERVALS`) of
    ``fig``; NaN where the run's summary has no such column (results from before it)."""
    col = f"{fig}_{kind}_{side}_{i}"
    return out[col] if col in out else pd.Series(np.nan, index=out.index)


def coverage(df: pd.DataFrame, figure: str = "speedup", headline: bool = False, kind: str = "ci") -> dict:
    """The coverage figures of :func:`judge`'s frame, for ``figure`` (a key of :data:`FIGURES`),
    over every point or (``headline``) over the points the first screen names: those flagged
    ``best`` of their group in either run.

    Returns:
        ``points`` (non-baseline points with a speedup in both runs), ``covered_1`` and ``coverage_1``
        (run 2's speedup inside run 1's 95% CI: count and share of the points where that CI
        exists, ``with_ci_1``), the same for ``_2`` (the reverse), ``coverage`` (both
        directions pooled), ``ci_width_pct_median`` (median full CI width, % of the speedup,
        both runs pooled) and ``budget_stopped`` (points, either run, whose rounds ended on
        the budget or max_rounds) among those points.
    """
    tag = "" if figure == "speedup" else f"{figure}_"
    if headline:
        df = df[df["headline"]]
    compared = ~df["is_baseline"].astype(bool) & np.isfinite(df[f"{figure}_1"]) & np.isfinite(df[f"{figure}_2"])
    if "same_choice" in df:
        compared &= df["same_choice"].astype(bool)
    out: dict = {"points": int(compared.sum())}
    hits = []
    for i in (1, 2):
        col = df[f"in_{kind}_{tag}{i}"].dropna().astype(bool)
        out[f"with_ci_{i}"], out[f"covered_{i}"] = int(len(col)), int(col.sum())
        out[f"coverage_{i}"] = float(col.mean()) if len(col) else float("nan")
        hits += list(col)
    out["coverage"] = float(np.mean(hits)) if hits else float("nan")
    widths = pd.concat([df[f"{kind}_width_pct_{tag}1"], df[f"{kind}_width_pct_{tag}2"]]).dropna()
    out["ci_width_pct_median"] = float(widths.median()) if len(widths) else float("nan")
    stopped = (df["rounds_stopped_1"].isin(["budget", "max_rounds"])) | (
        df["rounds_stopped_2"].isin(["budget", "max_rounds"])
    )
    out["budget_stopped"] = int((stopped & compared).sum())
    return out


def _cell(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float, np.floating)) and np.isfinite(v) else ""


def _yes(v) -> str:
    return "" if v != v else ("yes" if v else "NO")


def _point_rows(df: pd.DataFrame) -> list[str]:
    """One table row per point of a pair; a line naming the pairs where several are pooled."""
    if "pair" in df and df["pair"].nunique() > 1:
        return [f"Pairs pooled: {', '.join(dict.fromkeys(df['pair']))} (each alone with --label gives its points)."]
    lines = [
        "| experiment | point | rounds 1 / 2 | speedup 1 (95% CI) | speedup 2 (95% CI) | 2 in CI 1 | 1 in CI 2 "
        "| median ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in df.iterrows():
        sp = [
            f"{_cell(r[f'speedup_{i}'], '.3f')} ({_cell(r[f'speedup_ci_low_{i}'], '.3f')}-"
            f"{_cell(r[f'speedup_ci_high_{i}'], '.3f')})"
            for i in (1, 2)
        ]
        rounds = f"{_cell(r['n_1'], '.0f')} / {_cell(r['n_2'], '.0f')}"
        lines.append(
            f"| {r['experiment']} | {r['point']} | {rounds} | {sp[0]} | {sp[1]} | {_yes(r['in_ci_1'])} | "
            f"{_yes(r['in_ci_2'])} | {_cell(r['median_ratio'], '.3f')} |"
        )
    return lines


def markdown(df: pd.DataFrame, host: dict, seconds: list[float], between: str = "") -> str:
    """The benchmark's report: machine, durations, what the machine did across the runs
    (:func:`machine_between`), coverage, agreement, one row per point."""
    c = coverage(df)
    took = " and ".join(f"{s:.0f} s" for s in seconds) if seconds else "not timed (--no-run)"
    lines = [
        f"Machine: {host.get('cpu_model')}, {host.get('available_cpus')} available CPUs, "
        f"Python {platform.python_version()}, torch {host.get('torch_version')}. Runs: {took}.",
        "",
        *([between, ""] if between else []),
        f"Coverage: run 2's speedup inside run 1's 95% CI for {c['covered_1']} of {c['with_ci_1']} points "
        f"({c['coverage_1']:.0%}); run 1's inside run 2's for {c['covered_2']} of {c['with_ci_2']} "
        f"({c['coverage_2']:.0%}); pooled {c['coverage']:.0%} (goal: 90%). Median CI width "
        f"{c['ci_width_pct_median']:.1f}% of the speedup. {c['points']} non-baseline points with a speedup; "
        f"{c['budget_stopped']} of them stopped on the time budget in a run.",
        "",
        "| figure | interval | points | coverage (2 in 1 / 1 in 2 / pooled) | median width |",
        "|---|---|---|---|---|",
    ]
    for fig, name in FIGURES.items():
        for headline in (False, True):
            for kind, interval in INTERVALS.items():
                k = coverage(df, fig, headline, kind)
                which = "the first screen's (best per group)" if headline else "every point"
                lines.append(
                    f"| {name}, {which} | {interval} | {k['points']} | {k['covered_1']}/{k['with_ci_1']} / "
                    f"{k['covered_2']}/{k['with_ci_2']} / {k['coverage']:.0%} | {k['ci_width_pct_median']:.1f}% |"
                )
    lines += ["", *calibration_lines(df)]
    lines += [
        "",
        f"Points whose medians agree within +-10%: {df['median_agrees'].mean():.0%} "
        f"({int(df['median_agrees'].sum())} of {int(df['median_agrees'].notna().sum())} with a median in both"
        f" runs); speedups within +-10%: {df['speedup_agrees'].mean():.0%}.",
        "",
        *_point_rows(df),
    ]
    differ = df.iloc[:0]
    if "same_choice" in df:  # the points that have a speedup to compare, but measured two things
        speedups = np.isfinite(df["speedup_1"].astype(float)) & np.isfinite(df["speedup_2"].astype(float))
        differ = df[~df["same_choice"].astype(bool) & ~df["is_baseline"].astype(bool) & speedups]
    if len(differ):
        lines += ["", "Left out of the coverage: their jobs chose what they measured differently in the two runs:"]
        for _, r in differ.iterrows():
            lines.append(f"- {r['experiment']} {r['point']}: {_choices(r['choice_1'], r['choice_2'])}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--label",
        default="repeat",
        help="host label prefix of the two runs; with --no-run, several comma-separated (x1,w1): their pairs pooled",
    )
    p.add_argument("--cores", type=int, default=4)
    p.add_argument("--results", default=str(ROOT / "results"), help="the results directory of the runs")
    p.add_argument("--markdown", default=None, help="also write the report to this file")
    p.add_argument("--json", default=None, help="also write the coverage figures to this file")
    p.add_argument("--no-run", action="store_true", help="only compare existing results")
    p.add_argument("--gap-min", type=float, default=0.0, help="minutes to wait between the two runs")
    args = p.parse_args(argv)
    if problem := output_args_problem(args):
        p.error(problem)
    if args.cores < 1 or args.gap_min < 0:
        p.error(f"--cores must be >= 1 and --gap-min >= 0, got {args.cores} and {args.gap_min}")
    labels = [label.strip() for label in args.label.split(",")]
    if problem := labels_problem(args.label, labels, args.no_run):
        p.error(problem)
    a, b, results = f"{labels[0]}-1", f"{labels[0]}-2", Path(args.results)
    if not args.no_run and results.resolve() != (ROOT / "results").resolve():
        p.error(
            f"--results {results}: the runs write into {ROOT / 'results'}, the pipeline's own;"
            " another directory only with --no-run"
        )
    if args.no_run:
        runs = [f"{label}-{i}" for label in labels for i in (1, 2)]
        absent = [str(results / h / "host.json") for h in runs if not (results / h / "host.json").is_file()]
        if absent:
            p.error(
                f"--no-run compares existing runs, and {' and '.join(absent)}"
                f" {'are' if len(absent) > 1 else 'is'} missing: run them first, or pass the --label of a pair"
                f" under {results} ({', '.join(stored_pairs(results)) or 'none there'})"
            )
    seconds = []
    if not args.no_run:
        seconds.append(run(a, args.cores))
        time.sleep(60 * args.gap_min)
        seconds.append(run(b, args.cores))
    try:
        df, between = compare_pairs(labels, results)
    except DataError as e:  # a stored run's file that cannot be read: named, nothing written
        p.error(f"--label {args.label}: {e}")
    if df.empty:
        p.error(f"--label {args.label}: no point measured in both runs of any pair (no experiment summaries)")
    emit(markdown(df, json.loads((results / a / "host.json").read_text()), seconds, between), args.markdown)
    if args.json:
        figures = {
            f"{fig}{'_headline' if h else ''}{'' if kind == 'ci' else '_' + kind}": coverage(df, fig, h, kind)
            for fig in FIGURES
            for h in (False, True)
            for kind in INTERVALS
        }
        write_text(Path(args.json), json.dumps(figures | {"run_s": seconds}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
