"""Start-method experiment, analysis: per start method the first batch's latency and the
workers' shutdown against fork's, the steady state against fork's, and their chart.

Ratios to fork are paired per round: every point's job measures fork interleaved (its
``baseline`` rows), so ``x fork's`` is the median over rounds of point / baseline of the same
round, with the distribution-free 95% interval of that median (:func:`analysis.stats.median_ci`);
where the replicates are missing, the ratio of the summary's medians without an interval.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.findings import bound, fmt_transfer, fmt_x, in_order, measured, num, pick
from analysis.plotting import PALETTE, cpus_text, not_measured_panel, note, plt, yerr
from analysis.stats import median_ci
from experiments.startmethod import METHODS
from lab.contract import Analysis, Context

FIRST, STEADY, SHUTDOWN = "first_batch_ms", "steady_batches_per_s", "shutdown_ms"


def _paired(ctx: Context, method: str, col: str) -> pd.DataFrame:
    """``col`` of ``method``'s rounds (``point``) beside fork's measured interleaved in the same
    job and round (``fork``), one row per round with both (none where there are no replicates)."""
    reps = ctx.replicates
    if reps is None or col not in reps or "source" not in reps:
        return pd.DataFrame(columns=["point", "fork"], dtype=float)
    ok = reps[reps["status"] == "ok"]
    pts = ok[(ok["role"] == "point") & (ok["start_method"] == method)]
    base = ok[(ok["role"] == "baseline") & ok["source"].isin(pts["source"])]
    both = pts[["source", "repeat", col]].merge(base[["source", "repeat", col]], on=["source", "repeat"])
    return pd.DataFrame({"point": both[f"{col}_x"].astype(float), "fork": both[f"{col}_y"].astype(float)})


def paired_ratio(ctx: Context, method: str, col: str) -> tuple[float, float, float]:
    """``(median, ci_low, ci_high)`` of ``col``'s per-round ratio of ``method`` to the fork
    baseline measured interleaved in the same job (NaN where there is none)."""
    both = _paired(ctx, method, col)
    ratios = (both["point"] / both["fork"]).replace([np.inf, -np.inf], np.nan).dropna().to_numpy()
    if not len(ratios):
        return np.nan, np.nan, np.nan
    return (float(np.median(ratios)), *median_ci(ratios))


def _ratio(ctx: Context, row: pd.Series, fork: pd.Series | None, col: str) -> tuple[float, float, float]:
    """:func:`paired_ratio`, else the ratio of the summary's medians (no interval)."""
    r = paired_ratio(ctx, row["start_method"], col)
    if np.isfinite(r[0]) or fork is None or not np.isfinite(fork[col]) or not fork[col]:
        return r
    return row[col] / fork[col], np.nan, np.nan


def _times(v: float) -> str:
    """A ratio: ``58x``, ``3.41x``, ``0.97x`` (two decimals below 10, three where two read 1.00)."""
    return f"{v:.0f}x" if v >= 10 else f"{bound(v)}x"


def fmt_ratio(r: tuple[float, float, float]) -> str:
    """``58x fork's (95% CI 52x-63x)``; without the interval when it is unknown."""
    s = f"{_times(r[0])} fork's"
    if np.isfinite(r[1]) and np.isfinite(r[2]):
        s += f" (95% CI {_times(r[1])}-{_times(r[2])})"
    return s


def fmt_value(row: pd.Series, col: str, unit: str) -> str:
    """``2,050 ms (95% CI 1,950-2,110)``: a summary column's median with its interval."""
    lo, hi = row.get(f"{col}_ci_low"), row.get(f"{col}_ci_high")
    s = num(row[col], unit)
    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
        s += f" (95% CI {num(lo, '').strip()}-{num(hi, '').strip()})"
    return s


def steady_verdict(ctx: Context, row: pd.Series, fork: pd.Series | None) -> str:
    """How the steady state compares with fork's: the paired ratio and whether its interval holds 1."""
    r = _ratio(ctx, row, fork, STEADY)
    if not np.isfinite(r[0]):
        return ""
    if np.isfinite(r[1]) and np.isfinite(r[2]):
        verdict = (
            "the same as fork's within the intervals"
            if r[1] <= 1 <= r[2]
            else ("faster than fork's" if r[1] > 1 else "slower than fork's")
        )
    else:  # separate jobs: whether the two medians' intervals overlap
        bounds = [x[f"{STEADY}_ci_{e}"] for x in (row, fork) if x is not None for e in ("low", "high")]
        if len(bounds) < 4 or not np.isfinite(bounds).all():
            return fmt_ratio(r)
        overlap = bounds[0] <= bounds[3] and bounds[2] <= bounds[1]
        verdict = (
            "the same as fork's within the intervals" if overlap else "unlike fork's (the intervals do not overlap)"
        )
    return f"{fmt_ratio(r)}: {verdict}"


