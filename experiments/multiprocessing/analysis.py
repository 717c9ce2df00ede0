"""Multiprocessing experiment, analysis: the best split of processes x threads, what
oversubscription cost, the throughput chart and the points the timeline shows."""

from __future__ import annotations

from matplotlib.figure import Figure

from analysis.capacity import note, one_cpu_note
from analysis.findings import fmt_transfer, fmt_x, measured, num, plural, unranked_text, winner
from analysis.plotting import PALETTE, baseline_text, cpus_text, plt, speedup_line, speedup_note
from analysis.timelines import point_of
from lab.contract import Analysis, Context

KEYS = ("processes", "threads")


def _split(row) -> str:
    return f"{int(row['processes'])} x {int(row['threads'])}"


def findings(ctx: Context) -> list[str]:
    """The best split (or that none is clearly faster than 1 x 1) and, if any point was
    oversubscribed, the worst of those against it. Reads ``ctx.summary`` and ``ctx.host`` (its
    available CPUs, what was measured while a point ran)."""
    summary, host = ctx.summary, ctx.host
    ok = measured(summary)
    if ok.empty:
        return []
    best = winner(ok)
    ncpu = host.get("available_cpus")
    if best is None:
        out = [f"No split was clearly faster than 1 process x 1 thread (no clear winner){one_cpu_note(host, 2)}."]
    elif best["processes"] == 1 and best["threads"] == 1:
        out = ["Best split: 1 process x 1 thread; every other split was clearly slower."]
    else:
        out = [
            f"Best split: {plural(int(best['processes']), 'process', 'processes')} x "
            f"{plural(int(best['threads']), 'thread')} at "
            f"{num(best['median'], 'samples/s')}, {fmt_x(best)} over 1 x 1 "
            f"(parallel efficiency {best['parallel_efficiency']:.0%})"
            f"{note(best, host, best['processes'] * best['threads'])}{unranked_text(ok, best, _split)}."
        ]
    over = ok[ok["oversubscribed"]]
    if len(over):
        worst = over.loc[over["median"].idxmin()]
        p, t = int(worst["processes"]), int(worst["threads"])
        than = f"the best split gave {best['speedup']:.2f}x" if best is not None else "no split was clearly faster"
        than = than if best is None or best["speedup_source"] != "baseline" else "1 x 1 was the best split"
        out.append(
            f"Oversubscribed ({p} x {t} = {p * t} threads on {ncpu} available CPU{'s' if ncpu != 1 else ''}): "
            f"{fmt_x(worst)} of 1 x 1 where {than}{note(worst, host, p * t)}."
        )
    return out


def headlines(ctx: Context) -> list[dict]:
    """The best processes x threads split for training, from ``ctx.summary``."""
    summary = ctx.summary
    ok = measured(summary)
    if ok.empty:
        return []
    best = winner(ok)
    if best is None:
        answer = "no clear winner: no split clearly faster than 1 x 1"
    elif best["processes"] == 1 and best["threads"] == 1:
        answer = "1 x 1: every other split clearly slower"
    else:
        answer = f"{int(best['processes'])} x {int(best['threads'])}, over 1 x 1: {fmt_transfer(best)}"
        answer += unranked_text(ok, best, _split, short=True)
    return [{"question": "How many training processes x intra-op threads?", "answer": answer}]


def multiprocessing_throughput(ctx: Context) -> Figure:
    """Speedup of total training samples/s over 1 process x 1 thread, against processes, one
    line per threads-per-process; oversubscribed points marked. Reads ``ctx.summary`` and
    ``ctx.host`` (its available CPUs: the ideal line)."""
    summary, host = ctx.summary, ctx.host
    fig, ax = plt.subplots(figsize=(9.5, 4.4))
    ncpu = host.get("available_cpus")
    for j, (threads, sub) in enumerate(summary.groupby("threads")):
        sub = sub.sort_values("processes")
        speedup_line(
            ax, sub["processes"], sub, PALETTE[j % len(PALETTE)], label=f"{plural(threads, 'thread')} per process"
        )
        over = sub[sub["oversubscribed"].astype(bool)]
        if len(over):
            ax.scatter(
                over["processes"],
                over["speedup"],
                s=110,
                marker="s",
                facecolors="none",
                edgecolors="#D55E00",
                linewidths=1.5,
                zorder=5,
                label="oversubscribed (P x T > available CPUs)",
            )
    if ncpu:
        label = f"{'the' if ncpu == 1 else 'all'} {cpus_text(ncpu)} busy (ideal)"
        ax.axhline(ncpu, color="#444444", linestyle=":", linewidth=1, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    ax.set_xticks(sorted(summary["processes"].unique()))
    ax.set_xlabel("training processes (P)")
    ax.set_ylabel("speedup of total samples/s over 1 x 1 (x)")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"torch.multiprocessing: P processes x T threads on {cpus_text(ncpu)} available\n"
        f"({baseline_text(summary, 'samples/s')} at 1 x 1)",
        fontsize=10,
    )
    speedup_note(fig, " Orange square: oversubscribed.")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def timeline_points(ctx: Context) -> list[dict]:
    """1 x 1, the best point and the point with the most threads in all (P x T), from
    ``ctx.summary``."""
    summary = ctx.summary
    ok = summary[summary["status"] == "ok"]
    if ok.empty:
        return []
    base = ok[(ok["processes"] == 1) & (ok["threads"] == 1)]
    best = ok[ok["best"]]
    most = ok.loc[[(ok["processes"] * ok["threads"]).idxmax()]]
    return [point_of(r, KEYS) for part in (base, best, most) for _, r in part.head(1).iterrows()]


ANALYSIS = Analysis(
    findings=findings,
    headlines=headlines,
    figures={"multiprocessing_throughput": multiprocessing_throughput},
    timeline_points=timeline_points,
)
