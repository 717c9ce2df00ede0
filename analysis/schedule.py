"""The run's job schedule: every measurement job's phases and measured windows over time.

Input: ``jobs.csv`` (:func:`analysis.runinfo.job_intervals`: ``job``, ``experiment``, ``phase``,
``start_unix``, ``end_unix`` in Unix time s). Gaps between jobs are the pipeline's overhead
(Snakemake scheduling, process start-up).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis.plotting import plt

#: Colour per job phase in the schedule chart, and what the legend calls it.
PHASE_STYLE = {
    "startup": ("#BBBBBB", "start-up: interpreter, argument parsing"),
    "lock_wait": ("#F0E442", "waiting for the measurement lock"),
    "run": ("#56B4E9", "torch import, set-up, warm-up, measurement"),
    "window": ("#0072B2", "inside measured windows"),
    "write": ("#CC79A7", "writing CSV files"),
}


def _title(jobs: pd.DataFrame, n_jobs: int) -> str:
    """How long the measurement phase took, its share inside windows, the time between jobs."""
    spans = jobs[jobs["phase"] != "window"].groupby("job").agg(s=("start_unix", "min"), e=("end_unix", "max"))
    busy = (spans["e"] - spans["s"]).sum()
    phase_s = spans["e"].max() - spans["s"].min()
    win = jobs[jobs["phase"] == "window"]
    measured = (win["end_unix"] - win["start_unix"]).sum()
    return (
        f"{n_jobs} measurement jobs in {phase_s:.0f} s: {100 * measured / phase_s:.0f}% inside measured windows, "
        f"{phase_s - busy:.0f} s between jobs"
    )


def job_schedule(jobs: pd.DataFrame, host: dict) -> Figure:
    """The run's measurement jobs as a Gantt chart: one row per job, its phases coloured
    (start-up, lock wait, set-up plus measurement, writing) and its measured windows dark on
    top; gaps between rows are the pipeline's overhead between jobs (Snakemake scheduling).

    Args:
        jobs: :func:`analysis.runinfo.job_intervals` (``job``, ``phase``, ``start_unix``,
            ``end_unix``).
        host: host.json (its ``host`` label goes into the title).
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
    ax.set_yticks(range(len(order)), order, fontsize=6.5 if len(order) > 30 else 7.5)
    ax.set_ylim(-0.6, len(order) - 0.4)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("time since the first job started (s)")
    ax.set_title(_title(jobs, len(order)), fontsize=10, loc="left")
    handles = [Patch(color=c, label=lab) for c, lab in PHASE_STYLE.values()]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8)
    fig.suptitle(f"Job schedule of the run on {host.get('host', '?')}", fontsize=11)
    return fig
