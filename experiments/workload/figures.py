"""Workload experiment, charts: the search one comparison at a time, and the verification's
current settings against the search's best (the figures of
:data:`experiments.workload.analysis.ANALYSIS`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.capacity import cpus_text
from analysis.plotting import PALETTE, note, plt, yerr
from analysis.stats import median_ci
from experiments.workload.recommend import gain_windows
from lab.contract import Context

DECISION_COLOURS = {
    "better": "#009E73",
    "worse": "#D55E00",
    "no clear difference": "#999999",
    "budget": "#E69F00",
    "excluded": "#CC79A7",
}


def workload_search(ctx: Context) -> Figure:
    """Each comparison of the search: the candidate's samples/s over the best of its moment
    (median of the paired rounds, 95% CI), coloured by the search's decision. Reads
    ``ctx.findings`` (findings.json: its ``data.search.trail``)."""
    findings = ctx.findings
    trail = pd.DataFrame(((findings.get("data") or {}).get("search") or {}).get("trail") or [])
    measured = trail[trail["ratio"].notna()] if len(trail) else trail
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.38 * max(1, len(measured))))
    if measured.empty:
        ax.axis("off")
        ax.text(0.5, 0.5, "no comparison was measured (see the table)", ha="center", va="center")
        return fig
    y = np.arange(len(measured))
    for i, (_, r) in enumerate(measured.iterrows()):
        colour = DECISION_COLOURS.get(r["decision"], "#444444")
        err = yerr(pd.DataFrame([r]), "ratio", "ci_low", "ci_high")
        ax.errorbar([r["ratio"]], [i], xerr=err, fmt="o", color=colour, capsize=3)
    ax.set_yticks(y, [f"{r['comparison']}: {r['knob']} = {r['value']}" for _, r in measured.iterrows()], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("candidate samples/s over the best of its moment (x)")
    handles = [
        plt.Line2D([], [], marker="o", linestyle="", color=c, label=k)
        for k, c in DECISION_COLOURS.items()
        if k in set(measured["decision"])
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="decision")
    ax.set_title("Your workload: the search, one candidate at a time", fontsize=10)
    note(
        fig,
        "Geometric mean of per-round ratios (candidate and best measured alternately); error bars: the 95%"
        " interval the search decided with (Student's t on the log ratios).",
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def workload_verify(ctx: Context) -> Figure:
    """The verification side by side: samples/s, data stall, CPU utilisation and peak PSS of
    the current settings and of the search's best (medians over its rounds, not the timeline's
    epochs, with 95% CIs). Reads ``ctx.replicates`` (the ``verify`` stage's windows) and
    ``ctx.host`` (its available CPUs, in a panel's title)."""
    replicates, host = ctx.replicates, ctx.host
    rows = (
        gain_windows(replicates[(replicates["stage"] == "verify") & (replicates["status"] == "ok")])
        if len(replicates)
        else replicates
    )
    panels = [
        ("value", "samples/s"),
        ("data_stall_pct", "data stall (% of wall time)"),
        ("cpu_util_pct", f"CPU utilisation (% of {cpus_text(host.get('available_cpus'))})"),
        ("peak_pss_mb", "peak PSS (MB)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(12, 3.6))
    if rows.empty:
        for ax in axes:
            ax.axis("off")
        axes[0].text(0.0, 0.5, "nothing was verified (see the table)", va="center")
        return fig
    for ax, (col, title) in zip(axes, panels):
        stats = []
        for role in ("baseline", "point"):
            v = rows[rows["role"] == role][col].astype(float).dropna().to_numpy()
            lo, hi = median_ci(v) if len(v) else (np.nan, np.nan)
            stats.append({"median": np.median(v) if len(v) else np.nan, "ci_low": lo, "ci_high": hi})
        s = pd.DataFrame(stats)
        ax.bar(
            [0, 1],
            s["median"],
            yerr=yerr(s),
            capsize=4,
            color=[PALETTE[7], PALETTE[2]],
            edgecolor="black",
            linewidth=0.5,
        )
        ax.set_xticks([0, 1], ["current", "search's best"])
        ax.set_axisbelow(True)
        ax.set_title(title, fontsize=9)
    fig.suptitle("Your workload: current settings against the search's best, measured interleaved", fontsize=11)
    note(fig, "Medians over the verification's rounds; error bars: 95% CI of the median.")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig
