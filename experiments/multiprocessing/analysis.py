"""Multiprocessing experiment, analysis: the best split of processes x threads, what
oversubscription cost, what the OpenMP wait policy changed (the measured cause of the cost),
the throughput chart and the points the timeline shows.

The best split and the cost of oversubscription are read under the default wait policy (what a
user gets without setting ``OMP_WAIT_POLICY``), or under the one policy measured; every other
policy is compared with it split by split."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.capacity import note, one_cpu_note
from analysis.findings import bound, fmt_transfer, fmt_x, headline_winner, measured, num, plural, unranked_text, winner
from analysis.plotting import (
    PALETTE,
    WHOLE_CORES_NOTE,
    baseline_text,
    cpus_text,
    mark_oversubscribed,
    mark_whole_cores,
    plt,
    speedup_line,
    speedup_note,
    speedup_top,
)
from analysis.timelines import point_of
from lab.contract import Analysis, Context

KEYS = ("processes", "threads", "omp_wait_policy")

#: The wait policy that leaves ``OMP_WAIT_POLICY`` unset.
DEFAULT = "default"

#: What a waiting OpenMP thread does under each policy (libgomp's manual, "OMP_WAIT_POLICY").
WAITS = {"default": "spin, then sleep", "passive": "sleep at once", "active": "spin"}


def _split(row) -> str:
    policy = str(row.get("omp_wait_policy", DEFAULT))
    tail = "" if policy == DEFAULT else f" (OMP_WAIT_POLICY={policy})"
    return f"{int(row['processes'])} x {int(row['threads'])}{tail}"


def _main(ok):
    """The rows of the default wait policy, or of the one policy measured (the first in
    ``ok``'s order) where the default was not."""
    policies = ok["omp_wait_policy"].astype(str)
    main = DEFAULT if (policies == DEFAULT).any() or ok.empty else policies.iloc[0]
    return ok[policies == main]


def findings(ctx: Context) -> list[str]:
    """The best split (or that none is clearly faster than 1 x 1) and, if any point was
    oversubscribed, the worst of those against it, both under the default wait policy; then
    each other wait policy against the default (:func:`policy_findings`). Reads ``ctx.summary``
    and ``ctx.host`` (its available CPUs, what was measured while a point ran)."""
    summary, host = ctx.summary, ctx.host
    every = measured(summary)
    if every.empty:
        return []
    ok = _main(every)
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
    return out + policy_findings(every, ncpu) + capped_findings(ctx.replicates)


def _capped(replicates) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The point's own ``ok`` rows of ``replicates`` and those of them whose window reached
    ``max_window_s`` (fewer ``steps_done`` than ``processes x steps``); both empty for results
    from before the cap (no ``steps_done`` column) or without replicates."""
    if replicates is None or "steps_done" not in replicates or "max_window_s" not in replicates:
        return pd.DataFrame(), pd.DataFrame()
    rows = replicates[(replicates["role"] == "point") & (replicates["status"] == "ok")]
    return rows, rows[rows["steps_done"] < rows["processes"] * rows["steps"]]


def capped_findings(replicates) -> list[str]:
    """One sentence naming the points whose windows reached ``max_window_s``, with the steps
    those windows got done (the least and the most) of the ``processes x steps`` each had (from ``ctx.replicates``: the
    point's own ``ok`` rows; results from before the cap have no ``steps_done`` and give none)."""
    rows, capped = _capped(replicates)
    if capped.empty:
        return []
    parts = []
    for (proc, thr, policy), g in capped.groupby(["processes", "threads", "omp_wait_policy"], sort=False):
        everyone = rows[(rows["processes"] == proc) & (rows["threads"] == thr) & (rows["omp_wait_policy"] == policy)]
        done = g["steps_done"].astype(int)  # the capped windows' own: an uncapped one did it all
        which = f"all {len(g)} windows" if len(g) == len(everyone) else f"{len(g)} of its {len(everyone)} windows"
        steps = int(everyone["steps"].iloc[0])
        planned = f"{int(proc) * steps} steps" + (f" ({int(proc)} processes x {steps})" if int(proc) > 1 else "")
        got = f"{done.min()}" if done.min() == done.max() else f"{done.min()}-{done.max()}"
        parts.append(f"{_split(everyone.iloc[0])}: {which}, {got} of {planned} done")
    cap = float(capped["max_window_s"].iloc[0])
    return [
        f"Windows that reached the {num(cap, 's')} cap (`max_window_s`) ended there with their work unfinished,"
        f" and samples/s counts the steps done: {'; '.join(parts)}."
    ]


def _ci(row) -> str:
    """``0.62-2.00``: a row's speedup CI, its bounds as :func:`analysis.findings.bound` writes them."""
    return f"{bound(row['speedup_ci_low'])}-{bound(row['speedup_ci_high'])}"


def _verdict(other, base) -> int:
    """1 where ``other``'s speedup CI lies above ``base``'s, -1 below, 0 where they overlap."""
    if other["speedup_ci_low"] > base["speedup_ci_high"]:
        return 1
    return -1 if other["speedup_ci_high"] < base["speedup_ci_low"] else 0


def _waited(base, other) -> str:
    """`` (the kernel's CPU pressure: threads waited for a CPU 97% of the time under the default,
    41% under passive)``: the medians of each point's own windows' ``cpu_wait_pct``; "" without it."""
    waits = [base.get("cpu_wait_pct"), other.get("cpu_wait_pct")]
    if not all(w is not None and np.isfinite(w) for w in waits):
        return ""
    return (
        f" (the kernel's CPU pressure: threads waited for a CPU {waits[0]:.0f}% of the time under the default,"
        f" {waits[1]:.0f}% under {other['omp_wait_policy']})"
    )


def _pair_text(base, other, ncpu) -> str:
    """One split under two wait policies: each speedup with its CPU utilisation, and what the
    difference says (the cause, where the intervals part)."""
    p, t = int(base["processes"]), int(base["threads"])
    over = bool(base["oversubscribed"])
    head = f"{p} x {t}{', oversubscribed' if over else ''}: {fmt_x(other)} of 1 x 1 at {other['cpu_util_pct']:.0f}% CPU"
    head += f" against {fmt_x(base)} at {base['cpu_util_pct']:.0f}%"
    verdict = _verdict(other, base)
    if verdict == 0:
        return f"{head}, no clear difference"
    # the ratio of the two speedups, each over 1 x 1 in its own job, as the verdict judges: the
    # ratio of the two jobs' medians would carry the machine's drift between them
    ratio = other["speedup"] / base["speedup"]
    if verdict > 0 and over:
        why = (
            f"{ratio:.1f}x the default's speedup over 1 x 1: with {p * t} threads on {plural(int(ncpu), 'CPU')},"
            " threads that spin while they wait held the CPUs the other threads needed" + _waited(base, other)
        )
    elif verdict > 0:
        why = f"{ratio:.1f}x the default's speedup over 1 x 1"
    elif not over:
        why = (
            f"{1 / ratio:.1f}x below the default's speedup over 1 x 1: every thread had a CPU, and a thread that"
            " sleeps while it waits wakes late for every operation"
        )
    else:
        why = f"{1 / ratio:.1f}x below the default's speedup over 1 x 1"
    return f"{head}, clearly {'faster' if verdict > 0 else 'slower'}: {why}"


def policy_findings(every, ncpu) -> list[str]:
    """One sentence per wait policy other than the default: every split with more than one
    thread per process (a team whose threads wait for each other) measured under both, compared
    by their speedups over 1 x 1 of the same policy; their 95% CIs decide "clearly"."""
    if ncpu is None or "omp_wait_policy" not in every:
        return []
    teams = every[every["threads"] > 1]
    base = teams[teams["omp_wait_policy"].astype(str) == DEFAULT]
    out = []
    for policy, sub in teams[teams["omp_wait_policy"].astype(str) != DEFAULT].groupby("omp_wait_policy"):
        pairs = []
        for _, row in sub.sort_values(["threads", "processes"]).iterrows():
            match = base[(base["processes"] == row["processes"]) & (base["threads"] == row["threads"])]
            if len(match):
                pairs.append(_pair_text(match.iloc[0], row, ncpu))
        if pairs:
            head = f"OpenMP wait policy {policy} (waiting threads {WAITS.get(str(policy), policy)}) against the default"
            out.append(f"{head} ({WAITS[DEFAULT]}): " + "; ".join(pairs) + ".")
    return out


def headlines(ctx: Context) -> list[dict]:
    """The best processes x threads split for training under the default wait policy (and a
    faster one under another policy), and where an oversubscribed split was measured under two
    policies, what the other made of it; from ``ctx.summary``."""
    ok = _main(measured(ctx.summary))
    if ok.empty:
        return []
    best = headline_winner(ok)
    if best is None:
        answer = "no clear winner: no split clearly faster than 1 x 1"
    elif best["processes"] == 1 and best["threads"] == 1:
        answer = "1 x 1: every other split clearly slower"
    else:
        answer = f"{int(best['processes'])} x {int(best['threads'])}, over 1 x 1: {fmt_transfer(best)}"
        answer += unranked_text(ok, best, _split, short=True)
    answer += _better_elsewhere(measured(ctx.summary), ok, best)
    out = [{"question": "How many training processes x intra-op threads?", "answer": answer}]
    return out + _policy_headline(measured(ctx.summary), ctx.replicates)


def _better_elsewhere(every, main, best) -> str:
    """``"; with OMP_WAIT_POLICY=passive: 2 x 2 at 1.32x (95% CI ...)"`` for each other wait
    policy whose clear winner has a higher speedup than ``best`` (of ``main``, the default
    policy's points), each over 1 x 1 of its own policy; "" where none has."""
    out = ""
    others = every.drop(index=main.index)
    others = others[others["threads"] > 1]  # with one thread per process no policy changes anything
    for policy, grp in others.groupby(others["omp_wait_policy"].astype(str)):
        w = winner(grp)
        if w is None or w.get("speedup_source") == "baseline":
            continue
        if best is None or best.get("speedup_source") == "baseline" or w["speedup"] > best["speedup"]:
            split = f"{int(w['processes'])} x {int(w['threads'])}"
            out += f"; with OMP_WAIT_POLICY={policy}: {split} at {fmt_x(w, 'rerun')}"
    return out


def _capped_x(replicates, row) -> str:
    """``row``'s speedup as :func:`fmt_x` gives it with its rerun interval, and where windows of
    its point reached ``max_window_s`` how many, inside the same brackets: ``0.26x (95% rerun
    interval 0.067-0.63; 1 of 6 windows stopped at the 2 s cap)`` (:func:`_cap_note`)."""
    text, note = fmt_x(row, "rerun"), _cap_note(replicates, row)
    if not note:
        return text
    return f"{text[:-1]}; {note})" if text.endswith(")") else f"{text} ({note})"


def _cap_note(replicates, row) -> str:
    """``"3 of 6 windows stopped at the 2 s cap"`` where windows of ``row``'s point reached
    ``max_window_s`` (:func:`_capped`; its speedup then counts the steps done, and its interval
    spans what the cap let through); "" where none did."""
    rows, capped = _capped(replicates)
    if capped.empty:
        return ""

    def mine(t):
        same = (t["processes"] == row["processes"]) & (t["threads"] == row["threads"])
        return t[same & (t["omp_wait_policy"].astype(str) == str(row["omp_wait_policy"]))]

    n, k = len(mine(rows)), len(mine(capped))
    if not k:
        return ""
    cap = float(capped["max_window_s"].iloc[0])
    return f"{'all ' if k == n else ''}{k}{'' if k == n else f' of {n}'} windows stopped at the {num(cap, 's')} cap"


def _policy_headline(every, replicates=None) -> list[dict]:
    """Where an oversubscribed split was measured under the default wait policy and another:
    what the other made of it (the cause of oversubscription's cost, measured), each figure
    with how many of its windows stopped at the ``max_window_s`` cap (:func:`_capped_x`)."""
    over = every[every["oversubscribed"].astype(bool) & (every["threads"] > 1)]
    base = over[over["omp_wait_policy"].astype(str) == DEFAULT]
    if base.empty:
        return []
    worst = base.loc[base["median"].idxmin()]
    same = (over["processes"] == worst["processes"]) & (over["threads"] == worst["threads"])
    others = over[same & (over["omp_wait_policy"].astype(str) != DEFAULT)]
    if others.empty:
        return []
    other = others.loc[others["median"].idxmax()]
    policy = other["omp_wait_policy"]
    verdict = {1: f"{policy} clearly faster", -1: f"{policy} clearly slower", 0: "no clear difference"}
    v = _verdict(other, worst)
    # the screen gives rerun intervals, which can overlap where the CIs that decide do not: name those
    why = f": their 95% CIs {_ci(other)} against {_ci(worst)}" if v else ""
    answer = (
        f"at {_split(worst)}, OMP_WAIT_POLICY={policy} {_capped_x(replicates, other)} of 1 x 1"
        f" against {_capped_x(replicates, worst)} with the default ({verdict[v]}{why})"
    )
    return [{"question": "What does oversubscription's cost come from?", "answer": answer}]


def multiprocessing_throughput(ctx: Context) -> Figure:
    """Speedup of total training samples/s over 1 process x 1 thread (of the same OpenMP wait
    policy), against processes, one colour per threads-per-process and one line style per wait
    policy (dashed: not the default, drawn a little to the right); oversubscribed points marked.
    Reads ``ctx.summary`` and ``ctx.host`` (its available CPUs: the ideal line)."""
    summary, host = ctx.summary, ctx.host
    fig, ax = plt.subplots(figsize=(13, 5.4))  # as wide as its one-line note below
    ncpu = host.get("available_cpus")
    threads_order = sorted(summary["threads"].unique())
    policies = sorted(summary["omp_wait_policy"].astype(str).unique(), key=lambda v: (v != DEFAULT, v))
    top = speedup_top(summary, ncpu or 1)
    whole = False
    for (policy, threads), sub in summary.groupby([summary["omp_wait_policy"].astype(str), "threads"]):
        sub = sub.sort_values("processes")
        label = f"{plural(threads, 'thread')} per process"
        label += "" if policy == DEFAULT else f", OMP_WAIT_POLICY={policy}"
        colour = PALETTE[threads_order.index(threads) % len(PALETTE)]
        speedup_line(
            ax, _x(sub, policies), sub, colour, label=label, linestyle="-" if policy == DEFAULT else "--", top=top
        )
        over = sub[sub["oversubscribed"].astype(bool)]
        mark_oversubscribed(ax, _x(over, policies), over["speedup"], "P x T")
        whole |= bool(mark_whole_cores(ax, _x(sub, policies) + 0.02, sub).any())  # beside the point's own CI
    _mark_capped(ax, summary, ctx.replicates, policies)
    if ncpu:
        label = f"{'the' if ncpu == 1 else 'all'} {cpus_text(ncpu)} busy (ideal)"
        ax.axhline(ncpu, color="#444444", linestyle=":", linewidth=1, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    # below the axes, in two columns: to their right it took more width than the data
    ax.legend(uniq.values(), uniq.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=9)
    ax.set_xticks(sorted(summary["processes"].unique()))
    ax.set_xlabel("training processes (P)")
    ax.set_ylabel("speedup of total samples/s over 1 x 1 (x)")
    ax.set_ylim(0, top)
    base = summary[summary["omp_wait_policy"].astype(str) == policies[0]]
    ax.set_title(
        f"torch.multiprocessing: P processes x T threads on {cpus_text(ncpu)} available\n"
        f"({baseline_text(base, 'samples/s')} at 1 x 1{'' if policies == [DEFAULT] else ', default wait policy'})",
        fontsize=10,
    )
    waits = "" if policies == [DEFAULT] else " Dashed: OMP_WAIT_POLICY as labelled; solid: unset (the default)."
    diamond = WHOLE_CORES_NOTE if whole else ""
    marks = " Orange square: oversubscribed; arrowhead: a CI above the axis (its bound beside it)."
    speedup_note(fig, marks + diamond + waits)
    fig.tight_layout(rect=(0, 0.07 if whole else 0.03, 1, 1))  # room for the longer footnote
    return fig


def _x(rows: pd.DataFrame, policies: list[str]):
    """The x of ``rows``: processes, drawn 3% to the right per wait policy after the first, as
    each policy's line is."""
    return rows["processes"] * (1 + 0.03 * rows["omp_wait_policy"].astype(str).map(policies.index))


def _marks(ax, rows: pd.DataFrame, policies: list[str], **style) -> None:
    """A marker on each of ``rows`` at its speedup (``style``: matplotlib's scatter keywords)."""
    if len(rows):
        ax.scatter(_x(rows, policies), rows["speedup"], linewidths=1.5, **style)


def _mark_capped(ax, summary: pd.DataFrame, replicates, policies: list[str]) -> None:
    """A black x on each point of ``summary`` with a window that reached ``max_window_s``
    (:func:`_capped`)."""
    capped = _capped(replicates)[1]
    if capped.empty:
        return
    keys = ["processes", "threads", "omp_wait_policy"]
    types = {"processes": int, "threads": int, "omp_wait_policy": str}
    hit = summary.astype(types).merge(capped[keys].astype(types).drop_duplicates(), on=keys)
    label = f"window reached max_window_s ({num(float(capped['max_window_s'].iloc[0]), 's')}): work unfinished"
    _marks(ax, hit, policies, s=60, marker="x", color="black", zorder=6, label=label)


def timeline_points(ctx: Context) -> list[dict]:
    """1 x 1, the best point and the point with the most threads in all (P x T) under the
    default wait policy (or the one measured), then that last split under another policy where
    one was measured, from ``ctx.summary``; each point once."""
    summary = ctx.summary
    ok = summary[summary["status"] == "ok"]
    if ok.empty:
        return []
    main = _main(ok)
    base = main[(main["processes"] == 1) & (main["threads"] == 1)]
    best = main[main["best"]]
    most = main.loc[[(main["processes"] * main["threads"]).idxmax()]]
    top = most.iloc[0]
    policy = ok["omp_wait_policy"].astype(str)
    alt = ok[
        (ok["processes"] == top["processes"])
        & (ok["threads"] == top["threads"])
        & (policy != str(top["omp_wait_policy"]))
    ]
    points = [point_of(r, KEYS) for part in (base, best, most, alt) for _, r in part.head(1).iterrows()]
    return [p for i, p in enumerate(points) if p not in points[:i]]


ANALYSIS = Analysis(
    findings=findings,
    headlines=headlines,
    figures={"multiprocessing_throughput": multiprocessing_throughput},
    timeline_points=timeline_points,
)
