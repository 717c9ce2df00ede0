"""The run over time: every measurement job's phases and measured windows, and the capacity
the machine delivered job by job.

Inputs: ``jobs.csv`` (:func:`analysis.runinfo.job_intervals`: ``job``, ``experiment``, ``phase``,
``start_unix``, ``end_unix`` in Unix time s; gaps between jobs are the pipeline's overhead:
Snakemake scheduling, process start-up) and ``capacity.csv``
(:func:`analysis.runinfo.capacity_table`: per job, the capacity probe's medians).
"""

from __future__ import annotations

import textwrap

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis.capacity import cpus_text
from analysis.plotting import PALETTE, plt
from analysis.runinfo import capacity_drift

#: Colour per job phase in the schedule chart, and what the legend calls it.
PHASE_STYLE = {
    "startup": ("#BBBBBB", "start-up: interpreter, argument parsing"),
    "lock_wait": ("#F0E442", "waiting for the measurement lock"),
    "run": ("#56B4E9", "torch import, set-up, warm-up, measurement"),
    "window": ("#0072B2", "inside measured windows"),
    "write": ("#CC79A7", "writing CSV files"),
}


def _title(jobs: pd.DataFrame, n_jobs: int, collected_unix: float | None = None) -> str:
    """How long the measurement phase took, its share inside windows, the time between jobs.
    The phase starts where :func:`analysis.runinfo.run_timing` starts it, at the host facts'
    collection where that came first (``collected_unix``), so the title and the report's text
    give the same seconds."""
    spans = jobs[jobs["phase"] != "window"].groupby("job").agg(s=("start_unix", "min"), e=("end_unix", "max"))
    busy = (spans["e"] - spans["s"]).sum()
    start = min(spans["s"].min(), collected_unix) if collected_unix is not None else spans["s"].min()
    phase_s = spans["e"].max() - start
    win = jobs[jobs["phase"] == "window"]
    measured = (win["end_unix"] - win["start_unix"]).sum()
    return (
        f"{n_jobs} measurement jobs in {phase_s:.0f} s: {100 * measured / phase_s:.0f}% inside measured windows, "
        f"{phase_s - busy:.0f} s between jobs"
    )


def job_schedule(jobs: pd.DataFrame, host: dict, run: dict | None = None) -> Figure:
    """The run's measurement jobs as a Gantt chart: one row per job, its phases coloured
    (start-up, lock wait, set-up plus measurement, writing) and its measured windows dark on
    top; gaps between rows are the pipeline's overhead between jobs (Snakemake scheduling).

    Args:
        jobs: :func:`analysis.runinfo.job_intervals` (``job``, ``phase``, ``start_unix``,
            ``end_unix``).
        host: host.json (its ``host`` label goes into the title).
        run: run.json: a vertical line marks each VM restore or clone in its ``vm_events``.
    """
    if jobs.empty:
        fig, ax = plt.subplots(figsize=(8, 2))
        ax.text(0.5, 0.5, "no job was recorded", ha="center", va="center")
        return fig
    t0 = jobs["start_unix"].min()
    order = jobs.groupby("job")["start_unix"].min().sort_values().index.tolist()
    fig, ax = plt.subplots(figsize=(10, 2.2 + 0.2 * len(order)), layout="constrained")
    for phase, (colour, _) in PHASE_STYLE.items():
        for job, js in jobs[jobs["phase"] == phase].groupby("job"):
            i, h = order.index(job), 0.45 if phase == "window" else 0.8
            bars = list(zip(js["start_unix"] - t0, js["end_unix"] - js["start_unix"]))
            ax.broken_barh(bars, (i - h / 2, h), facecolors=colour, linewidth=0)
    measured = set(jobs.loc[jobs["phase"] == "window", "job"])  # a job with none skipped its point or failed
    labels = [job if job in measured else f"{job} (no window: skipped or failed)" for job in order]
    ax.set_yticks(range(len(order)), labels, fontsize=6.5 if len(order) > 30 else 7.5)
    ax.set_ylim(-0.6, len(order) - 0.4)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    _vm_lines([ax], run, t0, 1.0)
    ax.set_xlabel("time since the first job started (s)")
    ax.set_title(_title(jobs, len(order), host.get("collected_unix")), fontsize=10, loc="left")
    handles = [Patch(color=c, label=lab) for c, lab in PHASE_STYLE.values()]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8)
    fig.suptitle(f"Job schedule of the run on {host.get('host', '?')}", fontsize=11)
    return fig


def _vm_lines(axes: list, run: dict | None, t0: float, unit_s: float) -> None:
    """A dashed vertical line on each of ``axes`` at every VM restore or clone in run.json
    ``vm_events``, at ``(unix - t0) / unit_s``, named on the first axis."""
    for e in ((run or {}).get("vm_events") or {}).get("events") or []:
        x = (e["unix"] - t0) / unit_s
        for ax in axes:
            ax.axvline(x, color="#D55E00", lw=1.2, ls="--")
        name = e["event"].split(" (")[0]
        axes[0].annotate(
            f" {name}",
            (x, 0.97),
            xycoords=("data", "axes fraction"),
            color="#D55E00",
            fontsize=8,
            va="top",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )


def _middle_half(drift: dict) -> str:
    """``, the middle half of them at 39.4-40.1 M/s`` from ``single_q1`` and ``single_q3``; ""
    for run.json files from before them."""
    if "single_q1" not in drift:
        return ""
    return f", the middle half of them at {drift['single_q1'] / 1e6:.1f}-{drift['single_q3'] / 1e6:.1f} M/s"


def capacity_text(drift: dict) -> str:
    """``single-CPU speed varied 31.2-36.5 M loop iterations/s (the fastest job 17% above the
    slowest) over the 40 jobs that ran the probe; 2 CPUs delivered 0.85-1.95 cores (median
    1.80)``, from run.json ``capacity``; "" without it."""
    if not drift:
        return ""
    m = 1e6
    return (
        f"single-CPU speed varied {drift['single_min'] / m:.1f}-{drift['single_max'] / m:.1f} M loop iterations/s"
        f" (the fastest job {drift['single_drift_pct']:.0f}% above the slowest) over the {drift['jobs']} jobs that"
        f" ran the probe{_middle_half(drift)};"
        f" {cpus_text(drift['cpus'])} delivered"
        f" {drift['delivered_min']:.2f}-{drift['delivered_max']:.2f} cores (median {drift['delivered_median']:.2f})"
    )


def run_capacity(capacity: pd.DataFrame, host: dict, run: dict | None = None) -> Figure:
    """The capacity the machine delivered over the run, one point per measurement job (the
    median over its rounds of the capacity probe, :mod:`lab.probe`): above, the speed
    of one CPU (loop iterations per second); below, the CPUs it delivered with all of them busy,
    against the available CPUs (dotted). Colour: the job's experiment. A vertical line marks
    each VM restore or clone the kernel logged (run.json ``vm_events``).

    Args:
        capacity: :func:`analysis.runinfo.capacity_table`.
        host: host.json (its label goes into the title).
        run: run.json, for its ``vm_events``; None draws none.
    """
    if capacity.empty:
        fig, ax = plt.subplots(figsize=(8, 2))
        ax.text(0.5, 0.5, "no job ran the capacity probe (config rounds.probe_ms: 0)", ha="center", va="center")
        ax.set_axis_off()
        return fig
    t = (capacity["start_unix"] - capacity["start_unix"].min()) / 60
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.2), sharex=True, layout="constrained")
    colours = {e: PALETTE[i % len(PALETTE)] for i, e in enumerate(dict.fromkeys(capacity["experiment"]))}
    for exp, colour in colours.items():
        sel = capacity["experiment"] == exp
        top.plot(t[sel], capacity.loc[sel, "capacity_1cpu_per_s"] / 1e6, "o", color=colour, ms=5, label=exp)
        bottom.plot(t[sel], capacity.loc[sel, "delivered_cpus"], "o", color=colour, ms=5)
    single = capacity["capacity_1cpu_per_s"] / 1e6
    top.axhline(single.median(), color="#555555", lw=0.8, ls="--")
    top.set_ylabel("one CPU\n(M loop iterations/s)")
    top.set_ylim(0, single.max() * 1.15)
    cpus = int(capacity["available_cpus"].max())
    bottom.axhline(cpus, color="#555555", lw=0.8, ls=":")
    # beside the axes, right of the line, where no job's point can fall under it
    where = bottom.get_yaxis_transform()
    bottom.text(1.005, cpus, f"{cpus}\navailable", transform=where, va="center", fontsize=8, color="#555555")
    bottom.set_ylim(0, max(cpus, capacity["delivered_cpus"].max()) * 1.15)
    bottom.set_ylabel("CPUs delivered,\nall busy")
    bottom.set_xlabel("time since the first measured window (min)")
    _vm_lines([top, bottom], run, capacity["start_unix"].min(), 60.0)
    top.legend(loc="lower right", fontsize=7, ncol=min(4, len(colours)))
    top.set_title(textwrap.fill(capacity_text(capacity_drift(capacity, 0.0)), 150), fontsize=9, loc="left")
    fig.suptitle(f"Capacity the machine delivered, job by job, on {host.get('host', '?')}", fontsize=11)
    return fig
