"""Intra-op threads experiment, analysis: the best thread count per workload, bfloat16 against
float32, the scaling chart, and the theory check that dense matmul scales with the CPUs."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.capacity import capacity_reason, cpus_used, machine_took, note, one_cpu_note
from analysis.fidelity import scaling_check
from analysis.findings import (
    best_row,
    fmt_transfer,
    fmt_x,
    headline_winner,
    measured,
    num,
    pick,
    plural,
    unranked_text,
    winner,
)
from analysis.plotting import (
    PALETTE,
    baseline_text,
    cpus_text,
    mark_oversubscribed,
    not_measured_panel,
    plt,
    speedup_line,
    speedup_note,
    speedup_top,
)
from experiments.intraop import EXPERIMENT, WORKLOADS
from lab.contract import Analysis, Context

#: A point whose windows kept fewer CPUs busy than this share of the CPUs its threads could use
#: (with nothing else measured taking them) did not run its work on all of its threads (a 1024^2
#: bfloat16 matmul on 2 threads keeps 1.00 CPU busy on the AMX Xeon VM, 2048^2 keeps 1.99:
#: docs/benchmarks.md).
IDLE_THREADS_SHARE = 0.75


def _threads(row) -> str:
    return plural(int(row["threads"]), "thread")


def idle_threads_note(r, ncpu: int, host: dict | None = None) -> str:
    """``: its windows kept 1.00 CPUs busy of the 2 its threads could use, ...`` where a point
    with 2 or more threads kept fewer than :data:`IDLE_THREADS_SHARE` of the CPUs they could use
    (``min(threads, ncpu)``) busy, by its median ``cpu_util_pct`` (% of the ``ncpu`` available
    CPUs), while nothing else measured took them (:func:`~analysis.capacity.machine_took`).
    Then the idle CPUs are the work's own: a measured cause of its low parallel efficiency. Else ``""``."""
    threads = min(int(r["threads"]), ncpu)
    used = cpus_used(r, ncpu)
    if threads < 2 or not np.isfinite(used) or used >= IDLE_THREADS_SHARE * threads:
        return ""
    if machine_took(r, host, threads):
        return ""
    return (
        f": its windows kept {cpus_text(used)} busy of the {threads} its threads could use, so its"
        " work ran on fewer threads than it was given"
    )


def _workload_finding(workload: str, sub: pd.DataFrame, host: dict) -> str:
    ncpu = host.get("available_cpus")
    best = winner(sub)
    if best is None:
        one = pick(sub, threads=1)
        s = f"{workload}: no clear winner, no thread count was clearly faster than 1 thread"
        s += f" ({num(one['median'], EXPERIMENT.unit(one['metric']))} at 1 thread)" if one is not None else ""
    else:
        unit = EXPERIMENT.unit(best["metric"])
        s = f"{workload}: best at {plural(int(best['threads']), 'thread')}, {num(best['median'], unit)}"
        s += f", {fmt_x(best)} over 1 thread{note(best, host, best['threads'])}" if int(best["threads"]) != 1 else ""
        s += unranked_text(sub, best, _threads)
    at_n = pick(sub, threads=ncpu) if ncpu else None
    if at_n is not None and ncpu > 1:
        s += f"; at {ncpu} threads (all available CPUs) parallel efficiency {at_n['parallel_efficiency']:.0%}"
        s += idle_threads_note(at_n, ncpu, host)
        s += note(at_n, host, ncpu) if best is None or at_n["threads"] != best["threads"] else ""
    s += one_cpu_note(host, max(sub["threads"]))
    over = sub[sub["oversubscribed"]]
    if len(over):
        o = over.iloc[-1]
        s += f"; oversubscribed at {int(o['threads'])} threads: {o['speedup']:.2f}x"
    return s + "."


