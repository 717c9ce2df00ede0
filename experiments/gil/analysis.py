"""GIL experiment, analysis: findings, the seed article's timings beside ours, the speedup chart,
the points the timeline shows, and the theory checks (threads about 1x, sleepers N x, processes
scaling with CPUs)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import plotting
from analysis.capacity import cpus_text, note, one_cpu_note
from analysis.findings import fmt_transfer, fmt_x, in_order, lead_view, pick, transfer_case, unranked, winner
from analysis.plotting import SPEEDUP, bar_legend, hatch_noisy, mark_whole_cores, plt, yerr
from experiments.gil import MODES, WORKLOADS, checks, shortfall
from experiments.gil.checks import gil_on, with_interpreter
from lab.contract import Analysis, Context
from lab.interpreters import DEFAULT, named

#: The label of the pipeline's own Python in the default config: the timeline's reference.
DEFAULT_LABEL = DEFAULT[0]["label"]

#: The seed article's published timings (002_c724ca3a57c5b9fb: 4-core i5-4460, Python 3.5),
#: sequential against two threads, in seconds.
SEED_TIMINGS = {
    "cpu": {"sequential_s": 71.47, "threads_s": 72.08},
    "io": {"sequential_s": 42.10, "threads_s": 22.01},
}
SEED_MACHINE = "4-core Intel i5-4460, Python 3.5"

MODE_COLOURS = {"sequential": "#999999", "threads": "#0072B2", "processes": "#E69F00"}


def _threads_verdict(r: pd.Series, paced: str = "") -> str:
    """What the CPU-bound threads' speedup says about the GIL, from its CI; above 1x, with the
    loop's own pace in the threads where it was measured to differ (``paced``,
    :func:`experiments.gil.shortfall.pace`)."""
    hi = r["speedup_ci_high"] if np.isfinite(r["speedup_ci_high"]) else r["speedup"]
    lo = r["speedup_ci_low"] if np.isfinite(r["speedup_ci_low"]) else r["speedup"]
    if lo > 1 and paced:
        return f"Threads running pure-Python bytecode gave {r['speedup']:.2f}x (95% CI {lo:.2f}-{hi:.2f}), and {paced}"
    if hi < 0.85:
        return (
            f"Threads running pure-Python bytecode were slower than sequential ({r['speedup']:.2f}x), "
            "as they also spend time handing the GIL to each other"
        )
    if hi <= 1.15:
        return f"As the GIL predicts, threads running pure-Python bytecode gave no gain ({r['speedup']:.2f}x)"
    if lo > 1.15:
        return (
            f"Threads running pure-Python bytecode measured {r['speedup']:.2f}x, more than the GIL allows "
            "(about 1x): the sequential and threaded runs probably met different machine load; see the IQR"
        )
    if lo > 1:
        return (
            f"Threads running pure-Python bytecode gave {r['speedup']:.2f}x (95% CI {lo:.2f}-{hi:.2f}), above 1x"
            " and not clearly above the 1.15x that the theory check allows the GIL with measurement noise"
        )
    return f"Threads running pure-Python bytecode gave {r['speedup']:.2f}x, not clearly different from 1x"


def labels(summary: pd.DataFrame, host: dict) -> list[str]:
    """The labels of the interpreters ``summary`` has measurements of (a speedup), in config
    order (``host["interpreters"]``); one that did not run has its reason in the status table."""
    order = [e["label"] for e in host.get("interpreters", [])]
    measured = summary[summary["speedup"].notna()] if "speedup" in summary.columns else summary
    present = list(dict.fromkeys(measured["interpreter"].astype(str)))
    return [x for x in order if x in present] + [x for x in present if x not in order]


def name(label: str, host: dict) -> str:
    """``3.13t (CPython 3.13.5, free-threaded build, GIL off (PYTHON_GIL=0))``."""
    return named(label, host)


def _point_lines(summary: pd.DataFrame, label: str, prefix: str, host: dict) -> list[str]:
    out = []
    sub = summary[summary["interpreter"] == label]
    for workload in in_order(sub["workload"], WORKLOADS):
        for workers in sorted(sub.loc[sub["workload"] == workload, "workers"].unique()):
            parts = []
            for mode in ("threads", "processes"):
                r = pick(sub, workload=workload, workers=workers, mode=mode)
                if r is not None and np.isfinite(r["speedup"]):
                    limit = one_cpu_note(host, workers) if workload != "io" else ""
                    parts.append(f"{workers} {mode} gave {fmt_x(r)}{note(r, host, workers)}{limit}")
            if parts:
                what = f"{prefix}{WORKLOADS[workload]}, {workers} tasks, over sequential: "
                out.append(what + "; ".join(parts) + ".")
    return out


def _shortfall_lines(ctx: Context, summary: pd.DataFrame, label: str, prefix: str) -> list[str]:
    """Where CPU-bound processes' time went, from their spans (:mod:`experiments.gil.shortfall`)."""
    sub = summary[(summary["interpreter"] == label) & (summary["workload"] == "cpu") & (summary["mode"] == "processes")]
    out = []
    for workers in sorted(sub["workers"].unique()):
        point = {"interpreter": label, "workload": "cpu", "mode": "processes", "workers": workers}
        parts = shortfall.shortfall(ctx.spans, ctx.replicates, point)
        if parts is not None:
            out.append(prefix + shortfall.line(parts, int(workers), WORKLOADS["cpu"]))
    return out


