"""How long the run took and what share of it was spent inside measured windows.

Input: every measurement job's ``job.json`` (start and end, Unix time) and every metrics row
(``wall_s`` of each measured window). The rest of the measurement phase is pipeline overhead:
process start-up, torch import, set-up and warm-up, scheduling.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def run_timing(jobs: list[dict], metrics: list[pd.DataFrame], host: dict) -> dict:
    """Summarise the measurement phase.

    Returns:
        ``start_unix`` (host fingerprint or first job start, s), ``end_unix`` (last job end),
        ``measurement_phase_s``, ``job_s`` (sum of job durations), ``measured_s`` (sum of
        measured windows), ``measured_share_pct`` (measured_s / measurement_phase_s, 0-100),
        ``measurement_jobs``, ``overhead_per_job_s`` ((job_s - measured_s) / jobs).

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
    return {
        "start_unix": start,
        "end_unix": end,
        "measurement_phase_s": phase,
        "job_s": job_s,
        "measured_s": measured,
        "measured_share_pct": 100.0 * measured / phase if phase > 0 else float("nan"),
        "measurement_jobs": len(jobs),
        "overhead_per_job_s": (job_s - measured) / len(jobs),
    }
