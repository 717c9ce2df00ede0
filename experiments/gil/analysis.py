"""GIL experiment, analysis: findings, the seed article's timings beside ours, the speedup chart,
the points the timeline shows, and the theory checks (threads about 1x, sleepers N x, processes
scaling with CPUs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.fidelity import capacity_reason, speedup_check
from analysis.findings import fmt_x, in_order, pick
from analysis.plotting import SPEEDUP, noisy_mask, plt, yerr
from experiments.gil import MODES, WORKLOADS

#: The seed article's published timings (002_c724ca3a57c5b9fb: 4-core i5-4460, Python 3.5),
#: sequential against two threads, in seconds.
SEED_TIMINGS = {
    "cpu": {"sequential_s": 71.47, "threads_s": 72.08},
    "io": {"sequential_s": 42.10, "threads_s": 22.01},
}
SEED_MACHINE = "4-core Intel i5-4460, Python 3.5"

MODE_COLOURS = {"sequential": "#999999", "threads": "#0072B2", "processes": "#E69F00"}


def _threads_verdict(r: pd.Series) -> str:
    """What the CPU-bound threads' speedup says about the GIL, from its CI."""
    hi = r["speedup_ci_high"] if np.isfinite(r["speedup_ci_high"]) else r["speedup"]
    lo = r["speedup_ci_low"] if np.isfinite(r["speedup_ci_low"]) else r["speedup"]
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
    return f"Threads running pure-Python bytecode gave {r['speedup']:.2f}x, not clearly different from 1x"


def findings(summary: pd.DataFrame, host: dict) -> list[str]:
    """Per workload and task count, what threads and processes gave over sequential; then
    what the CPU-bound threads say about the GIL."""
    out = []
    for workload in in_order(summary["workload"], WORKLOADS):
        for workers in sorted(summary.loc[summary["workload"] == workload, "workers"].unique()):
            parts = []
            for mode in ("threads", "processes"):
                r = pick(summary, workload=workload, workers=workers, mode=mode)
                if r is not None and np.isfinite(r["speedup"]):
                    parts.append(f"{workers} {mode} gave {fmt_x(r)}")
            if parts:
                out.append(f"{WORKLOADS[workload]}, {workers} tasks, over sequential: " + "; ".join(parts) + ".")
    r = pick(summary, workload="cpu", mode="threads")
    if r is not None and np.isfinite(r["speedup"]):
        out.append(
            _threads_verdict(r) + ". The GIL lets one thread execute bytecode at a time; "
            "sleeping releases it, so I/O-bound threads overlap."
        )
    return out


def headlines(summary: pd.DataFrame, host: dict) -> list[dict]:
    """Processes or threads for CPU-bound Python, at the fewest tasks swept."""
    cpu = summary[(summary["workload"] == "cpu") & summary["speedup"].notna()]
    if cpu.empty:
        return []
    n = cpu["workers"].min()
    parts = [
        f"{n} {mode} {fmt_x(r)}"
        for mode in ("processes", "threads")
        if (r := pick(cpu, workers=n, mode=mode)) is not None
    ]
    best = cpu[(cpu["workers"] == n) & cpu["best"]]
    verdict = f"{best.iloc[0]['mode']}" if len(best) else "no clear winner"
    return [
        {"question": "Processes or threads for CPU-bound Python code?", "answer": f"{verdict}: " + "; ".join(parts)}
    ]


def seed_comparison(summary: pd.DataFrame) -> list[dict]:
    """The seed article's sequential/threads ratios beside this machine's (2 tasks, or fewest)."""
    rows = []
    for workload, seed in SEED_TIMINGS.items():
        sub = summary[(summary["workload"] == workload) & (summary["mode"] == "threads")]
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
        rows.append({"workload": workload, "seed": seed_text, "here": here, "workers": int(r["workers"])})
    return rows


def tables(summary: pd.DataFrame, host: dict) -> list[dict]:
    """The seed article's published timings beside this machine's ratio, as a report table."""
    rows = seed_comparison(summary)
    if not rows:
        return []
    return [
        {
            "caption": "Seed article's published timings beside this machine's ratio (sequential time / threads time)",
            "columns": [
                "workload",
                f"seed article ({SEED_MACHINE}), 2 tasks",
                f"this machine, {rows[0]['workers']} tasks",
            ],
            "rows": [[r["workload"], r["seed"], r["here"]] for r in rows],
        }
    ]


def _bars(ax, sub: pd.DataFrame, workers: list, modes: list[str]) -> None:
    width = 0.8 / len(modes)
    x = np.arange(len(workers))
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
        for b, noisy, v in zip(bars, noisy_mask(m), m["speedup"]):
            if noisy:
                b.set_hatch("//")
            if np.isfinite(v):
                pos = (b.get_x() + b.get_width() / 2, v)
                ax.annotate(f"{v:.2f}x", pos, xytext=(0, 12), textcoords="offset points", ha="center", fontsize=8)


def gil_speedup(summary: pd.DataFrame, host: dict) -> Figure:
    """Speedup over sequential of threads and processes, per workload and task count."""
    workloads = in_order(summary["workload"], WORKLOADS)
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.2 * len(workloads), 4.2), squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        sub = summary[summary["workload"] == workload]
        workers = sorted(sub["workers"].unique())
        modes = in_order(sub["mode"], MODES)
        _bars(ax, sub, workers, modes)
        for w_i, w in enumerate(workers):  # ideal: min(workers, CPUs) for CPU-bound work, workers for sleepers
            ideal = min(w, host.get("available_cpus", w)) if workload == "cpu" else w
            ax.hlines(ideal, w_i - 0.45, w_i + 0.45, colors="#444444", linestyles=":", linewidth=1)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(workers)), [f"{w} tasks" for w in workers])
        ax.set_ylabel("speedup over sequential (x)")
        ax.set_title(WORKLOADS[workload])
        top = sub["speedup_ci_high"].fillna(sub["speedup"])
        ax.set_ylim(0, max(float(np.nanmax(top)) if top.notna().any() else 1.0, max(workers)) * 1.25)
        ax.legend(loc="upper center", ncol=len(modes), fontsize=9)
    fig.suptitle(
        f"GIL: threads vs processes on {host.get('available_cpus', '?')} available CPUs (dotted: ideal)", fontsize=11
    )
    fig.text(
        0.01,
        0.005,
        "Error bars: 95% bootstrap CI of the speedup (median of paired ratios). Hatched: noisy point.",
        fontsize=8,
        color="#555555",
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


FIGURES = {"gil_speedup": gil_speedup}


def timeline_points(summary: pd.DataFrame) -> list[dict]:
    """The CPU-bound workload (else the first measured one), fewest tasks, every mode."""
    ok = summary[summary["status"] == "ok"]
    if ok.empty:
        return []
    workload = "cpu" if "cpu" in set(ok["workload"]) else ok["workload"].iloc[0]
    sub = ok[ok["workload"] == workload]
    sub = sub[sub["workers"] == sub["workers"].min()]
    order = {m: i for i, m in enumerate(MODES)}
    return [
        {k: r[k] for k in ("workload", "mode", "workers")}
        for _, r in sub.sort_values("mode", key=lambda m: m.map(order)).iterrows()
    ]


def fidelity(summary: pd.DataFrame | None, ncpu: int) -> list[dict]:
    """Theory checks: CPU-bound Python, 2 threads over sequential, 0.70x to 1.15x (the GIL
    serialises bytecode); N sleeping threads at least 0.9 N (sleep releases the GIL); N processes
    at least 0.7 min(N, available CPUs) (each process has its own interpreter)."""
    rows = [
        speedup_check(
            summary,
            {"workload": "cpu", "mode": "threads", "workers": 2},
            "CPU-bound Python: 2 threads over sequential",
            "0.70x to 1.15x",
            lambda s: 0.7 <= s <= 1.15,
            "the GIL lets one thread run bytecode at a time",
            "outside the range the GIL allows: measurement noise or a GIL-free build?",
        )
    ]
    workers = sorted(summary["workers"].unique()) if summary is not None else [2]
    for n in workers:
        rows.append(
            speedup_check(
                summary,
                {"workload": "io", "mode": "threads", "workers": n},
                f"I/O-bound sleep loop: {n} threads over sequential",
                f">= {0.9 * n:.2f}x",
                lambda s, n=n: s >= 0.9 * n,
                "sleeping threads release the GIL and overlap",
                "sleeping threads did not overlap as expected",
            )
        )
    for n in workers:
        need, cpus = 0.7 * min(n, ncpu), min(n, ncpu)
        generic = "processes did not use the available CPUs: contention, or fewer real cores"
        rows.append(
            speedup_check(
                summary,
                {"workload": "cpu", "mode": "processes", "workers": n},
                f"CPU-bound Python: {n} processes over sequential",
                f">= {need:.2f}x",
                lambda s, need=need: s >= need,
                "each process has its own interpreter and GIL",
                lambda r, s, cpus=cpus, generic=generic: capacity_reason(r, s, cpus, generic),
            )
        )
    return rows