def _verdict(
    summary: pd.DataFrame, label: str, prefix: str, spans: pd.DataFrame | None = None, replicates=None
) -> list[str]:
    r = pick(summary, interpreter=label, workload="cpu", mode="threads")
    if r is None or not np.isfinite(r["speedup"]):
        return []
    if gil_on(summary, label):
        parts = checks.threads_pace(spans, replicates, label) if r["workers"] == 2 else None
        paced = shortfall.pace(parts, r["speedup"], shortfall.paced_of(r))
        return [
            prefix + _threads_verdict(r, paced) + ". The GIL lets one thread execute bytecode at a time; "
            "sleeping and C code that releases it (hashlib, PyTorch operators) let threads overlap."
        ]
    return [
        f"{prefix}with the GIL off, {int(r['workers'])} threads running pure-Python bytecode gave {fmt_x(r)}: "
        "bytecode runs in parallel, as processes do, within one process."
    ]


def across(summary: pd.DataFrame, host: dict, workload: str = "cpu") -> str | None:
    """One line putting the interpreters side by side on ``workload``, threads at the fewest tasks:
    ``CPU-bound Python, 2 threads over sequential: 1.02x under default (...); 1.91x under 3.13t (...)``."""
    sub = summary[(summary["workload"] == workload) & (summary["mode"] == "threads") & summary["speedup"].notna()]
    if sub["interpreter"].nunique() < 2:
        return None
    n = sub["workers"].min()
    parts = [
        f"{fmt_x(r)} under {name(x, host)}"
        for x in labels(sub, host)
        if (r := pick(sub, interpreter=x, workers=n)) is not None
    ]
    return f"{WORKLOADS[workload]}, {n} threads over sequential: " + "; ".join(parts) + "."


def findings(ctx: Context) -> list[str]:
    """Per interpreter, workload and task count, what threads and processes gave over
    sequential; where CPU-bound processes' time went (their spans); what the CPU-bound threads
    say about the GIL; the interpreters side by side. Reads ``ctx.summary``, ``ctx.host``
    (interpreters, available CPUs, what was measured), ``ctx.spans`` and ``ctx.replicates``."""
    summary, host = with_interpreter(ctx.summary), ctx.host
    out = []
    several = summary["interpreter"].nunique() > 1
    for label in labels(summary, host):
        prefix = f"Under {name(label, host)}: " if several else ""
        out += _point_lines(summary, label, prefix, host)
        out += _shortfall_lines(ctx, summary, label, prefix)
        out += _verdict(summary, label, prefix, ctx.spans, ctx.replicates)
    for workload in ("cpu", "release", "shared"):
        line = across(summary, host, workload)
        if line:
            out.append(line)
    return out


def headlines(ctx: Context) -> list[dict]:
    """Processes or threads for CPU-bound Python, at the fewest tasks swept, under the first
    interpreter; where an interpreter ran with the GIL off, its threads too. Reads
    ``ctx.summary`` and ``ctx.host`` (the interpreters' config order)."""
    summary, host = with_interpreter(ctx.summary), ctx.host
    cpu = summary[(summary["workload"] == "cpu") & summary["speedup"].notna()]
    if cpu.empty:
        return []
    first, *others = labels(cpu, host)
    mine = cpu[cpu["interpreter"] == first]
    n = mine["workers"].min()
    parts = [
        f"{n} {mode} {fmt_transfer(r)}"
        for mode in ("processes", "threads")
        if (r := pick(mine, workers=n, mode=mode)) is not None
    ]
    group = lead_view(mine[mine["workers"] == n])  # judged on the figures the parts print
    best = winner(group)
    if best is not None and len(unranked(group, best)):  # a higher median, too uncertain to rank:
        best = None  # the winner's lead over it is not measured
    verdict = f"{best['mode']}" if best is not None else "no clear winner"
    answer = f"{verdict}: " + "; ".join(parts)
    for label in others:
        r = pick(cpu, interpreter=label, workers=n, mode="threads")
        if r is not None and not gil_on(cpu, label):
            answer += f"; under {label} with the GIL off, {n} threads {fmt_transfer(r)}"
    return [{"question": "Processes or threads for CPU-bound Python code?", "answer": answer}]


def seed_comparison(summary: pd.DataFrame, host: dict) -> list[dict]:
    """The seed article's sequential/threads ratios beside this machine's (2 tasks, or fewest),
    under each interpreter."""
    rows = []
    for (workload, seed), label in itertools.product(SEED_TIMINGS.items(), labels(summary, host)):
        sub = summary[(summary["workload"] == workload) & (summary["mode"] == "threads")]
        sub = sub[sub["interpreter"] == label]
        if sub.empty:
            continue
        r = sub.sort_values("workers").iloc[0]
        if not np.isfinite(r["speedup"]):
            here = f"not measured ({r['status']})"
        else:
            here = f"{r['speedup']:.2f}x"
        if np.isfinite(r["speedup_ci_low"]):
            here += f" (95% CI {r['speedup_ci_low']:.2f}-{r['speedup_ci_high']:.2f})"
        speedup = seed["sequential_s"] / seed["threads_s"]
        seed_text = f"{seed['sequential_s']:.2f} s vs {seed['threads_s']:.2f} s = {speedup:.2f}x"
        rows.append(
            {"workload": workload, "interpreter": label, "seed": seed_text, "here": here, "workers": int(r["workers"])}
        )
    return rows


def tables(ctx: Context) -> list[dict]:
    """The seed article's published timings beside this machine's ratio, as a report table.
    Reads ``ctx.summary`` and ``ctx.host`` (the interpreters' order and names)."""
    summary, host = with_interpreter(ctx.summary), ctx.host
    rows = seed_comparison(summary, host)
    if not rows:
        return []
    rows.sort(key=lambda r: list(SEED_TIMINGS).index(r["workload"]))
    several = len({r["interpreter"] for r in rows}) > 1
    return [
        {
            "caption": "Seed article's published timings beside this machine's ratio (sequential time / threads time)",
            "columns": [
                "workload",
                f"seed article ({SEED_MACHINE}), 2 tasks",
                *(["interpreter here"] if several else []),
                f"this machine, {rows[0]['workers']} tasks",
            ],
            "rows": [
                [r["workload"], r["seed"], *([name(r["interpreter"], host)] if several else []), r["here"]]
                for r in rows
            ],
        }
    ]


def _bars(ax, sub: pd.DataFrame, workers: list, modes: list[str]) -> bool:
    """One bar per mode and task count, with the speedup on whole cores marked where the headline
    gives it (:func:`analysis.plotting.mark_whole_cores`); whether any was marked."""
    width = 0.8 / len(modes)
    x = np.arange(len(workers))
    any_marked = False
    for j, mode in enumerate(modes):
        m = sub[sub["mode"] == mode].set_index("workers").reindex(workers)
        bars = ax.bar(
            x + (j - (len(modes) - 1) / 2) * width,
            m["speedup"],
            width,
            yerr=yerr(m, *SPEEDUP),
            capsize=3,
            color=MODE_COLOURS[mode],
            label=mode,
            edgecolor="black",
            linewidth=0.5,
        )
        hatch_noisy(bars, m)
        centres = [b.get_x() + b.get_width() / 2 for b in bars]
        beside = [c + 0.3 * width for c in centres]  # beside the bar's own CI
        marked = mark_whole_cores(ax, beside, m)
        any_marked |= bool(marked.any())
        for xb, v in zip(np.asarray(beside)[marked], m["speedup_norm"].to_numpy()[marked]):
            ax.annotate(  # on a white ground: beside the threads' bar it lies over the processes' bar
                f"{v:.2f}x",
                (xb, v),
                xytext=(5, -3),
                textcoords="offset points",
                fontsize=7,
                weight="bold",
                zorder=6,
                bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
            )
        tops = m["speedup_ci_high"].where(~marked, np.fmax(m["speedup_ci_high"], m["speedup_norm_ci_high"]))
        for c, v, hi in zip(centres, m["speedup"], tops):
            if np.isfinite(v):
                pos = (c, max(v, hi) if np.isfinite(hi) else v)
                ax.annotate(f"{v:.2f}x", pos, xytext=(0, 12), textcoords="offset points", ha="center", fontsize=8)
    return any_marked


def _ideal(workload: str, workers: int, ncpu: int) -> float:
    """The ideal speedup: sleepers ``workers``; CPU work that can run in parallel
    ``min(workers, CPUs)`` (under the GIL, pure-Python threads cannot: drawn at the same line,
    as the ideal of the machine, and the bar shows how far the GIL keeps them)."""
    return float(workers) if workload == "io" else float(min(workers, ncpu))


def gil_speedup(ctx: Context) -> Figure:
    """Speedup over sequential of threads and processes: one row of panels per interpreter,
    one panel per workload, bars per task count and mode. Reads ``ctx.summary`` and
    ``ctx.host`` (the interpreters' order; its available CPUs for the ideal lines)."""
    summary, host = with_interpreter(ctx.summary), ctx.host
    workloads = in_order(summary["workload"], WORKLOADS)
    interps = labels(summary, host)
    ncpu = host.get("available_cpus") or 1
    fig, axes = plt.subplots(
        len(interps), len(workloads), figsize=(4.3 * len(workloads), 3.6 * len(interps)), squeeze=False
    )
    shown = [transfer_case(r) == "on_whole_cores" for r in summary.to_dict("records")]  # the diamonds drawn
    whole_top = summary["speedup_norm_ci_high"].where(shown)
    top_all = np.fmax(summary["speedup_ci_high"].fillna(summary["speedup"]), whole_top)
    ymax = max(float(np.nanmax(top_all)) if top_all.notna().any() else 1.0, float(summary["workers"].max())) * 1.4
    whole = False
    for row, label in zip(axes, interps):
        for ax, workload in zip(row, workloads):
            sub = summary[(summary["workload"] == workload) & (summary["interpreter"] == label)]
            workers = sorted(sub["workers"].unique())
            modes = in_order(sub["mode"], MODES)
            whole |= _bars(ax, sub, workers, modes)
            for w_i, w in enumerate(workers):
                ideal = _ideal(workload, w, ncpu)
                ax.hlines(ideal, w_i - 0.45, w_i + 0.45, colors="#444444", linestyles=":", linewidth=1)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks(np.arange(len(workers)), [f"{w} tasks" for w in workers])
            ax.set_ylabel("speedup over sequential (x)")
            gil = "GIL on" if gil_on(summary, label) else "GIL off"
            title = f"{WORKLOADS[workload]}\n{label} ({gil})" if len(interps) > 1 else WORKLOADS[workload]
            ax.set_title(title, fontsize=10)
            ax.set_ylim(0, ymax)
            bar_legend(ax, loc="upper center", ncol=len(modes) + 1, fontsize=7.5, columnspacing=0.8, handlelength=1.4)
    fig.suptitle(f"GIL: threads vs processes on {cpus_text(ncpu)} available (dotted: ideal)", fontsize=11)
    footnote = "Error bars: 95% CI of the speedup (median of paired ratios). Hatched: noisy point."
    plotting.note(fig, footnote + (plotting.WHOLE_CORES_NOTE if whole else ""))  # wrapped to the figure's width
    fig.tight_layout(rect=(0, 0.06 if whole else 0.03, 1, 0.97))
    return fig


def timeline_points(ctx: Context) -> list[dict]:
    """The CPU-bound workload (else the first measured one), fewest tasks: every mode under the
    first interpreter, then the threads under each other one (GIL against free-threaded), from
    ``ctx.summary``."""
    summary = with_interpreter(ctx.summary)
    ok = summary[summary["status"] == "ok"]
    if ok.empty:
        return []
    workload = "cpu" if "cpu" in set(ok["workload"]) else ok["workload"].iloc[0]
    sub = ok[ok["workload"] == workload]
    sub = sub[sub["workers"] == sub["workers"].min()]
    found = list(dict.fromkeys(sub["interpreter"]))
    first = DEFAULT_LABEL if DEFAULT_LABEL in found else next((x for x in found if gil_on(sub, x)), found[0])
    others = [x for x in found if x != first]
    order = {m: i for i, m in enumerate(MODES)}
    mine = sub[sub["interpreter"] == first].sort_values("mode", key=lambda m: m.map(order))
    rest = sub[sub["interpreter"].isin(others) & (sub["mode"] == "threads")]
    keys = ("interpreter", "workload", "mode", "workers")
    return [{k: r[k] for k in keys} for _, r in pd.concat([mine, rest]).iterrows()]


def fidelity(ctx: Context) -> list[dict]:
    """The theory checks per interpreter (:func:`experiments.gil.checks.fidelity`, where they
    live): reads ``ctx.summary`` (None when the experiment did not run), ``ctx.ncpu`` (the
    available CPUs), ``ctx.host`` (quota, SMT siblings, what was measured while it ran) and
    ``ctx.spans`` and ``ctx.replicates`` (the threads' own pace)."""
    return checks.fidelity(ctx.summary, ctx.ncpu, ctx.host, ctx.spans, ctx.replicates)


ANALYSIS = Analysis(
    findings=findings,
    headlines=headlines,
    tables=tables,
    figures={"gil_speedup": gil_speedup},
    timeline_points=timeline_points,
    fidelity=fidelity,
)