def _bf16_finding(summary: pd.DataFrame) -> list[str]:
    fp32, bf16 = (measured(summary[summary["workload"] == w]) for w in ("matmul", "matmul_bf16"))
    if not (len(fp32) and len(bf16)):
        return []
    a, b = best_row(fp32), best_row(bf16)
    return [
        f"bfloat16 over float32 matmul, each at its best thread count: {b['median'] / a['median']:.2f}x "
        f"({num(b['median'], 'GFLOP/s')} against {num(a['median'], 'GFLOP/s')}; medians of separate jobs, "
        "not interleaved)" + ("." if b["median"] > a["median"] else ": on this CPU bfloat16 matmul does not pay off.")
    ]


def findings(ctx: Context) -> list[str]:
    """Per workload the best thread count and the efficiency at all CPUs (or why it was not
    measured); bfloat16 against float32 where both were measured. Reads ``ctx.summary`` and
    ``ctx.host`` (its available CPUs, what was measured while a point ran)."""
    summary, host = ctx.summary, ctx.host
    out = []
    for workload in summary["workload"].unique():
        sub = measured(summary[summary["workload"] == workload])
        if sub.empty:
            first = summary[summary["workload"] == workload].iloc[0]
            why = f": {first['reason']}" if first["reason"] else ""
            out.append(f"{workload}: not measured ({first['status']}){why}.")
        else:
            out.append(_workload_finding(workload, sub, host))
    return out + _bf16_finding(summary)


def headlines(ctx: Context) -> list[dict]:
    """The best intra-op thread count per workload, and whether bfloat16 pays for the one
    operator measured, a square matmul of the config's size: said in the question, since a
    matmul's gain is not a model's (``topic`` ``precision``, ``scope`` ``operator``: the report
    puts a model's own figure first where the workload measured one). Reads ``ctx.summary`` and
    ``ctx.replicates`` (its ``matmul_size`` column, where present; "one matmul" without it)."""
    summary, replicates = ctx.summary, ctx.replicates
    parts = []
    for workload in summary["workload"].unique():
        sub = measured(summary[summary["workload"] == workload])
        if len(sub):
            best = headline_winner(sub)
            gain = f" ({fmt_transfer(best)})" if best is not None and int(best["threads"]) != 1 else ""
            if best is not None and bool(best.get("oversubscribed")):  # more threads than CPUs won: say so
                cpus = cpus_text(ctx.host.get("available_cpus"))
                gain = f" threads on {cpus} available, oversubscribed{gain}"
            answer = f"{int(best['threads'])}{gain}" if best is not None else "no clear winner"
            answer += unranked_text(sub, best, _threads, short=True)
            parts.append(f"{workload}: {answer}")
    out = [{"question": "The best intra-op thread count per workload?", "answer": "; ".join(parts)}] if parts else []
    fp32, bf16 = (measured(summary[summary["workload"] == w]) for w in ("matmul", "matmul_bf16"))
    has_size = replicates is not None and "matmul_size" in replicates
    sizes = replicates["matmul_size"].dropna() if has_size else []
    n = int(sizes.iloc[0]) if len(sizes) else None
    one = f"a {n}x{n} float matmul" if n else "one matmul"
    both = bool(len(fp32) and len(bf16))
    if both:
        ratio = best_row(bf16)["median"] / best_row(fp32)["median"]
        answer = (
            f"for {one} only: bfloat16 {ratio:.2f}x the GFLOP/s of float32 (best of each; separate jobs);"
            " a model's gain is smaller and can be a loss: measure it with the workload experiment"
        )
    else:
        why = summary.loc[summary["workload"] == "matmul_bf16", "reason"]
        answer = f"not measured: {why.iloc[0]}" if len(why) and why.iloc[0] else ""
    if answer:
        question = f"Does bfloat16 pay on this CPU, for {one}?"
        line = {"question": question, "answer": answer, "topic": "precision", "scope": "operator"}
        out.append(line if both else line | {"measured": False})
    return out


