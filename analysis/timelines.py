"""Where the CPU time goes: Gantt timelines and per-core heatmaps of measured windows.

Inputs are an experiment's combined ``spans.csv`` (work spans, one row per span: swept key
columns, ``repeat``, ``role``, ``actor``, ``kind``, ``start_s``, ``end_s`` in s from the start of
the span's measured window, plus ``cpu_s`` where the experiment records CPU time) and
``samples.csv`` (CPU samples: key columns, ``repeat``, ``role``, ``t_s`` in s on the same axis,
``series`` = ``tree``, ``system`` or ``cpu<i>``, ``busy_pct`` 0-100). Every chart draws one
measured window of each role of a point (its own configuration, ``role == "point"``, and the
roles its timeline declares): the round of median length (:func:`median_repeat`), so the
picture is a typical round, not the first one, cut at
:data:`MAX_WINDOW_S` so spans stay legible. What a timeline looks like for an experiment (its
span kinds, title, threads per actor) is its declared :class:`lab.declare.Timeline`;
which points it shows, its package's ``timeline_points`` hook (:mod:`analysis.hooks`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.plotting import cpus_text, plt
from lab import registry
from lab.declare import Timeline, point_label

#: Longest stretch of a window drawn, in s: a few seconds keeps 10-ms spans visible.
MAX_WINDOW_S = 3.0

#: Shortest stretch the utilisation strip averages over, in s. The kernel counts CPU time in
#: 10 ms ticks (``USER_HZ`` = 100), so a 25 ms sample of one process is off by up to 40% of a
#: CPU and "this job" drew above "whole machine" (the two count their ticks out of phase); over
#: 0.1 s the error is at most 10% of a CPU (5 points of 2 CPUs).
UTIL_BIN_S = 0.1


def natural(s: str) -> list:
    """Sort key that orders ``worker-10`` after ``worker-9``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(s))]


def point_of(row: Mapping, keys: Iterable[str]) -> dict:
    """``{key: value}`` of a summary row, numpy scalars as Python values."""
    return {k: row[k].item() if hasattr(row[k], "item") else row[k] for k in keys}


def spec_timeline(experiment: str) -> Timeline:
    """The declared :class:`lab.declare.Timeline` of ``experiment``.

    Raises:
        ValueError: for an experiment without a timeline, naming those with one.
    """
    timeline = registry.get(experiment).spec.timeline
    if timeline is None:
        with_timelines = [n for n, e in registry.experiments().items() if e.spec.timeline]
        raise ValueError(f"experiment {experiment!r} has no timeline; timelines exist for {', '.join(with_timelines)}")
    return timeline


def _nothing(experiment: str, what: str) -> Figure:
    """A placeholder chart: no point of the experiment has an ok measurement to draw."""
    fig, ax = plt.subplots(figsize=(8, 1.6))
    ax.axis("off")
    text = f"{what}: no point of {experiment} completed (see the table and the trust section)"
    ax.text(0.5, 0.5, text, ha="center", va="center")
    return fig


def select(df: pd.DataFrame, point: dict, repeat: int | None = 0, role: str = "point") -> pd.DataFrame:
    """Rows of ``point``'s ``role`` in ``repeat`` (every repeat where None) of spans.csv,
    samples.csv or replicates.csv (``point``: column -> value; every column must be in ``df``)."""
    if df.empty or "repeat" not in df:  # no point wrote any row: header with key columns only
        return df.iloc[0:0].assign(repeat=[], role=[], actor=[], kind=[], series=[], t_s=[], busy_pct=[])
    if "role" not in df:  # files from before interleaved baselines hold point rows only
        df = df.assign(role="point")
    mask = df["role"] == role
    if repeat is not None:
        mask &= df["repeat"] == repeat
    for k, v in point.items():
        mask &= df[k] == v
    return df[mask]


