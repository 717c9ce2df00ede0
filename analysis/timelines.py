"""Where the CPU time goes: Gantt timelines, per-core heatmaps and the run's job schedule.

Inputs are an experiment's combined ``spans.csv`` (work spans, one row per span: swept key
columns, ``repeat``, ``role``, ``actor``, ``kind``, ``start_s``, ``end_s`` in s from the start of
the span's measured window, plus ``cpu_s`` where the experiment records CPU time) and
``samples.csv`` (CPU samples: key columns, ``repeat``, ``role``, ``t_s`` in s on the same axis,
``series`` = ``tree``, ``system`` or ``cpu<i>``, ``busy_pct`` 0-100), and the run's ``jobs.csv``
(:func:`analysis.runinfo.job_intervals`). Every chart draws one measured window: repeat 0 of the
point's own configuration (``role == "point"``), cut at :data:`MAX_WINDOW_S` so spans stay legible.

:func:`timeline_points` chooses which configuration points a timeline shows, per experiment.
"""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from analysis.spec import SPECS  # noqa: E402

#: Longest stretch of a window drawn, in s: a few seconds keeps 10-ms spans visible.
MAX_WINDOW_S = 3.0

#: Colour per span kind (Okabe-Ito palette) and what the legend calls it.
KIND_STYLE = {
    "cpu": ("#0072B2", "CPU-bound chunk (wall time)"),
    "io": ("#56B4E9", "sleep-loop chunk (wall time)"),
    "train": ("#009E73", "training steps (wall time)"),
    "wait": ("#D55E00", "main loop waits for a batch (data stall)"),
    "step": ("#0072B2", "training step"),
    "fetch": ("#009E73", "batch fetched and collated"),
}

#: Colour per job phase in the schedule chart.
PHASE_STYLE = {
    "startup": ("#BBBBBB", "start-up: interpreter, argument parsing"),
    "lock_wait": ("#F0E442", "waiting for the measurement lock"),
    "run": ("#56B4E9", "torch import, set-up, warm-up, measurement"),
    "window": ("#0072B2", "inside measured windows"),
    "write": ("#CC79A7", "writing CSV files"),
}


def _natural(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(s))]


def cpus_text(n) -> str:
    """``"1 CPU"``, ``"2 CPUs"``; ``"? CPUs"`` when ``n`` is unknown (None)."""
    return f"{n} CPU" if n == 1 else f"{'?' if n is None else n} CPUs"


def point_label(point: dict) -> str:
    """``key=value`` pairs of a point, space separated, e.g. ``mode=threads workers=2``."""
    return " ".join(f"{k}={v}" for k, v in point.items())


def timeline_points(experiment: str, summary: pd.DataFrame) -> list[dict]:
    """Configuration points a timeline draws, each ``{key: value}`` in the spec's key order.

    * gil: the CPU-bound workload (else I/O), fewest tasks, every mode;
    * multiprocessing: 1 x 1, the best point and the point with the most threads in all (P x T);
    * dataloader: per dataset, num_workers = 0 and the best num_workers > 0 (by speedup,
      else the largest num_workers).

    Only points with at least one ``ok`` replicate are chosen.

    Raises:
        ValueError: for an experiment without timelines (intraop, jit record no spans).
    """
    spec = SPECS[experiment]
    keys = list(spec.keys)
    ok = summary[summary["status"] == "ok"]
    chosen: list[pd.Series] = []
    if experiment == "gil":
        wl = "cpu" if "cpu" in set(ok["workload"]) else (ok["workload"].iloc[0] if len(ok) else None)
        sub = ok[ok["workload"] == wl]
        if len(sub):
            sub = sub[sub["workers"] == sub["workers"].min()]
            order = {"sequential": 0, "threads": 1, "processes": 2}
            chosen = [r for _, r in sub.sort_values("mode", key=lambda m: m.map(order)).iterrows()]
    elif experiment == "multiprocessing":
        if len(ok):
            base = ok[(ok["processes"] == 1) & (ok["threads"] == 1)]
            best = ok[ok["best"].astype(str) == "True"]
            most = ok.loc[[(ok["processes"] * ok["threads"]).idxmax()]]
            chosen = [r for part in (base, best, most) for _, r in part.head(1).iterrows()]
    elif experiment == "dataloader":
        for ds in ("tensor", "cpu", "io"):
            sub = ok[ok["dataset"] == ds]
            if not len(sub):
                continue
            chosen += [r for _, r in sub[sub["num_workers"] == 0].head(1).iterrows()]
            more = sub[sub["num_workers"] > 0]
            if len(more):
                pick = more["speedup"].idxmax() if more["speedup"].notna().any() else more["num_workers"].idxmax()
                chosen.append(more.loc[pick])
    else:
        raise ValueError(
            f"experiment {experiment!r} has no timeline; timelines exist for gil, multiprocessing, dataloader"
        )
    points, seen = [], set()
    for r in chosen:
        p = {k: r[k].item() if hasattr(r[k], "item") else r[k] for k in keys}
        if tuple(p.values()) not in seen:
            seen.add(tuple(p.values()))
            points.append(p)
    return points


