"""Findings: plain-language sentences whose every number is computed from a summary table.

Each ``<experiment>_findings(summary, host)`` takes the output of
:func:`analysis.stats.summarise` (and the host fingerprint, a dict from host.json) and returns
a list of sentences. :func:`findings` dispatches by experiment and also returns extra tables
(the gil experiment's comparison with the seed article's published timings).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.spec import SEED_MACHINE, SEED_TIMINGS


def fmt_x(row) -> str:
    """``1.93x (95% CI 1.85-2.01)``; without the interval when it is unknown."""
    s = f"{row['speedup']:.2f}x"
    lo, hi = row.get("speedup_ci_low"), row.get("speedup_ci_high")
    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
        s += f" (95% CI {lo:.2f}-{hi:.2f})"
    return s


def _num(v: float, unit: str) -> str:
    if not np.isfinite(v):
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f} {unit}"
    return f"{v:.3g} {unit}"


def _best(summary: pd.DataFrame) -> pd.Series:
    """The row flagged ``best`` (see :func:`analysis.stats.summarise`), else the highest median."""
    flagged = summary[summary["best"].astype(bool)]
    return flagged.iloc[0] if len(flagged) else summary.loc[summary["median"].idxmax()]


def _pick(summary: pd.DataFrame, **where) -> pd.Series | None:
    m = pd.Series(True, index=summary.index)
    for k, v in where.items():
        m &= summary[k].astype(str) == str(v)
    hit = summary[m]
    return hit.iloc[0] if len(hit) else None


def gil_findings(summary: pd.DataFrame, host: dict) -> list[str]:
    out = []
    labels = {"cpu": "CPU-bound Python (counting loop)", "io": "I/O-bound Python (sleep loop)"}
    for workload in [w for w in ("cpu", "io") if w in set(summary["workload"])]:
        for workers in sorted(summary.loc[summary["workload"] == workload, "workers"].unique()):
            parts = []
            for mode in ("threads", "processes"):
                r = _pick(summary, workload=workload, workers=workers, mode=mode)
                if r is not None and np.isfinite(r["speedup"]):
                    parts.append(f"{workers} {mode} gave {fmt_x(r)}")
            if parts:
                out.append(f"{labels[workload]}, {workers} tasks, over sequential: " + "; ".join(parts) + ".")
    r = _pick(summary, workload="cpu", mode="threads")
    if r is not None and np.isfinite(r["speedup"]):
        hi = r["speedup_ci_high"] if np.isfinite(r["speedup_ci_high"]) else r["speedup"]
        lo = r["speedup_ci_low"] if np.isfinite(r["speedup_ci_low"]) else r["speedup"]
        if hi < 0.85:
            s = (
                f"Threads running pure-Python bytecode were slower than sequential ({r['speedup']:.2f}x), "
                "as they also spend time handing the GIL to each other"
            )
        elif hi <= 1.15:
            s = f"As the GIL predicts, threads running pure-Python bytecode gave no gain ({r['speedup']:.2f}x)"
        elif lo > 1.15:
            s = (
                f"Threads running pure-Python bytecode measured {r['speedup']:.2f}x, more than the GIL allows "
                "(about 1x): the sequential and threaded runs probably met different machine load; see the IQR"
            )
        else:
            s = f"Threads running pure-Python bytecode gave {r['speedup']:.2f}x, not clearly different from 1x"
        out.append(
            s + ". The GIL lets one thread execute bytecode at a time; "
            "sleeping releases it, so I/O-bound threads overlap."
        )
    return out


def seed_comparison(summary: pd.DataFrame) -> list[dict]:
    """The seed article's sequential/threads ratios beside this machine's (2 tasks, or fewest)."""
    rows = []
    for workload, seed in SEED_TIMINGS.items():
        sub = summary[(summary["workload"] == workload) & (summary["mode"] == "threads")]
        if sub.empty:
            continue
        r = sub.sort_values("workers").iloc[0]
        rows.append(
            {
                "workload": workload,
                "seed_sequential_s": seed["sequential_s"],
                "seed_threads_s": seed["threads_s"],
                "seed_speedup": seed["sequential_s"] / seed["threads_s"],
                "seed_machine": SEED_MACHINE,
                "workers": int(r["workers"]),
                "speedup": r["speedup"],
                "speedup_ci_low": r["speedup_ci_low"],
                "speedup_ci_high": r["speedup_ci_high"],
            }
        )
    return rows


def multiprocessing_findings(summary: pd.DataFrame, host: dict) -> list[str]:
    out = []
    ok = summary[summary["median"].notna()]
    if ok.empty:
        return out
    best = _best(ok)
    ncpu = host.get("available_cpus")
    out.append(
        f"Best split: {int(best['processes'])} process{'es' if best['processes'] > 1 else ''} x "
        f"{int(best['threads'])} thread{'s' if best['threads'] > 1 else ''} at "
        f"{_num(best['median'], 'samples/s')}, {fmt_x(best)} over 1 x 1 "
        f"(parallel efficiency {best['parallel_efficiency']:.0%})."
    )
    over = ok[ok["oversubscribed"]]
    if len(over):
        worst = over.loc[over["median"].idxmin()]
        out.append(
            f"Oversubscribed ({int(worst['processes'])} x {int(worst['threads'])} = "
            f"{int(worst['processes'] * worst['threads'])} threads on {ncpu} available CPU{'s' if ncpu != 1 else ''}): "
            f"{worst['speedup']:.2f}x of 1 x 1 where the best split gave {best['speedup']:.2f}x."
        )
    return out


def dataloader_findings(summary: pd.DataFrame, host: dict) -> list[str]:
    out = []
    names = {
        "tensor": "In-memory TensorDataset",
        "cpu": "CPU-heavy __getitem__",
        "io": "Slow-to-read (sleeping) __getitem__",
    }
    for dataset in [d for d in ("tensor", "cpu", "io") if d in set(summary["dataset"])]:
        sub = summary[(summary["dataset"] == dataset) & summary["median"].notna()]
        if sub.empty:
            continue
        best = _best(sub)
        zero = _pick(sub, num_workers=0)
        s = f"{names[dataset]}: best num_workers = {int(best['num_workers'])} at {_num(best['median'], 'samples/s')}"
        if zero is not None and int(best["num_workers"]) != 0:
            s += f", {fmt_x(best)} over num_workers = 0"
        s += f"; the training loop waited for data {best['data_stall_pct']:.0f}% of the time there."
        if zero is not None and int(best["num_workers"]) == 0 and len(sub) > 1:
            worst = sub.loc[sub["median"].idxmin()]
            s += (
                f" More workers were slower (num_workers = {int(worst['num_workers'])}: "
                f"{worst['speedup']:.2f}x): passing batches between processes costs more than loading them."
            )
        out.append(s)
    warned = summary[summary.get("worker_warning", pd.Series("", index=summary.index)).fillna("").astype(str) != ""]
    if len(warned):
        ws = ", ".join(sorted({str(int(w)) for w in warned["num_workers"]}))
        out.append(
            f"PyTorch warned about too many workers at num_workers = {ws} (more than it suggests for this machine)."
        )
    return out


def intraop_findings(summary: pd.DataFrame, host: dict) -> list[str]:
    out = []
    ncpu = host.get("available_cpus")
    for workload in summary["workload"].unique():
        sub = summary[(summary["workload"] == workload) & summary["median"].notna()]
        if sub.empty:
            first = summary[summary["workload"] == workload].iloc[0]
            why = f": {first['reason']}" if isinstance(first.get("reason"), str) and first["reason"] else ""
            out.append(f"{workload}: not measured ({first['status']}){why}.")
            continue
        best = _best(sub)
        unit = "GFLOP/s" if best["metric"] == "gflop_per_s" else "samples/s"
        plural = "s" if best["threads"] > 1 else ""
        s = f"{workload}: best at {int(best['threads'])} thread{plural}, {_num(best['median'], unit)}"
        s += f", {fmt_x(best)} over 1 thread"
        at_n = _pick(sub, threads=ncpu) if ncpu else None
        if at_n is not None and ncpu and ncpu > 1:
            s += f"; at {ncpu} threads (all available CPUs) parallel efficiency {at_n['parallel_efficiency']:.0%}"
        over = sub[sub["oversubscribed"]]
        if len(over):
            o = over.iloc[-1]
            s += f"; oversubscribed at {int(o['threads'])} threads: {o['speedup']:.2f}x"
        out.append(s + ".")
    fp32, bf16 = (summary[(summary["workload"] == w) & summary["median"].notna()] for w in ("matmul", "matmul_bf16"))
    if len(fp32) and len(bf16):
        a, b = _best(fp32), _best(bf16)
        out.append(
            f"bfloat16 over float32 matmul, each at its best thread count: {b['median'] / a['median']:.2f}x "
            f"({_num(b['median'], 'GFLOP/s')} against {_num(a['median'], 'GFLOP/s')}; medians of separate jobs, "
            "not interleaved)"
            + ("." if b["median"] > a["median"] else ": on this CPU bfloat16 matmul does not pay off.")
        )
    return out


def jit_findings(summary: pd.DataFrame, host: dict) -> list[str]:
    out = []
    for model in summary["model"].unique():
        sub = summary[summary["model"] == model]
        eager = _pick(sub, mode="eager")
        parts = []
        for _, r in sub.iterrows():
            if r["mode"] == "eager":
                continue
            if r["status"] != "ok":
                parts.append(f"{r['mode']} {r['status']} ({r['reason']})")
                continue
            part = f"{r['mode']} {fmt_x(r)} at steady state, first call {r['first_call_s'] * 1000:.0f} ms"
            part += f" + setup {r['setup_s'] * 1000:.0f} ms"
            if eager is not None and np.isfinite(r["speedup"]):
                # eager latency measured interleaved in this job = latency x speedup
                saved_ms = r["latency_ms"] * (r["speedup"] - 1)
                upfront_ms = (r["setup_s"] + r["first_call_s"] - eager["first_call_s"]) * 1000
                if saved_ms > 0:
                    part += f", pays off after {math.ceil(max(upfront_ms, 0) / saved_ms):,} calls"
                else:
                    part += ", never pays off here"
            if "allclose" in r and r["allclose"] is False:
                part += ", OUTPUT DIFFERS from eager"
            parts.append(part)
        if eager is not None and parts:
            out.append(f"{model} (eager {eager['latency_ms']:.3f} ms per batch): " + "; ".join(parts) + ".")
    return out


FINDERS = {
    "gil": gil_findings,
    "multiprocessing": multiprocessing_findings,
    "dataloader": dataloader_findings,
    "intraop": intraop_findings,
    "jit": jit_findings,
}


def findings(experiment: str, summary: pd.DataFrame, host: dict) -> dict:
    """``{"experiment", "findings": [sentences], "seed_comparison": [rows] (gil only)}``."""
    out = {"experiment": experiment, "findings": FINDERS[experiment](summary, host)}
    if experiment == "gil":
        out["seed_comparison"] = seed_comparison(summary)
    return out