def median_repeat(samples: pd.DataFrame, point: dict, role: str = "point", spans: pd.DataFrame | None = None):
    """``(repeat, windows)``: the round of ``point`` and ``role`` whose measured window has the
    median length (the last CPU sample's time, else the last span's end; the lower median of
    an even count, the first such round on ties) and how many rounds there are; ``(0, 0)``
    where none was recorded. Every round does the same work, so its length is its inverse
    throughput: the median round is the typical one. Where ``spans`` record some rounds of
    the point only (the workload's verification: its epoch, repeat 0), those are the
    candidates: a window without spans has nothing to draw."""
    sel = select(samples, point, None, role)
    length = sel.groupby("repeat")["t_s"].max() if len(sel) else pd.Series(dtype=float)
    drawn = select(spans, point, None, role) if spans is not None else pd.DataFrame()
    if len(drawn):
        with_spans = drawn.groupby("repeat")["end_s"].max()
        length = length.reindex(with_spans.index).fillna(with_spans)
    if length.empty:
        return 0, 0
    ordered = length.sort_values(kind="stable")
    return int(ordered.index[(len(ordered) - 1) // 2]), len(ordered)


def window(spans: pd.DataFrame, samples: pd.DataFrame, point: dict, repeat: int = 0, role: str = "point") -> tuple:
    """Spans and samples of one measured window of ``point``: ``repeat``, ``role`` (its own,
    ``point``, by default).

    Returns:
        ``(spans, samples)`` DataFrames, possibly empty.
    """
    return select(spans, point, repeat, role), select(samples, point, repeat, role)


def _panels(experiment: str, points: list[dict]) -> list[tuple[dict, str, str]]:
    """``(point, role, label)`` of every window drawn: each point's declared roles."""
    roles = spec_timeline(experiment).roles
    return [(p, role, label) for p in points for role, label in roles.items()]


def _title(point: dict, label: str) -> str:
    """A window's title: its role's label (with the point when the timeline has several), else the point."""
    return f"{label} ({point_label(point)})" if label else point_label(point)


def actors(sp: pd.DataFrame) -> list[str]:
    """The actors of some spans, ``main`` first, then in natural order."""
    names = sorted(sp["actor"].unique(), key=natural)
    return sorted(names, key=lambda a: a != "main")


def _bars(ax, k: pd.DataFrame, colour: str, y: float, h: float, threads: int) -> None:
    starts = k["start_s"].to_numpy(dtype=float)
    dur = (k["end_s"] - k["start_s"]).to_numpy(dtype=float)
    if "cpu_s" in k and k["cpu_s"].notna().any():
        # wall span light, on-CPU share as the height of a dark fill
        ax.broken_barh(list(zip(starts, dur)), (y, h), facecolors=colour, alpha=0.25, linewidth=0)
        share = np.clip(k["cpu_s"].to_numpy(dtype=float) / np.where(dur > 0, dur * threads, np.nan), 0, 1)
        for s0, d, sh in zip(starts, dur, np.nan_to_num(share)):
            ax.broken_barh([(s0, d)], (y + h * (1 - sh), h * sh), facecolors=colour, linewidth=0)
    else:
        ax.broken_barh(list(zip(starts, dur)), (y, h), facecolors=colour, linewidth=0)
    if 1 < len(starts) <= MARKED_SPANS:  # back-to-back spans (a sleep loop's iterations) stay apart
        ax.vlines(starts[1:], y, y + h, colors="white", linewidth=0.7)


#: Up to this many spans in a row, each span's start is drawn as a thin white line, so that
#: spans that follow each other without a gap read as separate iterations, not as one bar.
MARKED_SPANS = 120


def _gantt(ax, sp: pd.DataFrame, rows: list[str], timeline: Timeline, threads: int = 1) -> set[str]:
    """Draw spans as bars, one row per actor; return the kinds drawn."""
    colours = {k.name: k.colour for k in timeline.kinds}
    kinds = set()
    for i, actor in enumerate(rows):
        a = sp[sp["actor"] == actor]
        multi = a["kind"].nunique() > 1
        # thin bands (a fetch inside the main loop's own wait) after the full-height bars
        for kind, k in sorted(a.groupby("kind"), key=lambda kv: kv[0] == "fetch"):
            kinds.add(kind)
            # a batch fetched inside the main loop's own wait: a thin band at the bottom of the row
            y, h = (i + 0.1, 0.3) if (multi and kind == "fetch") else (i - 0.4, 0.8)
            _bars(ax, k, colours.get(kind, "#999999"), y, h, threads)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    return kinds


#: The utilisation strip's two lines: the whole machine wide and light beneath the job's processes.
UTIL_STYLES = {
    "tree": {"color": "#0072B2", "linewidth": 1.4, "label": "CPU busy: this job's processes"},
    "system": {"color": "#555555", "linewidth": 3.2, "alpha": 0.4, "label": "CPU busy: whole machine"},
}


def util_bins(s: pd.DataFrame, bin_s: float = UTIL_BIN_S) -> tuple[list[float], list[float]]:
    """One series' samples (``t_s``, ``busy_pct``; each covers the interval that ends at its
    time, the first from 0) merged into runs of consecutive samples at least ``bin_s`` long; the
    samples left at the end join the bin before them where they cover less than half of
    ``bin_s`` (a 19 ms last bin of a gil processes window read the job's processes at 100% of
    2 CPUs and the whole machine at 50%: one 10 ms tick is half of such a bin).

    Returns:
        ``(edges, busy)``: the bins' edges in s (``len(busy) + 1`` of them, from 0) and each
        bin's busy % (0-100), the mean of its samples weighted by their intervals, which equals
        the CPU time over the bin divided by its length.
    """
    t = s["t_s"].to_numpy(float)
    busy = s["busy_pct"].to_numpy(float)
    dt = np.diff(np.concatenate([[0.0], t]))
    edges, out, acc_t, acc_b = [0.0], [], 0.0, 0.0
    for ti, di, bi in zip(t, dt, busy):
        acc_t, acc_b = acc_t + di, acc_b + di * bi
        if acc_t >= bin_s - 1e-9 or ti == t[-1]:
            edges.append(float(ti))
            out.append(acc_b / acc_t if acc_t > 0 else float(bi))
            acc_t = acc_b = 0.0
    if len(out) > 1 and edges[-1] - edges[-2] < bin_s / 2:  # a short tail: into the bin before it
        (a, b), (x, y) = (edges[-3], edges[-2]), (edges[-2], edges[-1])
        out[-2:] = [(out[-2] * (b - a) + out[-1] * (y - x)) / (y - a)]
        del edges[-2]
    return edges, out


def _utilisation(ax, sa: pd.DataFrame, ncpu) -> None:
    # the whole machine first, wide and light, the job's processes on top: where the two are equal
    # (every busy CPU is the job's) both still show, not the one drawn last alone
    for series, style in (("system", UTIL_STYLES["system"]), ("tree", UTIL_STYLES["tree"])):
        s = sa[sa["series"] == series].sort_values("t_s")
        if len(s):
            edges, busy = util_bins(s)
            ax.stairs(busy, edges, baseline=None, **style)
    ax.set_ylim(0, 105)
    ax.set_yticks([0, 50, 100])
    ax.set_ylabel(f"busy %\nof {cpus_text(ncpu)}", fontsize=8)


def _group_ends(experiment: str, points: list[dict], ends: list[float]) -> list[float]:
    """Per point, the longest window among the points that share its time scale (same work: the
    timeline's ``scale_keys``, else the experiment's group)."""
    spec = registry.get(experiment).spec
    group = spec.timeline.scale_keys if spec.timeline and spec.timeline.scale_keys is not None else spec.group
    keys = [tuple(p[g] for g in group) for p in points]
    longest: dict[tuple, float] = {}
    for k, e in zip(keys, ends):
        longest[k] = max(longest.get(k, 0.0), e)
    return [longest[k] for k in keys]


def _t_end(sp: pd.DataFrame, sa: pd.DataFrame) -> float:
    ends = [sp["end_s"].max() if len(sp) else 0.0, sa["t_s"].max() if len(sa) else 0.0]
    return float(max(ends)) if max(ends) > 0 else 1.0


def _window_panel(
    sub, point: dict, label: str, sp, sa, group_end: float, timeline: Timeline, ncpu, rounds: int = 0
) -> set[str]:
    """One point's Gantt rows and utilisation strip in subfigure ``sub``; returns kinds drawn."""
    n = max(1, sp["actor"].nunique()) if len(sp) else 1
    ax_g, ax_u = sub.subplots(2, 1, sharex=True, height_ratios=[0.36 * n + 0.3, 0.7])
    wall, shown = _t_end(sp, sa), min(group_end, MAX_WINDOW_S)
    kinds = set()
    if len(sp):
        kinds = _gantt(ax_g, sp[sp["start_s"] < shown], actors(sp), timeline, int(timeline.threads_per_actor(point)))
    else:
        ax_g.text(0.5, 0.5, "no spans recorded", transform=ax_g.transAxes, ha="center", va="center")
    _utilisation(ax_u, sa, ncpu)
    ax_u.set_xlim(0, shown * 1.01)
    cut = f"; first {shown:.2g} s shown" if wall > shown else ""
    n_samples = sa[sa["series"] == "tree"]["t_s"].nunique() if len(sa) else 0
    which = f" (median of {rounds} rounds)" if rounds > 1 else ""
    title = (
        f"{_title(point, label)}: window of {wall:.3g} s{which}, {n_samples} CPU sample{'' if n_samples == 1 else 's'}"
        f"{f' in means over {UTIL_BIN_S:g} s' if n_samples > 1 else ''}"
    )
    sub.suptitle(title + cut, x=0.01, ha="left", fontsize=9.5)
    ax_u.set_xlabel("time since start of measured window (s)", fontsize=8.5)
    return kinds


def _legend(timeline: Timeline, kinds: set[str]) -> list:
    handles = [Patch(color=k.colour, label=k.label) for k in timeline.kinds if k.name in kinds]
    if timeline.on_cpu_share:
        handles.append(Patch(color="#777777", alpha=0.3, label="light: wall time; dark fill height: on-CPU share"))
    return handles + [
        Line2D([], [], **UTIL_STYLES["tree"]),
        Line2D([], [], **UTIL_STYLES["system"]),
    ]


def timeline(
    experiment: str,
    spans: pd.DataFrame,
    samples: pd.DataFrame,
    summary: pd.DataFrame,
    host: Mapping,
    points: list[dict],
) -> Figure:
    """Gantt chart of work spans per actor (thread, process or worker) with the CPU utilisation
    of the same window below it, for each of ``points`` (``{key: value}``, the experiment's
    choice: :func:`analysis.hooks.timeline_points`).

    Bars are coloured by span kind; where the experiment records CPU time (``on_cpu_share``)
    the light bar is the span's wall time and the dark fill's height its on-CPU share
    (``cpu_s`` / wall time, per thread of the actor). The utilisation panel shares the Gantt
    rows' time axis: this job's process tree and the whole machine, % of the available CPUs.
    Points of one group (same work) share the time axis's scale.
    """
    declared = spec_timeline(experiment)
    if not points:
        return _nothing(experiment, "timeline")
    ncpu = host.get("available_cpus", "?")
    panels = _panels(experiment, points)
    picks = [median_repeat(samples, p, role, spans) for p, role, _ in panels]
    wins = [window(spans, samples, p, rep, role) for (p, role, _), (rep, _) in zip(panels, picks)]
    heights = [0.36 * (max(1, sp["actor"].nunique()) if len(sp) else 1) + 0.3 + 0.7 + 0.75 for sp, _ in wins]
    fig = plt.figure(figsize=(10, 1.0 + sum(heights)), layout="constrained")
    subfigs = fig.subfigures(len(panels) + 1, 1, height_ratios=[1.0, *heights], hspace=0.02)
    ends = _group_ends(experiment, [p for p, _, _ in panels], [_t_end(sp, sa) for sp, sa in wins])
    kinds: set[str] = set()
    for (point, _, label), (sp, sa), end, sub, pick in zip(panels, wins, ends, subfigs[1:], picks):
        kinds |= _window_panel(sub, point, label, sp, sa, end, declared, ncpu, pick[1])
    head = subfigs[0]
    head.suptitle(f"{declared.title} ({cpus_text(ncpu)} available)", fontsize=11)
    head.legend(handles=_legend(declared, kinds), loc="center", ncol=3, fontsize=8)
    return fig


def _heatmap_panel(ax, point: dict, label: str, sa: pd.DataFrame, cores: list[str], end: float, ncpu):
    """One point's per-core heatmap; returns the mesh (None without samples)."""
    wide = sa[sa["series"].isin(cores)].pivot_table(index="t_s", columns="series", values="busy_pct")
    wide = wide.reindex(columns=cores)
    if len(wide) == 0:
        ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center", va="center")
        return None
    t = wide.index.to_numpy(dtype=float)
    step = float(np.median(np.diff(t))) if len(t) > 1 else 0.1
    edges = np.concatenate([[max(0.0, t[0] - step)], t])
    # viridis: 100% busy is a saturated yellow, not magma's near-white, which read as "no data"
    # beside the end of a shorter window; after a window's end the axes show grey, not white
    mesh = ax.pcolormesh(
        edges, np.arange(len(cores) + 1), wide.to_numpy(dtype=float).T, cmap="viridis", vmin=0, vmax=100, shading="flat"
    )
    ax.set_facecolor("0.88")
    ax.set_yticks(np.arange(len(cores)) + 0.5, cores, fontsize=7 if len(cores) > 8 else 8)
    ax.invert_yaxis()
    ax.set_xlim(0, min(end, MAX_WINDOW_S * 4))
    ax.grid(False)
    mean = sa[sa["series"] == "tree"]["busy_pct"].mean()
    title = f"{_title(point, label)}: this job's processes {mean:.0f}% of {cpus_text(ncpu)} on average"
    ax.set_title(title, loc="left", fontsize=9)
    return mesh


def core_heatmap(
    experiment: str,
    samples: pd.DataFrame,
    summary: pd.DataFrame,
    host: Mapping,
    points: list[dict],
    spans: pd.DataFrame | None = None,
) -> Figure:
    """Per-core utilisation (logical CPU x time, colour = busy %) for each of ``points`` (as
    :func:`timeline`), one panel each; sampled every 1/``sample_hz`` s by the job's
    CPU sampler, so a cell is one sampling interval. The windows are the timeline's
    (:func:`median_repeat`, with ``spans`` saying which rounds have spans to draw)."""
    if not points:
        return _nothing(experiment, "per-core utilisation")
    panels = _panels(experiment, points)
    sels = [select(samples, p, median_repeat(samples, p, role, spans)[0], role) for p, role, _ in panels]
    cores = sorted({s for sa in sels for s in sa["series"].unique() if str(s).startswith("cpu")}, key=natural)
    ends = _group_ends(experiment, [p for p, _, _ in panels], [_t_end(sa.iloc[0:0], sa) for sa in sels])
    h = 0.22 * max(1, len(cores)) + 0.55
    # constrained layout keeps the figure's title clear of the first panel's (one panel: 2 s tall)
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.1 + h * len(panels)), squeeze=False, layout="constrained")
    ncpu = host.get("available_cpus", "?")
    meshes = [
        _heatmap_panel(ax, p, label, sa, cores, e, ncpu)
        for ax, (p, _, label), sa, e in zip(axes[:, 0], panels, sels, ends)
    ]
    axes[-1, 0].set_xlabel("time since start of measured window (s)")
    mesh = next((m for m in reversed(meshes) if m is not None), None)
    if mesh is not None:
        fig.colorbar(mesh, ax=axes[:, 0].tolist(), label="busy % (all processes)", fraction=0.03, pad=0.02)
    fig.suptitle(f"Per-core utilisation, {experiment}: one row per logical CPU", fontsize=11)
    return fig