def _nothing(experiment: str, what: str) -> Figure:
    """A placeholder chart: no point of the experiment has an ok measurement to draw."""
    fig, ax = plt.subplots(figsize=(8, 1.6))
    ax.axis("off")
    ax.text(
        0.5,
        0.5,
        f"{what}: no point of {experiment} completed (see the table and the trust section)",
        ha="center",
        va="center",
    )
    return fig


def _select(df: pd.DataFrame, point: dict, repeat: int = 0) -> pd.DataFrame:
    if df.empty or "repeat" not in df:  # no point wrote any row: header with key columns only
        return df.iloc[0:0].assign(repeat=[], role=[], actor=[], kind=[], series=[], t_s=[], busy_pct=[])
    if "role" not in df:  # files from before interleaved baselines hold point rows only
        df = df.assign(role="point")
    mask = (df["repeat"] == repeat) & (df["role"] == "point")
    for k, v in point.items():
        mask &= df[k].astype(str) == str(v)
    return df[mask]


def window(spans: pd.DataFrame, samples: pd.DataFrame, point: dict, repeat: int = 0) -> tuple:
    """Spans and samples of one measured window of ``point`` (its own role, ``repeat``).

    Returns:
        ``(spans, samples)`` DataFrames, possibly empty.
    """
    return _select(spans, point, repeat), _select(samples, point, repeat)


def _actors(sp: pd.DataFrame) -> list[str]:
    names = sorted(sp["actor"].unique(), key=_natural)
    return sorted(names, key=lambda a: a != "main")  # main first


def _gantt(ax, sp: pd.DataFrame, actors: list[str], threads: int = 1) -> set[str]:
    """Draw spans as bars, one row per actor; return the kinds drawn."""
    kinds = set()
    for i, actor in enumerate(actors):
        a = sp[sp["actor"] == actor]
        multi = a["kind"].nunique() > 1
        # thin bands (a fetch inside the main loop's own wait) after the full-height bars
        for kind, k in sorted(a.groupby("kind"), key=lambda kv: kv[0] == "fetch"):
            colour = KIND_STYLE.get(kind, ("#999999", kind))[0]
            kinds.add(kind)
            starts = k["start_s"].to_numpy()
            dur = (k["end_s"] - k["start_s"]).to_numpy()
            # a batch fetched inside the main loop's own wait: a thin band at the bottom of the row
            y, h = (i + 0.1, 0.3) if (multi and kind == "fetch") else (i - 0.4, 0.8)
            if "cpu_s" in k and k["cpu_s"].notna().any():
                # wall span light, on-CPU share as the height of a dark fill
                ax.broken_barh(list(zip(starts, dur)), (y, h), facecolors=colour, alpha=0.25, linewidth=0)
                share = np.clip(k["cpu_s"].to_numpy() / np.where(dur > 0, dur * threads, np.nan), 0, 1)
                for s0, d, sh in zip(starts, dur, np.nan_to_num(share)):
                    ax.broken_barh([(s0, d)], (y + h * (1 - sh), h * sh), facecolors=colour, linewidth=0)
            else:
                ax.broken_barh(list(zip(starts, dur)), (y, h), facecolors=colour, linewidth=0)
    ax.set_yticks(range(len(actors)), actors)
    ax.set_ylim(-0.6, len(actors) - 0.4)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    return kinds


def _utilisation(ax, sa: pd.DataFrame, ncpu) -> None:
    for series, colour, label in (
        ("tree", "#0072B2", "this job's processes"),
        ("system", "#D55E00", "whole machine"),
    ):
        s = sa[sa["series"] == series].sort_values("t_s")
        if len(s):
            # a sample covers the interval that ends at its time
            ax.step(s["t_s"], s["busy_pct"], where="pre", color=colour, linewidth=1.4, label=label)
    ax.set_ylim(0, 105)
    ax.set_yticks([0, 50, 100])
    ax.set_ylabel(f"busy %\nof {cpus_text(ncpu)}", fontsize=8)


def _shared_groups(experiment: str, points: list[dict]) -> list[tuple]:
    """Group key per point: points of one group share a time axis (same work)."""
    group = SPECS[experiment].group
    return [tuple(p[g] for g in group) for p in points]


def _t_end(sp: pd.DataFrame, sa: pd.DataFrame) -> float:
    ends = [sp["end_s"].max() if len(sp) else 0.0, sa["t_s"].max() if len(sa) else 0.0]
    return float(max(ends)) if max(ends) > 0 else 1.0


def timeline(experiment: str, spans: pd.DataFrame, samples: pd.DataFrame, summary: pd.DataFrame, host: dict) -> Figure:
    """Gantt chart of work spans per actor (thread, process or worker) with the CPU utilisation
    of the same window below it, for each point of :func:`timeline_points`.

    Bars are coloured by span kind; where the experiment records CPU time (gil, multiprocessing)
    the light bar is the span's wall time and the dark fill's height its on-CPU share
    (``cpu_s`` / wall time, per thread of the actor). The utilisation panel shares the Gantt
    rows' time axis: this job's process tree and the whole machine, % of the available CPUs.
    Points of one group (same work) share the time axis's scale.
    """
    points = timeline_points(experiment, summary)
    if not points:
        return _nothing(experiment, "timeline")
    ncpu = host.get("available_cpus", "?")
    wins = [window(spans, samples, p) for p in points]
    rows = [max(1, sp["actor"].nunique()) for sp, _ in wins]
    heights = [0.36 * n + 0.3 + 0.7 + 0.75 for n in rows]
    fig = plt.figure(figsize=(10, 1.0 + sum(heights)), layout="constrained")
    subfigs = fig.subfigures(len(points) + 1, 1, height_ratios=[1.0, *heights], hspace=0.02)
    groups = _shared_groups(experiment, points)
    group_end = {}
    for g, (sp, sa) in zip(groups, wins):
        group_end[g] = max(group_end.get(g, 0.0), _t_end(sp, sa))
    kinds: set[str] = set()
    for point, (sp, sa), g, n, sub in zip(points, wins, groups, rows, subfigs[1:]):
        ax_g, ax_u = sub.subplots(2, 1, sharex=True, height_ratios=[0.36 * n + 0.3, 0.7])
        wall = _t_end(sp, sa)
        shown = min(group_end[g], MAX_WINDOW_S)
        threads = int(point.get("threads", 1)) if experiment == "multiprocessing" else 1
        if len(sp):
            kinds |= _gantt(ax_g, sp[sp["start_s"] < shown], _actors(sp), threads)
        else:
            ax_g.text(0.5, 0.5, "no spans recorded", transform=ax_g.transAxes, ha="center", va="center")
        _utilisation(ax_u, sa, ncpu)
        ax_u.set_xlim(0, shown * 1.01)
        cut = f"; first {shown:.2g} s shown" if wall > shown else ""
        n_samples = sa[sa["series"] == "tree"]["t_s"].nunique() if len(sa) else 0
        sub.suptitle(
            f"{point_label(point)}: window of {wall:.3g} s, {n_samples} CPU sample{'' if n_samples == 1 else 's'}{cut}",
            x=0.01,
            ha="left",
            fontsize=9.5,
        )
        ax_u.set_xlabel("time since start of measured window (s)", fontsize=8.5)
    handles = [Patch(color=KIND_STYLE[k][0], label=KIND_STYLE[k][1]) for k in KIND_STYLE if k in kinds]
    if experiment in ("gil", "multiprocessing"):
        handles.append(Patch(color="#777777", alpha=0.3, label="light: wall time; dark fill height: on-CPU share"))
    handles += [
        Line2D([], [], color="#0072B2", linewidth=1.4, label="CPU busy: this job's processes"),
        Line2D([], [], color="#D55E00", linewidth=1.4, label="CPU busy: whole machine"),
    ]
    titles = {
        "gil": "GIL timeline: work spans per thread or process, and CPU utilisation",
        "multiprocessing": "Training processes: work spans per process, and CPU utilisation",
        "dataloader": "DataLoader: main loop and workers per batch, and CPU utilisation",
    }
    head = subfigs[0]
    head.suptitle(f"{titles.get(experiment, experiment)} ({cpus_text(ncpu)} available)", fontsize=11)
    head.legend(handles=handles, loc="center", ncol=3, fontsize=8)
    return fig


def core_heatmap(experiment: str, samples: pd.DataFrame, summary: pd.DataFrame, host: dict) -> Figure:
    """Per-core utilisation (logical CPU x time, colour = busy %) for the points of
    :func:`timeline_points`, one panel each; sampled every 1/``sample_hz`` s by the job's
    CPU sampler, so a cell is one sampling interval."""
    points = timeline_points(experiment, summary)
    if not points:
        return _nothing(experiment, "per-core utilisation")
    sels = [_select(samples, p) for p in points]
    cores = sorted({s for sa in sels for s in sa["series"].unique() if str(s).startswith("cpu")}, key=_natural)
    groups = _shared_groups(experiment, points)
    group_end = {}
    for g, sa in zip(groups, sels):
        group_end[g] = max(group_end.get(g, 0.0), _t_end(sa.iloc[0:0], sa))
    h = 0.22 * max(1, len(cores)) + 0.55
    fig, axes = plt.subplots(
        len(points), 1, figsize=(10, 0.9 + h * len(points)), squeeze=False, gridspec_kw={"hspace": 0.9}
    )
    mesh = None
    for ax, point, sa, g in zip(axes[:, 0], points, sels, groups):
        wide = sa[sa["series"].isin(cores)].pivot_table(index="t_s", columns="series", values="busy_pct")
        wide = wide.reindex(columns=cores)
        if len(wide) == 0:
            ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center", va="center")
            continue
        t = wide.index.to_numpy()
        step = float(np.median(np.diff(t))) if len(t) > 1 else 0.1
        edges = np.concatenate([[max(0.0, t[0] - step)], t])
        mesh = ax.pcolormesh(
            edges, np.arange(len(cores) + 1), wide.to_numpy().T, cmap="magma", vmin=0, vmax=100, shading="flat"
        )
        ax.set_yticks(np.arange(len(cores)) + 0.5, cores, fontsize=7 if len(cores) > 8 else 8)
        ax.invert_yaxis()
        ax.set_xlim(0, min(group_end[g], MAX_WINDOW_S * 4))
        ax.grid(False)
        mean = sa[sa["series"] == "tree"]["busy_pct"].mean()
        ncpu = host.get("available_cpus", "?")
        ax.set_title(
            f"{point_label(point)}: this job's processes {mean:.0f}% of {cpus_text(ncpu)} on average",
            loc="left",
            fontsize=9,
        )
    axes[-1, 0].set_xlabel("time since start of measured window (s)")
    if mesh is not None:
        fig.colorbar(mesh, ax=axes[:, 0].tolist(), label="busy % (all processes)", fraction=0.03, pad=0.02)
    fig.suptitle(f"Per-core utilisation, {SPECS[experiment].name}: one row per logical CPU", fontsize=11)
    return fig


def job_schedule(jobs: pd.DataFrame, host: dict) -> Figure:
    """The run's measurement jobs as a Gantt chart: one row per job, its phases coloured
    (start-up, lock wait, set-up plus measurement, writing) and its measured windows dark on
    top; gaps between rows are the pipeline's overhead between jobs (Snakemake scheduling).

    Args:
        jobs: :func:`analysis.runinfo.job_intervals` (``job``, ``phase``, ``start_unix``,
            ``end_unix``).
    """
    if jobs.empty:
        fig, ax = plt.subplots(figsize=(8, 2))
        ax.text(0.5, 0.5, "no job was recorded", ha="center", va="center")
        return fig
    t0 = jobs["start_unix"].min()
    order = jobs.groupby("job")["start_unix"].min().sort_values().index.tolist()
    fig, ax = plt.subplots(figsize=(10, 2.2 + 0.2 * len(order)), layout="constrained")
    for phase, (colour, _) in PHASE_STYLE.items():
        sub = jobs[jobs["phase"] == phase]
        for job, js in sub.groupby("job"):
            i = order.index(job)
            h = 0.45 if phase == "window" else 0.8
            ax.broken_barh(
                list(zip(js["start_unix"] - t0, js["end_unix"] - js["start_unix"])),
                (i - h / 2, h),
                facecolors=colour,
                linewidth=0,
            )
    ax.set_yticks(range(len(order)), order, fontsize=6.5 if len(order) > 30 else 7.5)
    ax.set_ylim(-0.6, len(order) - 0.4)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("time since the first job started (s)")
    spans = jobs[jobs["phase"] != "window"].groupby("job").agg(s=("start_unix", "min"), e=("end_unix", "max"))
    spans = spans.sort_values("s")
    busy = (spans["e"] - spans["s"]).sum()
    phase_s = spans["e"].max() - spans["s"].min()
    measured = (
        jobs.loc[jobs["phase"] == "window", "end_unix"] - jobs.loc[jobs["phase"] == "window", "start_unix"]
    ).sum()
    ax.set_title(
        f"{len(order)} measurement jobs in {phase_s:.0f} s: {100 * measured / phase_s:.0f}% inside measured windows, "
        f"{phase_s - busy:.0f} s between jobs",
        fontsize=10,
        loc="left",
    )
    handles = [Patch(color=c, label=lab) for c, lab in PHASE_STYLE.values()]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8)
    fig.suptitle(f"Job schedule of the run on {host.get('host', '?')}", fontsize=11)
    return fig
