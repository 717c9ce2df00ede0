"""DataLoader experiment, analysis: the best num_workers per dataset and what the training loop
waited for data, the throughput and data-stall charts, and the points the timeline shows."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from analysis.capacity import note as measured_note
from analysis.findings import (
    best_row,
    fmt_transfer,
    fmt_x,
    headline_winner,
    in_order,
    measured,
    num,
    pick,
    slower,
    unranked_text,
    winner,
)
from analysis.plotting import (
    PALETTE,
    WHOLE_CORES_NOTE,
    baseline_text,
    circle_best,
    cpus_text,
    mark_oversubscribed,
    mark_whole_cores,
    note,
    plt,
    speedup_line,
    speedup_note,
    yerr,
)
from analysis.timelines import point_of
from experiments.dataloader import DATASETS
from lab.contract import Analysis, Context
from lab.pressure import WAITED_PCT

KEYS = ("dataset", "num_workers")


def _workers(row) -> str:
    return f"num_workers = {int(row['num_workers'])}"


def _dataset_finding(dataset: str, sub: pd.DataFrame, host: dict) -> str:
    best, zero = winner(sub), pick(sub, num_workers=0)
    label = DATASETS[dataset][0].upper() + DATASETS[dataset][1:]
    if best is None:
        s = f"{label}: no clear winner, no num_workers was clearly faster than num_workers = 0"
        shown = zero if zero is not None else best_row(sub)
    else:
        s = f"{label}: best num_workers = {int(best['num_workers'])} at {num(best['median'], 'samples/s')}"
        if int(best["num_workers"]) != 0:
            s += f", {fmt_x(best)} over num_workers = 0{measured_note(best, host)}"
        s += unranked_text(sub, best, _workers)
        shown = best
    s += f"; the training loop waited for data {shown['data_stall_pct']:.0f}% of the time there."
    worse = slower(sub)
    if (best is None or int(best["num_workers"]) == 0) and len(worse):
        worst = worse.loc[worse["speedup"].idxmin()]
        why = measured_note(worst, host)
        # the cost of passing batches is the explanation only where nothing else was measured
        s += f" More workers were slower (num_workers = {int(worst['num_workers'])}: {fmt_x(worst)}{why})" + (
            ": passing batches between processes costs more than loading them." if not why else "."
        )
    return s


def findings(ctx: Context) -> list[str]:
    """Per dataset the best num_workers and the data stall there; PyTorch's worker warnings.
    Reads ``ctx.summary`` and ``ctx.host`` (what was measured while a point ran)."""
    summary, host = ctx.summary, ctx.host
    out = []
    for dataset in in_order(summary["dataset"], DATASETS):
        sub = measured(summary[summary["dataset"] == dataset])
        if len(sub):
            out.append(_dataset_finding(dataset, sub, host))
    warned = summary[summary["worker_warning"] != ""] if "worker_warning" in summary else summary.iloc[0:0]
    if len(warned):
        ws = ", ".join(sorted({str(int(w)) for w in warned["num_workers"]}))
        out.append(
            f"PyTorch warned about too many workers at num_workers = {ws} (more than it suggests for this machine)."
        )
    return out


def headlines(ctx: Context) -> list[dict]:
    """The best num_workers per kind of data, from ``ctx.summary``."""
    summary = ctx.summary
    parts = []
    for dataset in in_order(summary["dataset"], DATASETS):
        sub = measured(summary[summary["dataset"] == dataset])
        if len(sub):
            best = headline_winner(sub)
            gain = f" ({fmt_transfer(best)})" if best is not None and int(best["num_workers"]) else ""
            answer = f"{int(best['num_workers'])}{gain}" if best is not None else "no clear winner"
            answer += unranked_text(sub, best, _workers, short=True)
            parts.append(f"{DATASETS[dataset]}: {answer}")
    return (
        [{"question": "The best DataLoader num_workers per kind of data?", "answer": "; ".join(parts)}] if parts else []
    )


def dataloader_throughput(ctx: Context) -> Figure:
    """Speedup over num_workers = 0 against num_workers, one panel per dataset, the clear winner
    (:func:`analysis.findings.winner`) circled and named below the panel, else "no clear winner"
    written there; oversubscribed points (:func:`lab.pressure.oversubscribed`) in orange squares.
    Reads ``ctx.summary`` and ``ctx.host`` (its available CPUs, in the title)."""
    summary, host = ctx.summary, ctx.host
    datasets = in_order(summary["dataset"], DATASETS)
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.3 * len(datasets), 4.6), squeeze=False)
    whole = False
    for ax, ds, c in zip(axes[0], datasets, PALETTE):
        sub = summary[summary["dataset"] == ds].sort_values("num_workers")
        speedup_line(ax, sub["num_workers"], sub, c)
        over = sub[sub["oversubscribed"].fillna(False).astype(bool)] if "oversubscribed" in sub else sub.iloc[:0]
        mark_oversubscribed(ax, over["num_workers"], over["speedup"], "workers + threads")
        whole |= bool(mark_whole_cores(ax, sub["num_workers"] + 0.06 * sub["num_workers"].max(), sub).any())
        b = headline_winner(measured(sub)) if sub["median"].notna().any() else None  # the headline's best
        if b is not None:
            circle_best(ax, b["num_workers"], b["speedup"], f"best: num_workers={int(b['num_workers'])}")
        elif sub["median"].notna().any():
            # the findings' "no clear winner": no ring on the baseline a reader would take for a best
            ax.text(0.5, -0.24, "no clear winner", transform=ax.transAxes, ha="center", fontsize=9, color="#444444")
        if ax.get_legend_handles_labels()[0]:  # below the panel, where a ring cannot be taken for a data point
            at = -0.2 if b is not None else -0.3
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, at), fontsize=8, markerscale=0.6, frameon=False)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(sub["num_workers"])
        ax.set_xlabel("num_workers")
        ax.set_title(f"{DATASETS[ds]}\n({baseline_text(sub, 'samples/s')} at num_workers=0)", fontsize=10)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)  # room for the ring on a best point at the top
    axes[0, 0].set_ylabel("speedup over num_workers = 0 (x)")
    fig.suptitle(f"DataLoader num_workers on {cpus_text(host.get('available_cpus'))} available", fontsize=11)
    speedup_note(
        fig,
        f" Orange square: oversubscribed, where the kernel also measured threads waiting for a CPU over"
        f" {WAITED_PCT:.0f}% of the time (workers that sleep are not)." + (WHOLE_CORES_NOTE if whole else ""),
    )
    fig.tight_layout(rect=(0, 0.07 if whole else 0.03, 1, 1))  # room for the longer footnote
    return fig


def dataloader_stall(ctx: Context) -> Figure:
    """Data-stall share (time the training loop waited inside ``next(iterator)``, % of the
    epoch's wall time) against num_workers, one line per dataset, with 95% CIs. Reads
    ``ctx.summary`` and ``ctx.host`` (its available CPUs, in the title)."""
    summary, host = ctx.summary, ctx.host
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for ds, c, marker in zip(DATASETS, PALETTE, ("o", "s", "^")):
        sub = summary[(summary["dataset"] == ds) & (summary["status"] == "ok")].sort_values("num_workers")
        if not len(sub):
            continue
        ax.errorbar(
            sub["num_workers"],
            sub["data_stall_pct"],
            yerr=yerr(sub, "data_stall_pct", "data_stall_pct_ci_low", "data_stall_pct_ci_high"),
            color=c,
            marker=marker,
            capsize=3,
            label=DATASETS[ds],
        )
    ax.set_xticks(sorted(summary["num_workers"].unique()))
    ax.set_xlabel("num_workers")
    ax.set_ylabel("data stall (% of epoch wall time)")
    ax.set_ylim(0, 105)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    ax.set_title(
        f"DataLoader: share of the epoch the training loop waited for data\n"
        f"({cpus_text(host.get('available_cpus'))} available; lower is better)",
        fontsize=10,
    )
    note(fig, "Median over epochs; error bars: 95% CI of the median.")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def timeline_points(ctx: Context) -> list[dict]:
    """Per dataset, num_workers = 0 and the best num_workers > 0 (by speedup, else the largest),
    from ``ctx.summary``."""
    summary = ctx.summary
    ok = summary[summary["status"] == "ok"]
    points = []
    for ds in in_order(ok["dataset"], DATASETS):
        sub = ok[ok["dataset"] == ds]
        points += [point_of(r, KEYS) for _, r in sub[sub["num_workers"] == 0].head(1).iterrows()]
        more = sub[sub["num_workers"] > 0]
        if len(more):
            pick_at = more["speedup"].idxmax() if more["speedup"].notna().any() else more["num_workers"].idxmax()
            points.append(point_of(more.loc[pick_at], KEYS))
    return points


ANALYSIS = Analysis(
    findings=findings,
    headlines=headlines,
    figures={"dataloader_throughput": dataloader_throughput, "dataloader_stall": dataloader_stall},
    timeline_points=timeline_points,
)
