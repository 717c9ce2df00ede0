"""One function per figure; each takes analysis outputs and returns a matplotlib Figure.

Inputs are DataFrames read from an experiment's ``summary.csv`` (per point: median, IQR,
bootstrap 95% CI, speedup ...), ``spans.csv`` (work spans) and the host fingerprint. Every
measured quantity is drawn with its uncertainty: error bars span the 95% bootstrap confidence
interval of the median; points flagged noisy (IQR > 10% of the median) get a hollow marker.
The backend is Agg (headless), set before pyplot is imported.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis import timelines  # noqa: E402

# Okabe-Ito colour-blind-safe palette.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
MODE_COLOURS = {"sequential": "#999999", "threads": "#0072B2", "processes": "#E69F00"}

plt.rcParams.update(
    {
        "figure.dpi": 110,
        "savefig.dpi": 110,
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "legend.frameon": False,
    }
)


def _yerr(df: pd.DataFrame, centre: str = "median", low: str = "ci_low", high: str = "ci_high") -> np.ndarray:
    lo = (df[centre] - df[low]).clip(lower=0).fillna(0).to_numpy()
    hi = (df[high] - df[centre]).clip(lower=0).fillna(0).to_numpy()
    return np.vstack([lo, hi])


def gil_speedup(summary: pd.DataFrame, host: dict) -> Figure:
    """Speedup over sequential of threads and processes, per workload and task count."""
    workloads = [w for w in ("cpu", "io") if w in set(summary["workload"])]
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.2 * len(workloads), 4.2), squeeze=False, sharey=False)
    titles = {"cpu": "CPU-bound Python (counting loop)", "io": "I/O-bound Python (sleep loop)"}
    for ax, workload in zip(axes[0], workloads):
        sub = summary[summary["workload"] == workload]
        workers = sorted(sub["workers"].unique())
        modes = [m for m in ("sequential", "threads", "processes") if m in set(sub["mode"])]
        width = 0.8 / len(modes)
        x = np.arange(len(workers))
        for j, mode in enumerate(modes):
            m = sub[sub["mode"] == mode].set_index("workers").reindex(workers)
            err = _yerr(m, "speedup", "speedup_ci_low", "speedup_ci_high")
            bars = ax.bar(
                x + (j - (len(modes) - 1) / 2) * width,
                m["speedup"],
                width,
                yerr=err,
                capsize=3,
                color=MODE_COLOURS[mode],
                label=mode,
                edgecolor="black",
                linewidth=0.5,
            )
            for b, noisy in zip(bars, m["noisy"].fillna(False)):
                if noisy:
                    b.set_hatch("//")
            for b, v in zip(bars, m["speedup"]):
                if np.isfinite(v):
                    ax.annotate(
                        f"{v:.2f}x",
                        (b.get_x() + b.get_width() / 2, v),
                        xytext=(0, 12),
                        textcoords="offset points",
                        ha="center",
                        fontsize=8,
                    )
        for w_i, w in enumerate(workers):
            ax.hlines(
                min(w, host.get("available_cpus", w)) if workload == "cpu" else w,
                w_i - 0.45,
                w_i + 0.45,
                colors="#444444",
                linestyles=":",
                linewidth=1,
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(x, [f"{w} tasks" for w in workers])
        ax.set_ylabel("speedup over sequential (x)")
        ax.set_title(titles[workload])
        ax.set_ylim(0, max(float(np.nanmax(sub["speedup_ci_high"].fillna(sub["speedup"]))), max(workers)) * 1.25)
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


SPEEDUP = ("speedup", "speedup_ci_low", "speedup_ci_high")


def _speedup_line(ax, x, sub: pd.DataFrame, colour: str, label: str | None = None) -> None:
    """Speedup over the interleaved baseline with its 95% CI; noisy points drawn hollow."""
    ax.errorbar(x, sub["speedup"], yerr=_yerr(sub, *SPEEDUP), color=colour, marker="o", capsize=3, label=label)
    noisy = sub["noisy"].fillna(False).astype(bool).to_numpy()
    if noisy.any():
        ax.scatter(
            np.asarray(x)[noisy],
            sub["speedup"].to_numpy()[noisy],
            s=36,
            facecolors="white",
            edgecolors=colour,
            linewidths=1.5,
            zorder=4,
        )


def _speedup_note(fig: Figure, extra: str = "") -> None:
    fig.text(
        0.01,
        0.005,
        "Speedup: median of per-round ratios to the baseline measured interleaved in the same job; "
        "error bars: 95% bootstrap CI. Hollow: noisy (IQR > 10% of median)." + extra,
        fontsize=7.5,
        color="#555555",
    )


def _not_measured_panel(ax, title: str, sub: pd.DataFrame) -> None:
    """An axis for a group without any measured point: its status and reason, wrapped."""
    import textwrap

    first = sub.iloc[0]
    reason = str(first.get("reason") or "") if pd.notna(first.get("reason")) else ""
    text = f"not measured: {first['status']}" + (f"\n\n{textwrap.fill(reason, 40)}" if reason else "")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, transform=ax.transAxes, wrap=True)
    ax.set_title(title, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])


def _baseline_text(sub: pd.DataFrame, unit: str) -> str:
    base = sub["baseline_median"].dropna()
    return f"baseline {base.median():,.0f} {unit}" if len(base) else ""


def multiprocessing_throughput(summary: pd.DataFrame, host: dict) -> Figure:
    """Speedup of total training samples/s over 1 process x 1 thread, against processes, one
    line per threads-per-process; oversubscribed points marked."""
    fig, ax = plt.subplots(figsize=(9.5, 4.4))
    ncpu = host.get("available_cpus")
    for j, (threads, sub) in enumerate(summary.groupby("threads")):
        sub = sub.sort_values("processes")
        c = PALETTE[j % len(PALETTE)]
        _speedup_line(ax, sub["processes"], sub, c, label=f"{threads} thread{'s' if threads > 1 else ''} per process")
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
        ax.axhline(
            ncpu,
            color="#444444",
            linestyle=":",
            linewidth=1,
            label=f"{'the' if ncpu == 1 else 'all'} {timelines.cpus_text(ncpu)} busy (ideal)",
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    ax.set_xticks(sorted(summary["processes"].unique()))
    ax.set_xlabel("training processes (P)")
    ax.set_ylabel("speedup of total samples/s over 1 x 1 (x)")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"torch.multiprocessing: P processes x T threads on {timelines.cpus_text(ncpu)} available\n"
        f"({_baseline_text(summary, 'samples/s')} at 1 x 1)",
        fontsize=10,
    )
    _speedup_note(fig, " Orange square: oversubscribed.")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def dataloader_throughput(summary: pd.DataFrame, host: dict) -> Figure:
    """Speedup over num_workers = 0 against num_workers, one panel per dataset, best circled."""
    datasets = [d for d in ("tensor", "cpu", "io") if d in set(summary["dataset"])]
    titles = {"tensor": "in-memory TensorDataset", "cpu": "CPU-heavy __getitem__", "io": "sleeping __getitem__ (I/O)"}
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.3 * len(datasets), 4.2), squeeze=False)
    for ax, ds, c in zip(axes[0], datasets, PALETTE):
        sub = summary[summary["dataset"] == ds].sort_values("num_workers")
        _speedup_line(ax, sub["num_workers"], sub, c)
        best = sub[sub["best"].astype(bool)]
        if len(best):
            b = best.iloc[0]
            ax.scatter(
                [b["num_workers"]],
                [b["speedup"]],
                marker="o",
                s=260,
                facecolors="none",
                edgecolors="#D55E00",
                linewidths=2,
                zorder=5,
                label=f"best: num_workers={int(b['num_workers'])}",
            )
            ax.legend(loc="best", fontsize=9)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(sub["num_workers"])
        ax.set_xlabel("num_workers")
        ax.set_title(f"{titles[ds]}\n({_baseline_text(sub, 'samples/s')} at num_workers=0)", fontsize=10)
        ax.set_ylim(bottom=0)
    axes[0, 0].set_ylabel("speedup over num_workers = 0 (x)")
    fig.suptitle(f"DataLoader num_workers on {timelines.cpus_text(host.get('available_cpus'))} available", fontsize=11)
    _speedup_note(fig)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def intraop_scaling(summary: pd.DataFrame, host: dict) -> Figure:
    """Speedup over 1 intra-op thread against threads per workload, with ideal linear scaling.

    A workload without any measured point (e.g. ``matmul_bf16`` skipped on a CPU without
    native bf16) gets a panel that says so and why, instead of an empty axis."""
    workloads = list(summary["workload"].unique())
    ncpu = host.get("available_cpus")
    names = {
        "matmul": "n x n matmul, float32",
        "matmul_bf16": "n x n matmul, bfloat16",
        "mlp": "MLP training step",
        "tiny": "Linear(100,100), batch 4",
    }
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads), 4.2), squeeze=False)
    for ax, wl, c in zip(axes[0], workloads, PALETTE):
        sub = summary[summary["workload"] == wl].sort_values("threads")
        if not sub["speedup"].notna().any():
            _not_measured_panel(ax, names.get(wl, wl), sub)
            continue
        unit = "GFLOP/s" if sub["metric"].iloc[0] == "gflop_per_s" else "samples/s"
        _speedup_line(ax, sub["threads"], sub, c, label="measured")
        if ncpu:
            ax.plot([1, ncpu], [1, ncpu], ":", color="#444444", label="ideal (linear)")
            ax.axvline(
                ncpu,
                color="#D55E00",
                linestyle="--",
                linewidth=1,
                alpha=0.5,
                zorder=0,
                label=f"{timelines.cpus_text(ncpu)} available",
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(sub["threads"])
        ax.set_xlabel("intra-op threads (torch.set_num_threads)")
        ax.set_ylabel("speedup over 1 thread (x)")
        ax.set_ylim(0, max(float(np.nanmax(sub["speedup_ci_high"].fillna(sub["speedup"]))), ncpu or 1) * 1.15)
        ax.set_title(f"{names.get(wl, wl)}\n({_baseline_text(sub, unit)} at 1 thread)", fontsize=10)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle("Intra-op threads", fontsize=11)
    _speedup_note(fig)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def jit_latency(summary: pd.DataFrame, host: dict) -> Figure:
    """Steady-state speedup over eager per mode (left; eager measured interleaved in the same
    job) and up-front cost, setup plus first call (right, log scale)."""
    models = list(summary["model"].unique())
    modes = [m for m in ("eager", "script", "trace", "compile") if m in set(summary["mode"])]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    width = 0.8 / len(modes)
    x = np.arange(len(models))
    for j, mode in enumerate(modes):
        m = summary[summary["mode"] == mode].set_index("model").reindex(models)
        ok = m["status"] == "ok"
        pos = x + (j - (len(modes) - 1) / 2) * width
        ax1.bar(
            pos,
            m["speedup"].where(ok, 0),
            width,
            yerr=_yerr(m, *SPEEDUP),
            capsize=3,
            color=PALETTE[j],
            label=mode,
            edgecolor="black",
            linewidth=0.5,
        )
        up = (m["setup_s"] + m["first_call_s"]) * 1000
        ax2.bar(pos, up.where(ok, np.nan), width, color=PALETTE[j], label=mode, edgecolor="black", linewidth=0.5)
        for p, is_ok, st in zip(pos, ok, m["status"]):
            if not is_ok:
                for ax in (ax1, ax2):
                    ax.annotate(
                        str(st), (p, 0), xytext=(0, 4), textcoords="offset points", rotation=90, ha="center", fontsize=8
                    )
    for ax in (ax1, ax2):
        ax.set_xticks(x, models)
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_ylabel("steady-state speedup over eager (x)")
    ax1.set_title("Steady state (after warm-up), eager interleaved")
    ax1.legend(fontsize=8)
    ax2.set_yscale("log")
    ax2.set_ylabel("setup + first call (ms, log scale)")
    ax2.set_title("Up-front cost")
    fig.suptitle("Inference: eager vs TorchScript (script, trace) vs torch.compile", fontsize=11)
    _speedup_note(fig)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def dataloader_stall(summary: pd.DataFrame, host: dict) -> Figure:
    """Data-stall share (time the training loop waited inside ``next(iterator)``, % of the
    epoch's wall time) against num_workers, one line per dataset, with 95% bootstrap CIs."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    titles = {"tensor": "in-memory TensorDataset", "cpu": "CPU-heavy __getitem__", "io": "sleeping __getitem__ (I/O)"}
    for ds, c, marker in zip(("tensor", "cpu", "io"), PALETTE, ("o", "s", "^")):
        sub = summary[(summary["dataset"] == ds) & (summary["status"] == "ok")].sort_values("num_workers")
        if not len(sub):
            continue
        ax.errorbar(
            sub["num_workers"],
            sub["data_stall_pct"],
            yerr=_yerr(sub, "data_stall_pct", "data_stall_pct_ci_low", "data_stall_pct_ci_high"),
            color=c,
            marker=marker,
            capsize=3,
            label=titles[ds],
        )
    ax.set_xticks(sorted(summary["num_workers"].unique()))
    ax.set_xlabel("num_workers")
    ax.set_ylabel("data stall (% of epoch wall time)")
    ax.set_ylim(0, 105)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    ax.set_title(
        f"DataLoader: share of the epoch the training loop waited for data\n"
        f"({host.get('available_cpus', '?')} available CPUs; lower is better)",
        fontsize=10,
    )
    fig.text(
        0.01, 0.005, "Median over epochs; error bars: 95% bootstrap CI of the median.", fontsize=7.5, color="#555555"
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def _timeline(experiment: str):
    def draw(spans: pd.DataFrame, samples: pd.DataFrame, summary: pd.DataFrame, host: dict) -> Figure:
        return timelines.timeline(experiment, spans, samples, summary, host)

    draw.__doc__ = timelines.timeline.__doc__
    return draw


def _cores(experiment: str):
    def draw(samples: pd.DataFrame, summary: pd.DataFrame, host: dict) -> Figure:
        return timelines.core_heatmap(experiment, samples, summary, host)

    draw.__doc__ = timelines.core_heatmap.__doc__
    return draw


#: figure name -> drawing function. Its parameter names say what it reads: ``summary``,
#: ``spans``, ``samples`` (the experiment's CSVs), ``jobs`` (``jobs.csv``), ``host`` (host.json).
DRAW = {
    "gil_speedup": gil_speedup,
    "gil_timeline": _timeline("gil"),
    "gil_cores": _cores("gil"),
    "multiprocessing_throughput": multiprocessing_throughput,
    "multiprocessing_timeline": _timeline("multiprocessing"),
    "multiprocessing_cores": _cores("multiprocessing"),
    "dataloader_throughput": dataloader_throughput,
    "dataloader_stall": dataloader_stall,
    "dataloader_timeline": _timeline("dataloader"),
    "dataloader_cores": _cores("dataloader"),
    "intraop_scaling": intraop_scaling,
    "jit_latency": jit_latency,
    "job_schedule": timelines.job_schedule,
}


def _point_order(point: str) -> tuple:
    """Sort key of a point label ``"k1=v1 k2=v2"``: values in key order, numbers as numbers."""
    key = []
    for part in point.split():
        value = part.partition("=")[2]
        try:
            key.append((0, float(value), ""))
        except ValueError:
            key.append((1, 0.0, value))
    return tuple(key)


def compare_chart(comparison: pd.DataFrame, experiment: str, meta: dict) -> Figure:
    """One experiment across hosts: left, each host's own speedup over its interleaved
    baseline per point (bars grouped by host, 95% CI); right, each host's median over the
    baseline host's per point (log scale, 95% bootstrap CI; filled: Mann-Whitney U significant
    at 5%; open diamond: the same ratio per available CPU). Points that could not be compared
    are listed under the chart with the reason."""
    c = comparison[comparison["experiment"] == experiment]
    hosts = [h["name"] for h in meta["hosts"]]
    cpus = {h["name"]: h["available_cpus"] for h in meta["hosts"]}
    baseline = meta["baseline"]
    # points with a measured speedup on some host, in key order (a point no host measured,
    # e.g. skipped everywhere, is only listed under the chart)
    measured = c[c["speedup"].notna()]
    points = sorted((p for p in dict.fromkeys(measured["point"]) if isinstance(p, str) and p), key=_point_order)
    colours = {h: PALETTE[i % len(PALETTE)] for i, h in enumerate(hosts)}
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(12, 1.6 + 0.42 * max(1, len(points)) * max(1, len(hosts)) ** 0.5), sharey=True
    )
    y = np.arange(len(points))
    h_width = 0.8 / max(1, len(hosts))
    for j, host in enumerate(hosts):
        sub = c[c["host"] == host].drop_duplicates("point").set_index("point").reindex(points)
        pos = y + (j - (len(hosts) - 1) / 2) * h_width
        xerr = _yerr(sub, "speedup", "speedup_ci_low", "speedup_ci_high")
        ax1.barh(
            pos,
            sub["speedup"],
            h_width,
            xerr=xerr,
            capsize=2,
            color=colours[host],
            edgecolor="black",
            linewidth=0.4,
            label=f"{host} ({timelines.cpus_text(cpus[host])})",
        )
        if host == baseline:
            continue
        ok = sub["status"] == "compared"
        if not ok.any():
            continue
        r = sub[ok]
        pos_ok = pos[ok.to_numpy()]
        err = _yerr(r, "ratio", "ratio_ci_low", "ratio_ci_high")
        sig = r["verdict"].isin(["faster", "slower"]).to_numpy()
        ax2.errorbar(r["ratio"], pos_ok, xerr=err, fmt="none", ecolor=colours[host], capsize=2)
        ax2.scatter(
            r["ratio"][sig],
            pos_ok[sig],
            color=colours[host],
            s=36,
            zorder=3,
            label=f"{host} / {baseline} (significant)",
        )
        ax2.scatter(
            r["ratio"][~sig],
            pos_ok[~sig],
            facecolors="white",
            edgecolors=colours[host],
            s=36,
            zorder=3,
            label=f"{host} / {baseline} (not significant)",
        )
        ax2.scatter(
            r["ratio_per_cpu"],
            pos_ok,
            marker="D",
            facecolors="none",
            edgecolors=colours[host],
            s=22,
            zorder=3,
            label=f"{host} / {baseline} per available CPU",
        )
    ax1.axvline(1.0, color="black", linewidth=0.8)
    ax1.set_yticks(y, points, fontsize=8)
    ax1.invert_yaxis()
    ax1.set_xlabel("speedup over the point's baseline, same host (x)")
    ax1.set_title("Each host's own speedups", fontsize=10)
    ax1.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=min(3, len(hosts)), fontsize=8)
    ax2.axvline(1.0, color="black", linewidth=0.8)
    ax2.set_xscale("log")
    lo, hi = ax2.get_xlim()
    shown = [t for t in (0.0625, 0.125, 0.25, 0.5, 1, 2, 4, 8, 16) if lo <= t <= hi] or [1]
    ax2.set_xticks(shown, [f"{t:g}x" for t in shown])
    ax2.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax2.set_xlabel(f"median throughput over {baseline}'s (x, log scale)")
    ax2.set_title(f"Host against {baseline}, point by point", fontsize=10)
    if ax2.has_data():
        ax2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1, fontsize=7.5)
    missing = c[c["status"] == "not comparable"]
    note = "; ".join(f"{r['host']}: {r['point'] or experiment}: {r['reason']}" for _, r in missing.head(4).iterrows())
    if len(missing) > 4:
        note += f"; and {len(missing) - 4} more (see the table)"
    fig.suptitle(f"{experiment}: {', '.join(hosts)}", fontsize=11)
    fig.text(
        0.01,
        0.005,
        ("Not comparable: " + note) if note else "Every point was compared.",
        fontsize=7,
        color="#555555",
        wrap=True,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig
