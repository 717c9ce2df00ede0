"""Every figure by name, and the host comparison chart.

A figure of an experiment is drawn by a hook of that experiment package (``figures`` of its
``analysis.ANALYSIS``, its declared figures), or, for an experiment with a timeline, by
:mod:`analysis.timelines` (``<name>_timeline``, ``<name>_cores``); each takes one
:class:`lab.contract.Context` and returns a matplotlib Figure. Figures of the whole run are
:data:`HOST_FIGURES`, drawn from one table of the host directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import hooks, schedule, timelines
from analysis.plotting import PALETTE, cpus_text, not_measured_panel, plt, yerr
from analysis.runinfo import RUN_FIGURES
from analysis.tables import read_table
from lab import registry
from lab.contract import Context
from lab.fileio import read_findings, read_json_object
from lab.host import Host
from lab.registry import RegistryError

#: Figures of the whole run rather than of one experiment: name -> (drawing function, the
#: table of ``results/<host>/`` it draws). Each is called ``draw(table, host, run)``, ``run``
#: the run.json written with that table (None where there is none).
HOST_FIGURES: dict[str, tuple[Callable[[pd.DataFrame, Mapping, Mapping | None], Figure], str]] = {
    "job_schedule": (schedule.job_schedule, "jobs.csv"),
    "run_capacity": (schedule.run_capacity, "capacity.csv"),
}
if set(HOST_FIGURES) != set(RUN_FIGURES):  # pragma: no cover - a figure added in one place only
    raise RegistryError(
        f"analysis/figures.py: HOST_FIGURES {sorted(HOST_FIGURES)} differ from RUN_FIGURES {RUN_FIGURES}"
    )


def _timeline(experiment: str) -> Callable[[Context], Figure]:
    def draw(ctx: Context) -> Figure:
        points = hooks.timeline_points(experiment, ctx.summary)
        return timelines.timeline(experiment, ctx.spans, ctx.samples, ctx.summary, ctx.host, points)

    draw.__doc__ = timelines.timeline.__doc__
    return draw


def _cores(experiment: str) -> Callable[[Context], Figure]:
    def draw(ctx: Context) -> Figure:
        points = hooks.timeline_points(experiment, ctx.summary)
        return timelines.core_heatmap(experiment, ctx.samples, ctx.summary, ctx.host, points, ctx.spans)

    draw.__doc__ = timelines.core_heatmap.__doc__
    return draw


def figure_owner(name: str) -> str | None:
    """The experiment whose data figure ``name`` draws; None for a figure of the whole run.

    Raises:
        ValueError: for a name no experiment declares, naming the known figures.
    """
    if name in HOST_FIGURES:
        return None
    owners = registry.figures()
    if name not in owners:
        raise ValueError(f"unknown figure {name!r}; known: {', '.join([*owners, *HOST_FIGURES])}")
    return owners[name]


def drawing(name: str) -> Callable[[Context], Figure]:
    """The function that draws experiment figure ``name`` from a :class:`lab.contract.Context`.

    Raises:
        ValueError: for an unknown figure or a figure of the whole run (:data:`HOST_FIGURES`).
        RegistryError: if the experiment declares the figure but its ``ANALYSIS`` lacks it.
    """
    experiment = figure_owner(name)
    if experiment is None:
        raise ValueError(f"figure {name!r} is a figure of the whole run: draw it with host_figure()")
    if name == f"{experiment}_timeline":
        return _timeline(experiment)
    if name == f"{experiment}_cores":
        return _cores(experiment)
    exp = registry.get(experiment)
    draw = exp.hooks().figures.get(name)
    if draw is None:
        raise RegistryError(
            f"{exp.path / 'analysis.py'}: ANALYSIS has no figure {name!r}, declared in {exp.path / '__init__.py'}"
        )
    return draw


def draw_figure(name: str, host_dir: Path) -> Figure:
    """Figure ``name`` of ``results/<host>/`` (``host_dir``): an experiment's, drawn from a
    :class:`lab.contract.Context` whose tables are read on first use, or one of the whole run.

    Raises:
        ValueError: for an unknown figure.
        DataError: for a table the figure reads that is missing or malformed.
    """
    host = Host.load(host_dir)
    experiment = figure_owner(name)
    if experiment is None:
        draw, table = HOST_FIGURES[name]
        run = host_dir / "run.json"  # written with the run's tables (analysis runinfo)
        return draw(read_table(host_dir / table), host, read_json_object(run) if run.exists() else None)

    def load(what: str):
        if what == "findings":
            return read_findings(host_dir / experiment / "findings.json")
        if what == "jobs":
            return None
        return read_table(host_dir / experiment / f"{what}.csv", experiment)

    summary = host_dir / experiment / "summary.csv"
    if summary.exists():
        rows = read_table(summary, experiment)
        if "status" in rows and len(rows) and not (rows["status"] == "ok").any():
            return nothing_measured(name, experiment, rows)
    return drawing(name)(Context(host, loader=load))


def nothing_measured(name: str, experiment: str, summary: pd.DataFrame) -> Figure:
    """The figure of an experiment none of whose points was measured (every one skipped, failed
    or timed out): one panel with the first point's status and reason, so that the report keeps
    its place and says why, instead of the figure failing on empty data."""
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    title = registry.get(experiment).prose.get("title", experiment)
    not_measured_panel(ax, f"{title}: no point measured ({len(summary)} in the grid)", summary)
    for side in ax.spines.values():
        side.set_visible(False)
    fig.suptitle(name, fontsize=9, color="#555555")
    fig.tight_layout()
    return fig


def all_figures() -> list[str]:
    """Every figure name: each experiment's, then those of the whole run."""
    return [*registry.figures(), *HOST_FIGURES]


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