def _scaling_panel(ax, sub: pd.DataFrame, colour: str, title: str, ncpu) -> None:
    unit = EXPERIMENT.unit(sub["metric"].iloc[0])
    top = speedup_top(sub, ncpu or 1)
    speedup_line(ax, sub["threads"], sub, colour, top=top)
    over = sub[sub["oversubscribed"].astype(bool)]
    mark_oversubscribed(ax, over["threads"], over["speedup"], "threads")
    if ncpu:
        ax.plot([1, ncpu], [1, ncpu], ":", color="#444444", label="ideal (linear)")
        label = f"{cpus_text(ncpu)} available"
        ax.axvline(ncpu, color="#D55E00", linestyle="--", linewidth=1, alpha=0.5, zorder=0, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(sub["threads"])
    ax.set_xlabel("intra-op threads (torch.set_num_threads)")
    ax.set_ylabel("speedup over 1 thread (x)")
    ax.set_ylim(0, top)
    ax.set_title(f"{title}\n({baseline_text(sub, unit)} at 1 thread)", fontsize=10)


def intraop_scaling(ctx: Context) -> Figure:
    """Speedup over 1 intra-op thread against threads per workload, with ideal linear scaling.
    Reads ``ctx.summary`` and ``ctx.host`` (its available CPUs: the ideal line's end).

    A workload without any measured point (e.g. ``matmul_bf16`` skipped on a CPU without
    native bf16) gets a panel that says so and why, instead of an empty axis."""
    summary, host = ctx.summary, ctx.host
    workloads = list(summary["workload"].unique())
    ncpu = host.get("available_cpus")
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads), 4.8), squeeze=False)
    for ax, wl, c in zip(axes[0], workloads, PALETTE):
        sub = summary[summary["workload"] == wl].sort_values("threads")
        if not sub["speedup"].notna().any():
            not_measured_panel(ax, WORKLOADS.get(wl, wl), sub)
        else:
            _scaling_panel(ax, sub, c, WORKLOADS.get(wl, wl), ncpu)
    fig.suptitle("Intra-op threads", fontsize=11)
    speedup_note(fig, " Orange square: oversubscribed; arrowhead: a CI above the axis (its bound beside it).")
    # one legend beneath the panels (a new user read the same one three times; inside a panel the
    # ideal line and the CPU count's line leave it no free corner); each panel's line is its data
    shown = {label: h for ax in axes[0] for h, label in zip(*ax.get_legend_handles_labels())}
    if shown:
        fig.legend(shown.values(), shown.keys(), loc="lower center", bbox_to_anchor=(0.5, 0.07), ncol=len(shown))
    fig.tight_layout(rect=(0, 0.12 if shown else 0.03, 1, 1))
    return fig


def fidelity(ctx: Context) -> list[dict]:
    """Theory check: 1024^2 matmul GFLOP/s with threads = available CPUs (``ctx.ncpu``) over 1
    thread, at least 0.75 x the CPUs the machine delivered to them in the same rounds (the
    capacity probe; the available CPUs where it did not run): dense matmul is compute-bound and
    splits evenly over cores. Reads ``ctx.summary`` (None when the experiment did not run) and
    ``ctx.host`` (what was measured while it ran, for the reason of a warning)."""
    summary, ncpu, host = ctx.summary, ctx.ncpu, ctx.host
    generic = (
        "no quota throttling, steal, other process or SMT sibling was measured; memory bandwidth is what "
        "remains (possibility, not measured)"
    )
    row = scaling_check(
        summary if ncpu > 1 else None,
        {"workload": "matmul", "threads": ncpu},
        f"matmul GFLOP/s: {plural(ncpu, 'thread')} over 1",
        ncpu,
        0.75,
        "dense matmul splits evenly over cores",
        lambda r, s: capacity_reason(r, s, ncpu, generic, host, f"matmul on {plural(ncpu, 'thread')}"),
    )
    return [row]


ANALYSIS = Analysis(
    findings=findings,
    headlines=headlines,
    figures={"intraop_scaling": intraop_scaling},
    fidelity=fidelity,
)