def _vs_fork(ctx: Context, row: pd.Series, fork: pd.Series | None, col: str) -> str:
    """``, 31x fork's (95% CI 26x-44x)`` for a point other than fork; empty where unknown."""
    r = _ratio(ctx, row, fork, col) if row["start_method"] != "fork" else (np.nan,) * 3
    return f", {fmt_ratio(r)}" if np.isfinite(r[0]) else ""


def _method_finding(ctx: Context, row: pd.Series, fork: pd.Series | None) -> str:
    m = row["start_method"]
    s = f"{METHODS[m]}: first batch after {fmt_value(row, FIRST, 'ms')}"
    s += _vs_fork(ctx, row, fork, FIRST)
    s += f"; steady state {fmt_value(row, STEADY, 'batches/s')}"
    verdict = steady_verdict(ctx, row, fork) if m != "fork" else ""
    s += f", {verdict}" if verdict else ""
    s += f"; worker shutdown {fmt_value(row, SHUTDOWN, 'ms')}"
    s += _vs_fork(ctx, row, fork, SHUTDOWN)
    base = row.get("baseline_median")
    s += f". An epoch{_epoch_size(ctx)} took {num(1 / row['median'], 's')}"
    if m != "fork" and base is not None and np.isfinite(base) and base > 0 and np.isfinite(row["speedup"]):
        s += f" against {num(1 / base, 's')} for fork measured beside it; epochs/s against fork's: {fmt_x(row)}"
    return s + "."


def findings(ctx: Context) -> list[str]:
    """Per start method: the first batch's latency with its CI and x fork's, the steady state and
    whether it differs from fork's, the workers' shutdown and the epoch's time. Reads
    ``ctx.summary`` and ``ctx.replicates`` (for the paired ratios)."""
    ok = measured(ctx.summary)
    fork = pick(ok, start_method="fork")
    return [
        _method_finding(ctx, r, fork)
        for m in in_order(ok["start_method"], METHODS)
        for _, r in ok[ok["start_method"] == m].head(1).iterrows()
    ]


def headlines(ctx: Context) -> list[dict]:
    """Per start method but fork: its first batch's latency and x fork's, its epochs/s against
    fork's and whether its steady state differs. Reads ``ctx.summary`` and ``ctx.replicates``."""
    ok = measured(ctx.summary)
    fork = pick(ok, start_method="fork")
    parts = []
    for m in in_order(ok["start_method"], METHODS):
        row = pick(ok, start_method=m)
        if m == "fork" or not np.isfinite(row["speedup"]):
            continue
        steady = steady_verdict(ctx, row, fork).split(": ")[-1]
        parts.append(
            f"{m}: first batch after {num(row[FIRST], 'ms')}{_vs_fork(ctx, row, fork, FIRST)}, epochs/s against"
            f" fork's {fmt_transfer(row)}" + (f", steady state {steady}" if steady else "")
        )
    return [{"question": "What does each DataLoader start method cost?", "answer": "; ".join(parts)}] if parts else []


def _setup(ctx: Context) -> str:
    """``2 workers, 100 batches of 32`` from the replicates' parameter columns, or empty."""
    reps = ctx.replicates
    if reps is None or not {"num_workers", "batches", "batch_size"} <= set(reps):
        return ""
    r = reps.iloc[0]
    return f"{int(r['num_workers'])} workers, {int(r['batches'])} batches of {int(r['batch_size'])}, "


def _epoch_size(ctx: Context) -> str:
    """`` of 100 batches`` from the replicates, or empty."""
    reps = ctx.replicates
    return f" of {int(reps['batches'].iloc[0])} batches" if reps is not None and "batches" in reps else ""


def _points(ax, x, sub: pd.DataFrame, col: str, colour: str, unit: str, **kw) -> None:
    """A summary column's medians as markers with their 95% CIs, each labelled with its value
    (markers, not bars: the axis is logarithmic, where a bar's length means nothing)."""
    ax.errorbar(
        x,
        sub[col],
        yerr=yerr(sub, col, f"{col}_ci_low", f"{col}_ci_high"),
        fmt="o",
        ms=8,
        color=colour,
        mec="black",
        mew=0.6,
        capsize=3,
        **kw,
    )
    for xi, (_, r) in zip(x, sub.iterrows()):
        top = r[f"{col}_ci_high"] if np.isfinite(r[f"{col}_ci_high"]) else r[col]
        ax.annotate(
            num(r[col], unit).strip(),
            (xi, top),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )


def _steady_panel(ax, ctx: Context, sub: pd.DataFrame, x) -> None:
    """The steady state against fork's: per start method the paired ratio of its batches/s to
    fork's measured interleaved in the same job (:func:`paired_ratio`), with its 95% CI, the
    figure the findings judge by; fork is the line at 1. Each method's own batches/s come from
    its own job, at another time on a machine whose speed moves: they go under the labels."""
    fork = pick(sub, start_method="fork")
    ratios = np.array(
        [
            _ratio(ctx, row, fork, STEADY) if row["start_method"] != "fork" else (1.0, 1.0, 1.0)
            for _, row in sub.iterrows()
        ],
        dtype=float,
    )
    med, lo, hi = ratios.T
    err = np.vstack([np.where(np.isfinite(lo), med - lo, 0), np.where(np.isfinite(hi), hi - med, 0)])
    colours = ["0.75" if m == "fork" else PALETTE[2] for m in sub["start_method"]]
    ax.bar(x, med, 0.55, color=colours, edgecolor="black", linewidth=0.5, yerr=err, capsize=3)
    ax.axhline(1.0, color="black", linewidth=0.8)
    for xi, m, low, h, method in zip(x, med, lo, hi, sub["start_method"]):
        if method == "fork":
            text = "1x: the reference"
        elif np.isfinite(low) and np.isfinite(h):
            text = f"{_times(m)}\n(95% CI\n{_times(low)}-{_times(h)})"
        else:
            text = f"{_times(m)}\n(no interval)" if np.isfinite(m) else "not paired"
        top = max(h if np.isfinite(h) else m if np.isfinite(m) else 0, 1.0)  # above fork's line, not on it
        ax.annotate(text, (xi, top), xytext=(0, 4), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, 1.35 * max(1.0, float(np.nanmax(np.concatenate([med, hi])))))
    ax.set_ylabel("batches/s against fork's in the same job (x)")
    ax.set_title("Steady state against fork's (higher is better)", fontsize=10)


def _steady_label(ctx: Context, label: str, row: pd.Series) -> str:
    """``label`` over the steady batches/s that its bar's ratio pairs: a method's own against
    fork's in the same job's rounds (``1,025 batches/s\nfork's 1,281 here``), the rounds its bar
    is the median ratio of (their quotient differs from the bar where rounds scatter); fork's own
    job's median under fork, and a method's own job's median where it has no paired rounds."""
    both = _paired(ctx, row["start_method"], STEADY) if row["start_method"] != "fork" else None
    if both is None or both.empty:
        return f"{label}\n{num(row[STEADY], '').strip()} batches/s"
    own, fork = (num(float(both[c].median()), "").strip() for c in ("point", "fork"))
    return f"{label}\n{own} batches/s\nfork's {fork} here"


def startmethod_latency(ctx: Context) -> Figure:
    """Two panels per start method: first-batch latency and worker shutdown (ms, log scale) with
    95% CIs; the steady state's paired ratio to fork with its 95% CI (:func:`_steady_panel`). Reads
    ``ctx.summary``, ``ctx.replicates`` (the ratios, the setup in the title) and ``ctx.host`` (its CPUs)."""
    ok = measured(ctx.summary)
    if ok.empty:
        fig, ax = plt.subplots(figsize=(6, 3))
        not_measured_panel(ax, "DataLoader start methods: no start method measured", ctx.summary)
        return fig
    sub = pd.concat([ok[ok["start_method"] == m].head(1) for m in in_order(ok["start_method"], METHODS)])
    x = np.arange(len(sub))
    labels = [METHODS[m].replace(" (", "\n(") for m in sub["start_method"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.6))
    left.set_yscale("log")
    _points(left, x - 0.15, sub, FIRST, PALETTE[0], "ms", label="first batch (worker start-up)")
    _points(left, x + 0.15, sub, SHUTDOWN, PALETTE[1], "ms", label="worker shutdown")
    values = sub[[f"{FIRST}_ci_high", f"{SHUTDOWN}_ci_high", FIRST, SHUTDOWN]].to_numpy(dtype=float)
    left.set_ylim(np.nanmin(values) / 3, np.nanmax(values) * 4)
    left.set_xlim(-0.6, len(sub) - 0.4)
    left.set_ylabel("latency, once per epoch (ms, log scale)")
    left.set_title("Start and end of every epoch (lower is better)", fontsize=10)
    left.legend(loc="upper left", fontsize=8)
    _steady_panel(right, ctx, sub, x)
    left.set_xticks(x, labels, fontsize=9)
    right.set_xticks(x, [_steady_label(ctx, lab, r) for lab, (_, r) in zip(labels, sub.iterrows())], fontsize=9)
    for ax in (left, right):
        ax.grid(axis="x", visible=False)
    fig.suptitle(
        f"DataLoader start methods: {_setup(ctx)}{cpus_text(ctx.host.get('available_cpus'))} available", fontsize=11
    )
    note(
        fig,
        "Medians over epochs, each with a new DataLoader; error bars: 95% CI of the median. Steady state: "
        "batches after the first num_workers x 2; under each label the medians of the rounds its ratio pairs"
        " (fork's measured in the same job: where rounds scatter, their quotient can differ from the bar, the"
        " median of the rounds' ratios), under fork's its own job's. forkserver's server was started before"
        " the measured epochs.",
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


ANALYSIS = Analysis(findings=findings, headlines=headlines, figures={"startmethod_latency": startmethod_latency})