def _own_speedups(ax, c: pd.DataFrame, hosts: list[str], points: list[str], colours: dict, cpus: dict) -> None:
    y, width = np.arange(len(points)), 0.8 / max(1, len(hosts))
    for j, host in enumerate(hosts):
        sub = c[c["host"] == host].drop_duplicates("point").set_index("point").reindex(points)
        pos = y + (j - (len(hosts) - 1) / 2) * width
        xerr = yerr(sub, "speedup", "speedup_ci_low", "speedup_ci_high")
        label = f"{host} ({cpus_text(cpus[host])})"
        ax.barh(
            pos,
            sub["speedup"],
            width,
            xerr=xerr,
            capsize=2,
            color=colours[host],
            edgecolor="black",
            linewidth=0.4,
            label=label,
        )
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(y, short_labels(points)[0], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speedup over the point's baseline, same host (x)")
    ax.set_title("Each host's own speedups", fontsize=10)


def short_labels(points: list[str]) -> tuple[list[str], str]:
    """Point labels (``"k1=v1 k2=v2"``) without the ``key=value`` parts every point shares, and
    those shared parts (``""`` if none; all of them stay where that would leave a label empty).

    Returns:
        ``(labels, shared)``: one label per point, in order, and the shared parts joined by spaces.
    """
    parts = [p.split() for p in points]
    shared = [x for x in parts[0] if all(x in q for q in parts[1:])] if len(parts) > 1 else []
    labels = [" ".join(x for x in q if x not in shared) for q in parts]
    if not shared or not all(labels):
        return list(points), ""
    return labels, " ".join(shared)


#: Ratio ticks of the log axis, coarse to fine: the first set of which at least 3 fit the range.
RATIO_TICKS = (
    (0.0625, 0.125, 0.25, 0.5, 1, 2, 4, 8, 16),
    (0.5, 0.67, 1, 1.5, 2),
    (0.5, 0.67, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2),
    (0.9, 0.95, 1, 1.05, 1.1),
    (0.98, 0.99, 1, 1.01, 1.02),  # hosts within a few percent of each other
)


def _host_ratios(ax, r: pd.DataFrame, pos: np.ndarray, label: str, colour: str, per_cpu: bool) -> None:
    """One host's median ratios to the baseline host: filled where significant, open otherwise;
    with ``per_cpu``, the ratio per available CPU as an open diamond too."""
    sig = r["verdict"].isin(["faster", "slower"]).to_numpy()
    ax.errorbar(
        r["ratio"], pos, xerr=yerr(r, "ratio", "ratio_ci_low", "ratio_ci_high"), fmt="none", ecolor=colour, capsize=2
    )
    ax.scatter(
        r["ratio"][sig],
        pos[sig],
        color=colour,
        s=36,
        zorder=3,
        label=f"{label} (faster or slower)" if sig.any() else "_nolegend_",
    )
    ax.scatter(
        r["ratio"][~sig],
        pos[~sig],
        facecolors="white",
        edgecolors=colour,
        s=36,
        zorder=3,
        label=f"{label} (no clear difference)" if (~sig).any() else "_nolegend_",
    )
    if per_cpu:
        ax.scatter(
            r["ratio_per_cpu"], pos, marker="D", facecolors="none", edgecolors=colour, s=22, zorder=4,
            label=f"{label} per available CPU",
        )  # fmt: skip


def _ratios(ax, c: pd.DataFrame, hosts: list[str], points: list[str], colours: dict, meta: dict) -> None:
    y, width = np.arange(len(points)), 0.8 / max(1, len(hosts))
    baseline = meta["baseline"]
    cpus = {h["name"]: h["available_cpus"] for h in meta["hosts"]}
    for j, host in enumerate(hosts):
        sub = c[c["host"] == host].drop_duplicates("point").set_index("point").reindex(points)
        ok = (sub["status"] == "compared").to_numpy()
        if host != baseline and ok.any():
            pos = (y + (j - (len(hosts) - 1) / 2) * width)[ok]
            per_cpu = cpus.get(host) != cpus.get(baseline)  # else the diamond sits on the circle
            _host_ratios(ax, sub[ok], pos, f"{host} / {baseline}", colours[host], per_cpu)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    fits = [[t for t in ticks if lo <= t <= hi] for ticks in RATIO_TICKS]
    shown = next((f for f in fits if len(f) >= 3), max(fits, key=len)) or [1]
    ax.set_xticks(shown, [f"{t:g}x" for t in shown])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(f"median throughput over {baseline}'s (x, log scale)")
    ax.set_title(f"Host against {baseline}, point by point", fontsize=10)


def compare_chart(comparison: pd.DataFrame, experiment: str, meta: dict) -> Figure:
    """One experiment across hosts: left, each host's own speedup over its interleaved
    baseline per point (bars grouped by host, 95% CI); right, each host's median over the
    baseline host's per point (log scale, 95% bootstrap CI; filled: faster or slower, that is
    Mann-Whitney U p < 5% and a CI that excludes 1; open diamond, where the two hosts' CPU
    counts differ: the same ratio per available CPU). Parameters every point shares go into the
    title instead of every label. Points that could not be compared are listed under the chart
    with the reason."""
    c = comparison[comparison["experiment"] == experiment]
    hosts = [h["name"] for h in meta["hosts"]]
    cpus = {h["name"]: h["available_cpus"] for h in meta["hosts"]}
    # points with a measured speedup on some host, in key order (a point no host measured,
    # e.g. skipped everywhere, is only listed under the chart)
    measured = c[c["speedup"].notna()]
    points = sorted((p for p in dict.fromkeys(measured["point"]) if isinstance(p, str) and p), key=_point_order)
    colours = {h: PALETTE[i % len(PALETTE)] for i, h in enumerate(hosts)}
    height = 1.6 + 0.42 * max(1, len(points)) * max(1, len(hosts)) ** 0.5
    fig = plt.figure(figsize=(12, height + 0.9), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[height, 0.9])
    ax1, ax2 = top.subplots(1, 2, sharey=True)
    _own_speedups(ax1, c, hosts, points, colours, cpus)
    _ratios(ax2, c, hosts, points, colours, meta)
    handles, labels = [], []
    for ax in (ax1, ax2):
        h, lab = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    if handles:
        bottom.legend(handles, labels, loc="upper center", ncol=min(3, len(handles)), fontsize=8, frameon=False)
    missing = c[c["status"] == "not comparable"]
    note = "; ".join(f"{r['host']}: {r['point'] or experiment}: {r['reason']}" for _, r in missing.head(4).iterrows())
    if len(missing) > 4:
        note += f"; and {len(missing) - 4} more (see the table)"
    shared = short_labels(points)[1] if points else ""
    top.suptitle(f"{experiment}: {', '.join(hosts)}" + (f" (every point: {shared})" if shared else ""), fontsize=11)
    text = ("Not comparable: " + note) if note else "Every point was compared."
    bottom.text(0.01, 0.04, text, fontsize=7, color="#555555", wrap=True, va="bottom")
    return fig
