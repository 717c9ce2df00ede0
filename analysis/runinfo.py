"""How long the run took, what share of it was spent inside measured windows, and when.

Input: every measurement job's ``job.json`` (start and end, Unix time) and every metrics row
(``wall_s`` of each measured window). The rest of the measurement phase is pipeline overhead:
process start-up, torch import, set-up and warm-up, scheduling. :func:`job_intervals` lays the
jobs out in time for the job-schedule Gantt chart and its trace.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.capacity import STEAL_PCT
from lab.sampler import OTHER_MIN_PCT
from lab.window import CONTENDED_PCT


def run_timing(jobs: list[dict], metrics: list[pd.DataFrame], host: dict) -> dict:
    """Summarise the measurement phase.

    Returns:
        ``start_unix`` (host fingerprint or first job start, s), ``end_unix`` (last job end),
        ``measurement_phase_s``, ``job_s`` (sum of job durations), ``measured_s`` (sum of
        measured windows), ``measured_share_pct`` (measured_s / measurement_phase_s, 0-100),
        ``probe_s`` (the capacity probe's wall time, once per round and worker process),
        ``upfront_s`` (timed up-front measurements outside the windows, column ``upfront_s``
        once per runner: an experiment's object creation and first call that it reports as
        results of their own), ``measuring_share_pct`` ((measured_s + probe_s + upfront_s) /
        measurement_phase_s: the time spent measuring, the probe's measuring the machine),
        ``measurement_jobs``, ``overhead_per_job_s`` ((job_s - measured_s - probe_s -
        upfront_s) / jobs: inside the jobs) and
        ``between_jobs_s`` ((measurement phase - job_s) / jobs: Snakemake and the processes that
        start a job).

    Raises:
        ValueError: if ``jobs`` is empty.
    """
    if not jobs:
        raise ValueError("no job.json given: nothing was measured")
    starts = [j["job_start_unix"] for j in jobs]
    start = min([*starts, host.get("collected_unix", min(starts))])
    end = max(j["job_end_unix"] for j in jobs)
    job_s = float(sum(j["job_end_unix"] - j["job_start_unix"] for j in jobs))
    measured = float(
        sum(np.nansum(pd.to_numeric(m.get("wall_s", pd.Series(dtype=float)), errors="coerce")) for m in metrics)
    )
    phase = end - start
    probe = float(sum(_seconds_once_per(m, "probe_s", "repeat") for m in metrics))
    upfront = float(sum(_seconds_once_per(m, "upfront_s", "role") for m in metrics))
    return {
        "start_unix": start,
        "end_unix": end,
        "measurement_phase_s": phase,
        "job_s": job_s,
        "measured_s": measured,
        "measured_share_pct": 100.0 * measured / phase if phase > 0 else float("nan"),
        "probe_s": probe,
        "upfront_s": upfront,
        "measuring_share_pct": 100.0 * (measured + probe + upfront) / phase if phase > 0 else float("nan"),
        "measurement_jobs": len(jobs),
        "overhead_per_job_s": (job_s - measured - probe - upfront) / len(jobs),
        "between_jobs_s": (phase - job_s) / len(jobs),
    }


def _seconds_once_per(m: pd.DataFrame, column: str, per: str) -> float:
    """The sum of ``column`` (s) in one job's metrics, counted once per ``per`` value and worker
    process, whose rows all carry it: the probe's ``probe_s`` once per round (``repeat``), an
    up-front measurement's ``upfront_s`` once per runner (``role``); 0 without the column."""
    if column not in m or per not in m:
        return 0.0
    keys = ["worker", per] if "worker" in m else [per]
    return float(pd.to_numeric(m.drop_duplicates(keys)[column], errors="coerce").fillna(0).sum())


#: Columns of ``interference.csv`` (:func:`interference_table`).
INTERFERENCE_COLUMNS = [
    "pid",
    "name",
    "cmdline",
    "cpu_s",
    "points",
    "windows",
    "cpu_pct_median",
    "cpu_pct_max",
    "labels",
]


def interference_table(labels: list[str], jobs: list[dict]) -> pd.DataFrame:
    """The processes outside the pipeline's jobs that used the most CPU while points were
    measured, from every job.json's ``others`` (per window, the top 3 of that window).

    Returns:
        One row per process (pid and name), most CPU seconds first: ``cpu_s`` (its CPU time in
        the windows it was among the top; from ``cpu_pct`` where older files lack ``cpu_s``),
        ``points`` (jobs in whose windows it was among the top), ``windows``,
        ``cpu_pct_median`` and ``cpu_pct_max`` (% of one CPU over a window, over the windows it
        was seen in), ``labels`` (the first three points, ``;``-separated); columns
        :data:`INTERFERENCE_COLUMNS`.
    """
    rows = [
        {**o, "job": label}
        for label, j in zip(labels, jobs)
        for o in (j.get("others") or [])
        if o.get("pid") is not None
    ]
    if not rows:
        return pd.DataFrame(columns=INTERFERENCE_COLUMNS)
    df = pd.DataFrame(rows)
    df["cpu_s"] = df["cpu_s"].fillna(df["cpu_pct"] / 100) if "cpu_s" in df else df["cpu_pct"] / 100
    out = (
        df.groupby(["pid", "name"], sort=False)
        .agg(
            cmdline=("cmdline", "first"),
            cpu_s=("cpu_s", "sum"),
            points=("job", "nunique"),
            windows=("cpu_pct", "size"),
            cpu_pct_median=("cpu_pct", "median"),
            cpu_pct_max=("cpu_pct", "max"),
            labels=("job", lambda x: "; ".join(list(dict.fromkeys(x))[:3])),
        )
        .reset_index()
    )
    return out.sort_values("cpu_s", ascending=False)[INTERFERENCE_COLUMNS]


def contention(metrics: list[pd.DataFrame], jobs: list[dict], host: dict) -> dict:
    """How much of the run was contended and what it did to the numbers (run.json).

    Returns:
        ``windows``, ``contended_windows``, ``contended_time_pct`` (share of measured time in
        contended windows), ``points``, ``contended_points`` (jobs whose median window was
        contended, as summary.csv's ``contended``),
        ``other_cpu_median`` (CPUs other processes used in the contended windows, median),
        ``cpus`` (the logical CPUs of the pipeline's affinity, which other processes share),
        ``quota_cpus`` (its cgroup's CPU quota, which they do not: None without one),
        ``cpus_left`` (what CPU-bound work could use then: ``cpus`` minus the others', at most the quota),
        ``pipeline_cpu_median`` (CPUs the chain that started the jobs used: Snakemake, its
        shell, the supervisor), ``steal_pct_median``, ``steal_pct_max`` and
        ``steal_windows`` (windows with at least :data:`analysis.capacity.STEAL_PCT` % steal) and
        ``throttled_s`` (sum) over every window, ``rounds`` (jobs per :data:`lab.rounds.STOPPED`
        reason) and :func:`_unnamed`'s ``unnamed_windows`` and ``unnamed_short_windows``.
    """
    frames = [m for m in metrics if len(m) and "wall_s" in m]
    w = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["wall_s"])
    w = w[w["status"] == "ok"] if "status" in w else w
    wall = pd.to_numeric(w["wall_s"], errors="coerce").fillna(0.0)
    contended = w["contended"].fillna(False).astype(bool) if "contended" in w else pd.Series(False, index=w.index)
    other = pd.to_numeric(w.get("interference_pct", pd.Series(dtype=float)), errors="coerce")
    affinity = host.get("affinity")
    cpus = len(affinity) if isinstance(affinity, list) and affinity else host.get("available_cpus") or 1
    quota = host.get("cgroup_quota_cpus")
    other_cpu = float(other[contended].median() / 100) if contended.any() else 0.0
    per_job = [
        bool(pd.to_numeric(m["interference_pct"], errors="coerce").median() > CONTENDED_PCT)
        if "interference_pct" in m
        else False
        for m in frames
    ]
    stopped = pd.Series([(j.get("rounds") or {}).get("stopped") for j in jobs], dtype=object).dropna()

    def median(col):
        v = pd.to_numeric(w[col], errors="coerce").dropna() if col in w else pd.Series(dtype=float)
        return float(v.median()) if len(v) else None

    throttled = pd.to_numeric(w["throttled_s"], errors="coerce").dropna() if "throttled_s" in w else None
    steal = pd.to_numeric(w["steal_pct"], errors="coerce").dropna() if "steal_pct" in w else pd.Series(dtype=float)
    return {
        "windows": int(len(w)),
        "contended_windows": int(contended.sum()),
        "contended_time_pct": float(100.0 * wall[contended].sum() / wall.sum()) if wall.sum() > 0 else 0.0,
        "points": len(frames),
        "contended_points": int(sum(per_job)),
        "other_cpu_median": other_cpu,
        "cpus": cpus,
        "quota_cpus": float(quota) if quota else None,
        # processes outside the pipeline's cgroup share its CPUs but not its quota
        "cpus_left": min(max(0.0, cpus - other_cpu), float(quota)) if quota else max(0.0, cpus - other_cpu),
        "pipeline_cpu_median": None if median("pipeline_cpu_pct") is None else median("pipeline_cpu_pct") / 100,
        "steal_pct_median": median("steal_pct"),
        "steal_pct_max": float(steal.max()) if len(steal) else None,
        "steal_windows": int((steal >= STEAL_PCT).sum()),
        "throttled_s": float(throttled.sum()) if throttled is not None and len(throttled) else None,
        "rounds": {str(k): int(v) for k, v in stopped.value_counts().items()},
        **_unnamed(w, contended, wall),
    }


#: A window shorter than this (s) reads its other processes' CPU through the kernel's 10 ms
#: ticks on every CPU and process it counts: tens of % of a CPU either way.
SHORT_WINDOW_S = 0.1


def _unnamed(w: pd.DataFrame, contended: pd.Series, wall: pd.Series) -> dict:
    """``unnamed_windows``: the contended windows that named no process outside the job at
    :data:`lab.sampler.OTHER_MIN_PCT` % of a CPU or more (``top_other_cpu_pct``), and
    ``unnamed_short_windows``: those under :data:`SHORT_WINDOW_S` long (measured on an idle
    2-vCPU VM: 41% of its windows under 0.1 s read contended naming no process, 2% of those of
    0.3-1 s, none over 1 s)."""
    if "top_other_cpu_pct" not in w:
        return {"unnamed_windows": 0, "unnamed_short_windows": 0}
    top = pd.to_numeric(w["top_other_cpu_pct"], errors="coerce")  # NaN: a job from before the column
    unnamed = contended & top.notna() & (top < OTHER_MIN_PCT)
    return {
        "unnamed_windows": int(unnamed.sum()),
        "unnamed_short_windows": int((unnamed & (wall < SHORT_WINDOW_S)).sum()),
    }


#: Figures of the whole run rather than of one experiment, drawn from ``jobs.csv`` and
#: ``capacity.csv`` (their drawing functions are in :mod:`analysis.schedule`, of the same name).
RUN_FIGURES = ("job_schedule", "run_capacity")

#: Columns of ``capacity.csv`` (:func:`capacity_table`).
CAPACITY_COLUMNS = [
    "job",
    "experiment",
    "start_unix",
    "rounds",
    "capacity_1cpu_per_s",
    "capacity_all_per_s",
    "delivered_cpus",
    "available_cpus",
    "probe_s",
]


def capacity_table(labels: list[str], jobs: list[dict], metrics: list[pd.DataFrame]) -> pd.DataFrame:
    """What the capacity probe (:mod:`lab.probe`) measured in each job, one row per job
    that ran it, in time order: the medians over its rounds of ``capacity_1cpu_per_s`` (loop
    iterations per second on one CPU), ``capacity_all_per_s`` (on all available CPUs at once)
    and ``delivered_cpus``, its ``rounds``, ``available_cpus``, its first window's
    ``start_unix`` and ``probe_s`` (the probe's own wall time over the job, s); columns
    :data:`CAPACITY_COLUMNS`."""
    rows = []
    for label, j, m in zip(labels, jobs, metrics):
        if "capacity_1cpu_per_s" not in m or "repeat" not in m:
            continue
        ok = m[m["status"] == "ok"] if "status" in m else m
        r = ok.assign(_w=ok["worker"] if "worker" in ok else 0).drop_duplicates(["_w", "repeat"])
        r = r[pd.to_numeric(r["capacity_1cpu_per_s"], errors="coerce").notna()]
        if not len(r):
            continue
        med = {c: float(pd.to_numeric(r[c], errors="coerce").median()) for c in CAPACITY_COLUMNS[4:7]}
        rows.append(
            {
                "job": label,
                "experiment": j.get("experiment", ""),
                "start_unix": float(pd.to_numeric(ok["window_start_unix"], errors="coerce").min()),
                "rounds": len(r),
                **med,
                "available_cpus": int(r["available_cpus"].iloc[0]) if "available_cpus" in r else 1,
                "probe_s": float(pd.to_numeric(r["probe_s"], errors="coerce").sum()),
            }
        )
    out = pd.DataFrame(rows, columns=CAPACITY_COLUMNS)
    return out.sort_values("start_unix", ignore_index=True) if len(out) else out


def capacity_drift(table: pd.DataFrame, phase_s: float) -> dict:
    """The run's capacity over its jobs (run.json ``capacity``), from :func:`capacity_table`:
    ``jobs`` (that ran the probe), ``single_min``, ``single_median``, ``single_max`` (the jobs'
    median single-CPU rates, loop iterations/s), ``single_q1`` and ``single_q3`` (their 25th and
    75th percentiles: where the middle half of the jobs ran, which one outlying job does not
    move) and ``single_drift_pct`` (``100 (max / min - 1)``:
    how much faster one CPU was in the fastest job than in the slowest), ``delivered_min``,
    ``delivered_median``, ``delivered_max`` (CPUs delivered with all busy), ``cpus`` (available),
    ``probe_s`` (the probe's wall time over the run) and ``probe_share_pct`` (of the measurement
    phase). Empty without a probe reading."""
    if not len(table):
        return {}
    single, delivered = table["capacity_1cpu_per_s"], table["delivered_cpus"]
    return {
        "jobs": len(table),
        "single_min": float(single.min()),
        "single_median": float(single.median()),
        "single_max": float(single.max()),
        "single_q1": float(single.quantile(0.25)),
        "single_q3": float(single.quantile(0.75)),
        "single_drift_pct": float(100 * (single.max() / single.min() - 1)) if single.min() > 0 else float("nan"),
        "delivered_min": float(delivered.min()),
        "delivered_median": float(delivered.median()),
        "delivered_max": float(delivered.max()),
        "cpus": int(table["available_cpus"].max()),
        "probe_s": float(table["probe_s"].sum()),
        "probe_share_pct": float(100 * table["probe_s"].sum() / phase_s) if phase_s > 0 else float("nan"),
    }


#: Two readings of one kernel log record from different jobs differ by their clocks' offsets
#: (ms): within this many seconds they are one event.
SAME_EVENT_S = 2.0


def vm_events(jobs: list[dict], capacity: pd.DataFrame, start: float, end: float) -> dict:
    """The VM restores or clones the kernel logged during the measurement phase ``[start, end]``
    (Unix s), from every job.json's ``capacity.vm_events`` (:func:`lab.capacity.vm_events`):
    run.json ``vm_events``, ``{"events": [...], "unreadable": why}``. Each event, oldest first:
    ``unix``, ``event`` (what it means), ``at_s`` (s after the phase began), ``single_before``
    and ``single_after`` (the median single-CPU rate, loop iterations/s, of the jobs in
    ``capacity`` (:func:`capacity_table`) that began before it and after it, up to the next
    event; None where none did). ``unreadable``: why no job read the log ("" where one did)."""
    seen: list[dict] = []
    for j in jobs:
        for e in (j.get("capacity") or {}).get("vm_events") or []:
            if start - SAME_EVENT_S <= e["unix"] <= end + SAME_EVENT_S and not any(
                abs(e["unix"] - s["unix"]) < SAME_EVENT_S and e["event"] == s["event"] for s in seen
            ):
                seen.append(dict(e))
    seen.sort(key=lambda e: e["unix"])
    edges = [start - SAME_EVENT_S, *(e["unix"] for e in seen), end + SAME_EVENT_S]
    single = pd.to_numeric(capacity.get("capacity_1cpu_per_s", pd.Series(dtype=float)), errors="coerce")
    began = pd.to_numeric(capacity.get("start_unix", pd.Series(dtype=float)), errors="coerce")

    def median_between(a: float, b: float) -> float | None:
        sel = single[(began >= a) & (began < b)].dropna()
        return float(sel.median()) if len(sel) else None

    for i, e in enumerate(seen):
        e["at_s"] = e["unix"] - start
        e["single_before"] = median_between(edges[i], edges[i + 1])
        e["single_after"] = median_between(edges[i + 1], edges[i + 2])
    caps = [j.get("capacity") or {} for j in jobs]
    reasons = [(c.get("unreadable") or {}).get("vm_events") for c in caps]
    if any("vm_events" in c and not r for c, r in zip(caps, reasons)):
        return {"events": seen, "unreadable": ""}
    why = next((r for r in reasons if r), "not recorded (its jobs predate the lab's reading of the kernel log)")
    return {"events": seen, "unreadable": why}


#: Columns of ``jobs.csv`` (:func:`job_intervals`).
JOB_COLUMNS = ["job", "experiment", "phase", "start_unix", "end_unix"]


def job_label(job_json_path: str) -> str:
    """``<experiment> key=value ...`` from ``results/<host>/<experiment>/<k>~<v>/.../job.json``."""
    parts = list(Path(job_json_path).parent.parts)
    keyed = [p.replace("~", "=") for p in parts if "~" in p]
    head = [p for p in parts if "~" not in p]
    return " ".join([head[-1], *keyed]) if head else " ".join(keyed)


def job_intervals(labels: list[str], jobs: list[dict], metrics: list[pd.DataFrame]) -> pd.DataFrame:
    """Each measurement job's phases and measured windows as time intervals (tidy, long format).

    Phases of one job, in order (Unix time s, from ``job.json``):
    ``startup`` (``job_start_unix`` to the lock request: argument parsing; torch is imported
    later, by the experiment),
    ``lock_wait`` (``lock_wait_s`` before ``lock_acquired_unix``), ``run`` (``lock_acquired_unix``
    to ``lock_released_unix``: torch import, set-up, warm-up and every window), ``write`` (to
    ``job_end_unix``); then one ``window`` row per metrics row with ``window_start_unix`` and
    ``window_end_unix`` (inside ``run``).

    Returns:
        DataFrame with :data:`JOB_COLUMNS`, one row per interval, ordered by job start.

    Raises:
        ValueError: if the three lists differ in length.
    """
    if not (len(labels) == len(jobs) == len(metrics)):
        raise ValueError(f"{len(labels)} labels, {len(jobs)} jobs and {len(metrics)} metrics tables: need one each")
    rows = []
    for label, j, m in sorted(zip(labels, jobs, metrics), key=lambda x: x[1]["job_start_unix"]):
        acquired = j.get("lock_acquired_unix", j["job_start_unix"])
        released = j.get("lock_released_unix", j["job_end_unix"])
        requested = acquired - float(j.get("lock_wait_s", 0.0) or 0.0)
        for phase, a, b in (
            ("startup", j["job_start_unix"], requested),
            ("lock_wait", requested, acquired),
            ("run", acquired, released),
            ("write", released, j["job_end_unix"]),
        ):
            if b > a:
                rows.append((label, j["experiment"], phase, a, b))
        if {"window_start_unix", "window_end_unix"} <= set(m.columns):
            w = m[["window_start_unix", "window_end_unix"]].apply(pd.to_numeric, errors="coerce").dropna()
            rows += [(label, j["experiment"], "window", a, b) for a, b in w.itertuples(index=False)]
    return pd.DataFrame(rows, columns=JOB_COLUMNS)
