"""Single-thread cost, analysis: each interpreter's one-thread speed over the reference's, in
words and as a chart."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.findings import fmt_x, in_order
from analysis.plotting import PALETTE, bar_legend, hatch_noisy, plt, yerr
from experiments.singlethread import WORKLOADS
from lab.contract import Analysis, Context
from lab.interpreters import named


def _reference(host: dict) -> str:
    entries = host.get("interpreters") or [{"label": "default"}]
    return entries[0]["label"]


def _measured(summary: pd.DataFrame, host: dict) -> pd.DataFrame:
    """The measured points, interpreters in config order."""
    ok = summary[summary["speedup"].notna()]
    order = [e["label"] for e in host.get("interpreters", [])]
    rank = {label: i for i, label in enumerate(order)}
    return ok.sort_values("interpreter", key=lambda s: s.map(lambda x: rank.get(x, len(rank))), kind="stable")


def findings(ctx: Context) -> list[str]:
    """Per interpreter and workload: one thread's speed over the reference's, and how much
    slower or faster that is. Reads ``ctx.summary`` and ``ctx.host`` (its interpreters: the
    reference is the first)."""
    summary, host = ctx.summary, ctx.host
    ref = named(_reference(host), host)
    out = []
    for _, r in _measured(summary, host).iterrows():
        s = r["speedup"]
        hi, lo = r["speedup_ci_high"], r["speedup_ci_low"]
        if np.isfinite(hi) and hi < 1:
            verdict = f"{100 * (1 - s):.0f}% slower"
        elif np.isfinite(lo) and lo > 1:
            verdict = f"{100 * (s - 1):.0f}% faster"
        else:
            verdict = "not clearly different"
        out.append(
            f"{named(r['interpreter'], host)}: one thread of {WORKLOADS[r['workload']]} ran at {fmt_x(r)} "
            f"the speed of {ref}, {verdict}."
        )
    return out


def headlines(ctx: Context) -> list[dict]:
    """What the free-threaded build costs one thread of CPU-bound Python. Reads ``ctx.summary``
    and ``ctx.host`` (its interpreters: the reference is the first)."""
    summary, host = ctx.summary, ctx.host
    ok = _measured(summary, host)
    cpu = ok[ok["workload"] == "cpu"]
    if cpu.empty:
        return []
    parts = [f"{r['interpreter']} {fmt_x(r, 'rerun')}" for _, r in cpu.iterrows()]
    answer = "one thread of CPU-bound Python against " + _reference(host) + ": " + "; ".join(parts)
    return [{"question": "What does another interpreter cost a single thread?", "answer": answer}]


def _tick(ok: pd.DataFrame, label: str) -> str:
    rows = ok[ok["interpreter"] == label]
    if "gil_enabled" not in rows.columns or rows["gil_enabled"].isna().all():
        return label
    return f"{label}\n(GIL {'on' if bool(rows['gil_enabled'].dropna().iloc[0]) else 'off'})"


def singlethread_ratio(ctx: Context) -> Figure:
    """One bar per interpreter and workload: one thread's throughput over the reference's.
    Reads ``ctx.summary`` and ``ctx.host`` (its interpreters: the reference is the first)."""
    summary, host = ctx.summary, ctx.host
    ok = _measured(summary, host)
    labels = list(dict.fromkeys(ok["interpreter"])) or ["(none measured)"]
    workloads = in_order(ok["workload"], WORKLOADS)
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(labels) + 2), 4.2))
    width = 0.8 / max(1, len(workloads))
    x = np.arange(len(labels))
    for j, w in enumerate(workloads):
        m = ok[ok["workload"] == w].set_index("interpreter").reindex(labels)
        pos = x + (j - (len(workloads) - 1) / 2) * width
        bars = ax.bar(
            pos,
            m["speedup"],
            width,
            yerr=yerr(m, "speedup", "speedup_ci_low", "speedup_ci_high"),
            capsize=3,
            color=PALETTE[j % len(PALETTE)],
            label=WORKLOADS[w],
            edgecolor="black",
            linewidth=0.5,
        )
        hatch_noisy(bars, m)
        for b, v in zip(bars, m["speedup"]):
            if np.isfinite(v):
                ax.annotate(f"{v:.2f}x", (b.get_x() + b.get_width() / 2, 0.05), ha="center", fontsize=8, color="white")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [_tick(ok, label) for label in labels])
    ax.set_ylabel(f"one thread's speed over {_reference(host)} (x)")
    ax.set_ylim(0, max(1.3, float(np.nanmax(ok["speedup_ci_high"].fillna(ok["speedup"]))) * 1.2) if len(ok) else 1.3)
    ax.set_title(f"Single-thread cost: each interpreter against {_reference(host)}, interleaved in one job")
    bar_legend(ax, loc="upper right", fontsize=8)
    fig.text(
        0.01,
        0.005,
        "Error bars: 95% CI of the median of paired per-round ratios. Hatched: noisy.",
        fontsize=8,
        color="#555555",
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


ANALYSIS = Analysis(findings=findings, headlines=headlines, figures={"singlethread_ratio": singlethread_ratio})
