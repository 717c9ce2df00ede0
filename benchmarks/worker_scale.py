"""Worker scale factor, by rule: re-summarise stored pairs of quick runs under other rules for
the factor that widens interleaved speedup intervals for the spread between worker processes
(:func:`analysis.stats.worker_scale`), and give each rule's rerun coverage and interval width.

The lab's rule pools the experiment: ``S = sqrt(max(1, mean lambda))`` over the experiment's
points measured in 2 or more workers, every interleaved interval of the experiment widened by
``S``; ``lambda`` is :func:`analysis.stats.worker_inflation` (the one-way analysis of variance's
``F`` of the log round ratios grouped by worker, made unbiased). So one point whose workers
disagree widens every point of its experiment: a CI run at 84ae4dc read passive's speedup in
multiprocessing at 0.11x for its low bound because the default point's spinning workers
disagreed; since 2026-12-07 the mean leaves out oversubscribed points, which the rest's ``S``
widens. The other rules:

* ``with-oversubscribed``: the mean over every point, oversubscribed ones too (the lab's rule before);
* ``experiment-median``: the median ``lambda`` of the experiment instead of the mean;
* ``per-point``: each point by its own ``lambda`` alone;
* ``none``: no widening.

For each rule and each pair ``<label>-1``, ``<label>-2`` under ``--results`` it summarises every
experiment of both runs again from their metrics files (the analysis of this checkout, with
only the factor's rule replaced), compares the pair as ``benchmarks/repeatability.py`` does,
and reports, pooled over the pairs, the coverage and median full width (% of the speedup) of
the figure the headlines lead with, for the first screen's points and for every point, by the
95% rerun interval and by the 95% CI. It also gives the distribution of the ``lambda`` it met
against what ``lambda`` reads where the workers do not differ (``F(k - 1, d2) (d2 - 2) / d2``,
``scipy.stats.f``; k workers, d2 = rounds - k).

A benchmark, not a test; it reads the stored runs and measures nothing. Usage (repository
root, the project's venv)::

    python benchmarks/worker_scale.py --pairs u1,u2 [--results results] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import repeatability  # noqa: E402
from runpair import labels_problem, missing_runs_problem, runs_differ  # noqa: E402

import analysis.stats as st  # noqa: E402
from analysis.load import load_experiment, mark_other_nodes  # noqa: E402
from analysis.tables import DataError  # noqa: E402
from lab import registry  # noqa: E402
from lab.fileio import emit, output_args_problem, write_frame  # noqa: E402
from lab.host import Host  # noqa: E402

THE_LABS = st.worker_scale
RULES = ("experiment-mean", "with-oversubscribed", "experiment-median", "per-point", "none")
#: (label, figure, first screen only, interval kind) of the coverage rows, as repeatability.py names them
VIEWS = (
    ("first screen, rerun interval", "lead", True, "rerun"),
    ("first screen, 95% CI", "lead", True, "ci"),
    ("every point, rerun interval", "lead", False, "rerun"),
)


def lambdas(summary: pd.DataFrame) -> dict:
    """``{row index: (lambda, workers, rounds)}`` of a pre-widening summary's interleaved points
    measured in 2 or more workers (the points :func:`analysis.stats.worker_scale` pools, and the
    oversubscribed ones it leaves out)."""
    out = {}
    for idx, r in summary.iterrows():
        if r["_is_base"] or not len(r["_ratios"]) or r["speedup_source"] != "interleaved":
            continue
        lam = st.worker_inflation(r["_ratios"], r["_workers"])
        if lam is not None:
            out[idx] = (lam, len(np.unique(r["_workers"])), len(r["_ratios"]))
    return out


def rule(name: str, seen: list):
    """A replacement for :func:`analysis.stats.worker_scale` that applies rule ``name`` (a float
    for the experiment, or a Series by row) and appends each (lambda, workers, rounds) to ``seen``."""

    def scale(summary: pd.DataFrame):
        lam = lambdas(summary)
        seen.extend(lam.values())
        values = [v[0] for v in lam.values()]
        if name == "experiment-mean":
            return THE_LABS(summary)
        if name == "none" or not values:
            return 1.0
        if name == "with-oversubscribed":
            return float(np.sqrt(max(1.0, float(np.mean(values)))))
        if name == "experiment-median":
            return float(np.sqrt(max(1.0, float(np.median(values)))))
        return pd.Series([np.sqrt(max(1.0, lam[i][0])) if i in lam else 1.0 for i in summary.index], summary.index)

    return scale


def resummarise(results: Path, host: str, dest: Path) -> None:
    """Every experiment of ``results/<host>`` summarised again into ``dest/<host>/<exp>/summary.csv``
    (with its host.json), as the pipeline's ``analyse`` rule does (``python -m analysis summarise``)."""
    (dest / host).mkdir(parents=True, exist_ok=True)
    (dest / host / "host.json").write_bytes((results / host / "host.json").read_bytes())
    info = Host.from_files(host, str(results / host / "host.json"), None, None)
    for exp, registered in registry.experiments().items():
        metrics = sorted((results / host / exp).glob("**/metrics.csv"))
        if not metrics:
            continue
        reps = mark_other_nodes(load_experiment(metrics, exp), info, False)
        own = registered.hooks().summarise
        write_frame(dest / host / exp / "summary.csv", own(reps) if own is not None else st.summarise(reps, exp))


def evaluate(results: Path, pairs: list[str], name: str, work: Path) -> tuple[dict, list]:
    """Coverage figures of rule ``name`` pooled over ``pairs`` (:data:`VIEWS` -> repeatability.coverage's
    dict), and the lambdas it met."""
    seen: list = []
    st.worker_scale = rule(name, seen)
    try:
        for label in pairs:
            for i in (1, 2):
                resummarise(results, f"{label}-{i}", work / name)
    finally:
        st.worker_scale = THE_LABS
    frames = {p: repeatability.compare(f"{p}-1", f"{p}-2", work / name) for p in pairs}
    if empty := [p for p, df in frames.items() if df.empty]:
        raise LookupError(
            f"no point measured in both runs of {', '.join(empty)} (an interrupted run: no experiment"
            " summaries); leave such a pair out"
        )
    both = pd.concat(frames.values(), ignore_index=True)
    return {view: repeatability.coverage(both, fig, head, kind) for view, fig, head, kind in VIEWS}, seen


def lambda_table(seen: list) -> str:
    """Markdown: the share of the lambdas met above 2, 5, 10 and 50, against the share expected
    where the workers do not differ (mean over the lambdas' own (k, d2))."""
    rows = ["| lambda above | measured | expected without a difference between workers |", "|---|---|---|"]
    lam = np.array([s[0] for s in seen])
    for x in (2, 5, 10, 50):
        null = np.mean([sps.f.sf(x * (n - k) / (n - k - 2), k - 1, n - k) for _, k, n in seen])
        rows.append(f"| {x} | {np.mean(lam > x):.1%} | {null:.1%} |")
    return "\n".join(rows) + f"\n\n{len(lam)} points; median lambda {np.median(lam):.2f}, mean {np.mean(lam):.2f}."


def markdown(figures: dict, pairs: list[str], seen: list, between: dict | None = None) -> str:
    """The rules' table and the lambda table; ``between``: by pair, what makes its two runs
    other than two runs of one thing (:func:`runpair.runs_differ`: an experiment in one run only,
    left out of every figure; other commits or configurations), said under the pairs."""
    head = "| rule | " + " | ".join(f"{v}: coverage, width" for v, *_ in VIEWS) + " |"
    said = [f"{pair}: {text}" for pair, text in (between or {}).items() if text]
    lines = [f"Pairs: {', '.join(pairs)}.", *said, "", head, "|---" * (len(VIEWS) + 1) + "|"]
    for name, by_view in figures.items():
        cells = [
            f"{c['coverage']:.1%} of {c['with_ci_1'] + c['with_ci_2']}, {c['ci_width_pct_median']:.1f}%"
            for c in by_view.values()
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + lambda_table(seen) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", required=True, help="comma-separated labels L of pairs results/L-1, results/L-2")
    p.add_argument("--results", default=str(ROOT / "results"), help="the results directory of the runs")
    p.add_argument("--markdown", default=None, help="also write the table to this file")
    args = p.parse_args(argv)
    if problem := output_args_problem(args):
        p.error(problem)
    results, pairs = Path(args.results), [s.strip() for s in args.pairs.split(",")]
    if problem := labels_problem(args.pairs, pairs, True, "--pairs"):
        p.error(problem)
    if problem := missing_runs_problem(results, pairs, "--pairs", args.pairs):
        p.error(problem)
    figures, seen = {}, []
    try:
        with tempfile.TemporaryDirectory(prefix="worker-scale-") as tmp:
            for name in RULES:
                figures[name], met = evaluate(results, pairs, name, Path(tmp))
                seen = seen or met
    except (DataError, LookupError) as e:  # a file cut short, an interrupted run: named, nothing written
        p.error(f"--pairs {args.pairs}: {e}")
    between = {pair: runs_differ(results, f"{pair}-1", f"{pair}-2") for pair in pairs}
    emit(markdown(figures, pairs, seen, between), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
