"""Convoy effect, analysis: how late the sleeping thread wakes, per interpreter and switch
interval, against the sleeper alone; its latency histogram, the timeline's points and the
theory check (under the GIL the delay reaches the switch interval)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.fidelity import check_row
from analysis.findings import num
from analysis.plotting import PALETTE, plt
from lab.contract import Analysis, Context
from lab.interpreters import named


def _ok(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[summary["status"] == "ok"].sort_values(["interpreter", "switch_interval_ms"])


def findings(ctx: Context) -> list[str]:
    """Per interpreter and switch interval: the sleeper's median and p99 delay next to a
    CPU-bound thread, and its iteration rate against running alone. Reads ``ctx.summary`` and
    ``ctx.host`` (its interpreters' order and names)."""
    summary, host = ctx.summary, ctx.host
    out = []
    rank = {e["label"]: i for i, e in enumerate(host.get("interpreters", []))}
    ok = _ok(summary)
    ok = ok.sort_values("interpreter", key=lambda c: c.map(lambda x: rank.get(x, len(rank))), kind="stable")
    for _, r in ok.iterrows():
        gil = "GIL on" if bool(r.get("gil_enabled", True)) else "GIL off"
        out.append(
            f"{named(r['interpreter'], host)}, switch interval {r['switch_interval_ms']:g} ms ({gil}): a sleeping "
            f"thread next to a CPU-bound thread woke {num(r['latency_p50_ms'], 'ms')} late at the median "
            f"(p99 {num(r['latency_p99_ms'], 'ms')}); its iterations ran at {r['speedup']:.2f}x "
            f"(95% CI {r['speedup_ci_low']:.2f}-{r['speedup_ci_high']:.2f}) the rate they run alone."
        )
    return out


def headlines(ctx: Context) -> list[dict]:
    """How late the sleeper wakes next to a CPU-bound thread, at every switch interval, under
    the first interpreter in ``ctx.host``'s order that ran; then under each other one, at the
    interval of the timeline (:func:`timeline_points`). Reads ``ctx.summary`` and ``ctx.host``."""
    ok = _ok(ctx.summary)
    if ok.empty:
        return []
    rank = {e["label"]: i for i, e in enumerate(ctx.host.get("interpreters", []))}
    order = sorted(ok["interpreter"].unique(), key=lambda x: rank.get(x, len(rank)))

    def late(r, first: bool) -> str:
        p50, p99 = r["latency_p50_ms"], r["latency_p99_ms"]
        return f"{num(p50, 'ms')}{' late at the median' if first else ''} (p99 {num(p99, 'ms')})"

    first = ok[ok["interpreter"] == order[0]]
    parts = [
        f"{late(r, i == 0)} with a {r['switch_interval_ms']:g} ms switch interval"
        for i, (_, r) in enumerate(first.iterrows())
    ]
    shown = {(p["interpreter"], p["switch_interval_ms"]) for p in timeline_points(ctx)}
    for _, r in ok[ok["interpreter"].isin(order[1:])].iterrows():
        if (r["interpreter"], r["switch_interval_ms"]) in shown:
            gil = "GIL on" if bool(r.get("gil_enabled", True)) else "GIL off"
            parts.append(f"under {r['interpreter']} ({gil}) {late(r, False)} with {r['switch_interval_ms']:g} ms")
    answer = "; ".join(parts)
    return [{"question": "How late does a sleeping thread wake next to a CPU-bound one?", "answer": answer}]


def convoy_latency(ctx: Context) -> Figure:
    """Histograms of the sleeper's per-iteration delay (ms, log scale): one panel per
    interpreter and switch interval, next to the CPU-bound thread and alone, every sleep of
    every round; the legend gives the median over the rounds of each round's median, the
    findings' statistic. Reads ``ctx.summary`` (the points) and ``ctx.spans`` (the ``io``
    spans' ``latency_ms`` and ``repeat``)."""
    summary, spans = ctx.summary, ctx.spans
    io = spans[spans["kind"] == "io"] if "kind" in spans.columns else spans.iloc[0:0]
    points = _ok(summary)[["interpreter", "switch_interval_ms"]].drop_duplicates()
    n = max(1, len(points))
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.2 * rows), squeeze=False)
    top = max(1.0, float(io["latency_ms"].max())) if len(io) else 1.0
    bins = np.logspace(-2, np.log10(top * 1.5), 40)
    for ax, (_, p) in zip(axes.flat, points.iterrows()):
        sub = io[(io["interpreter"] == p["interpreter"]) & (io["switch_interval_ms"] == p["switch_interval_ms"])]
        for role, colour, label in (
            ("baseline", PALETTE[2], "alone"),
            ("point", PALETTE[0], "next to a CPU-bound thread"),
        ):
            mine = sub[sub["role"] == role]
            # the findings' statistic: the median over the rounds of each round's median
            m = mine.groupby("repeat")["latency_ms"].median().median() if "repeat" in mine else np.nan
            ax.hist(
                mine["latency_ms"].clip(lower=0.01),
                bins=bins,
                color=colour,
                alpha=0.7,
                label=f"{label} (median {num(m, 'ms')})",
            )
        ax.axvline(p["switch_interval_ms"], color="#444444", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_title(f"{p['interpreter']}, switch interval {p['switch_interval_ms']:g} ms", fontsize=10)
        ax.set_xlabel("wake-up delay per sleep (ms, log)")
        ax.set_ylabel("iterations")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # headroom: the legend above the bars, not across them
        ax.legend(fontsize=7, loc="upper left", frameon=True, framealpha=0.9, edgecolor="none")  # over the dotted line
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle("Convoy effect: how late a sleeping thread wakes (dotted: the switch interval)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def timeline_points(ctx: Context) -> list[dict]:
    """The default switch interval (5 ms, else the middle one) under every interpreter, from
    ``ctx.summary``."""
    summary = ctx.summary
    ok = summary[summary["status"] == "ok"]
    if ok.empty:
        return []
    intervals = sorted(ok["switch_interval_ms"].unique())
    pick = 5.0 if 5.0 in intervals else intervals[len(intervals) // 2]
    sub = ok[ok["switch_interval_ms"] == pick]
    return [{"interpreter": r["interpreter"], "switch_interval_ms": r["switch_interval_ms"]} for _, r in sub.iterrows()]


def fidelity(ctx: Context) -> list[dict]:
    """Under the GIL, the sleeper's median delay next to a CPU-bound thread is at least half
    the switch interval (the holder keeps the GIL until the interval has passed since the
    waiter asked: python/cpython#90204), at every interval of 1 ms and more; with the GIL off
    and a second CPU (``ctx.ncpu``, the available CPUs), under half of it. Reads
    ``ctx.summary`` (None when the experiment did not run: no checks)."""
    summary, ncpu = ctx.summary, ctx.ncpu
    if summary is None:
        return []
    rows = []
    for _, r in _ok(summary).iterrows():
        interval = float(r["switch_interval_ms"])
        gil = bool(r.get("gil_enabled", True))
        if interval < 1 or (not gil and ncpu < 2):
            continue
        state = "on" if gil else "off"
        what = f"Convoy ({r['interpreter']}, GIL {state}): median wake-up delay at {interval:g} ms interval"
        half = 0.5 * interval
        if gil:
            ok = r["latency_p50_ms"] >= half
            why = (
                "the waker waits for the GIL holder's switch interval",
                "the sleeper woke sooner than the GIL allows",
            )
            rows.append(check_row(what, f">= {half:g} ms", r["latency_p50_ms"], ok, *why))
        else:
            ok = r["latency_p50_ms"] < half
            why = ("without the GIL the sleeper wakes on its own CPU", "the sleeper waited as if for a lock")
            rows.append(check_row(what, f"< {half:g} ms", r["latency_p50_ms"], ok, *why))
    return rows


ANALYSIS = Analysis(
    findings=findings,
    headlines=headlines,
    figures={"convoy_latency": convoy_latency},
    timeline_points=timeline_points,
    fidelity=fidelity,
)
