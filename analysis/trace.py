"""Export timelines as Chrome trace event JSON, for Perfetto (ui.perfetto.dev) and chrome://tracing.

Format: the Trace Event Format's JSON object form (``{"traceEvents": [...],
"displayTimeUnit": "ms", "otherData": {...}}``), as specified in Google's "Trace Event Format"
document (docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU). Timestamps
``ts`` and durations ``dur`` are in microseconds. Events used:

* ``"ph": "X"`` complete events, one per work span or job phase (``name`` = span kind or phase,
  ``cat`` = experiment, ``args`` = the span's extra columns, e.g. ``cpu_s``);
* ``"ph": "C"`` counter events, one per CPU sample time (``args`` = busy % per series);
* ``"ph": "M"`` metadata events naming processes (``process_name``) and threads (``thread_name``).

In an experiment trace every configuration point is one trace process (``pid``, named by its
``key=value`` pairs) and every actor (thread, process, worker) one trace thread (``tid``), so a
viewer lays points out one under another. Times are from the start of the point's window.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.timelines import actors, natural
from lab import registry
from lab.declare import point_label

US = 1e6
#: Span columns that are not passed on as ``args``.
_SPAN_BASE = {"repeat", "role", "actor", "kind", "start_s", "end_s"}


def _args(row: dict, skip: set[str]) -> dict:
    out = {}
    for k, v in row.items():
        if k in skip or v is None or (isinstance(v, float) and not math.isfinite(v)):
            continue
        out[k] = v.item() if hasattr(v, "item") else v
    return out


def _meta(name: str, pid: int, tid: int, value: str) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": value}}


def _span_events(pid: int, sp: pd.DataFrame, experiment: str, skip: set[str]) -> list[dict]:
    """Thread names and one complete event per span of one point."""
    events = []
    for tid, actor in enumerate(actors(sp) if len(sp) else [], start=1):
        events.append(_meta("thread_name", pid, tid, actor))
        for row in sp[sp["actor"] == actor].to_dict("records"):
            if row["end_s"] < 0:  # wholly before the window (a batch prefetched earlier)
                continue
            start = max(0.0, row["start_s"])  # a trace starts at the window; a span may have begun before
            args = _args(row, skip) | ({"started_before_window_s": -row["start_s"]} if row["start_s"] < 0 else {})
            events.append(
                {
                    "name": row["kind"],
                    "cat": experiment,
                    "ph": "X",
                    "pid": pid,
                    "tid": tid,
                    "ts": round(start * US, 3),
                    "dur": round(max(0.0, row["end_s"] - start) * US, 3),
                    "args": args,
                }
            )
    return events


def _counter_events(pid: int, sa: pd.DataFrame) -> list[dict]:
    """Counters "CPU busy %" (tree, system) and "per-core busy %" at every sample time of one point."""
    if not len(sa):
        return []
    events = []
    wide = sa.pivot_table(index="t_s", columns="series", values="busy_pct")
    cores = sorted((c for c in wide.columns if str(c).startswith("cpu")), key=natural)
    for t, r in wide.iterrows():
        ts = round(max(0.0, t) * US, 3)
        main = {s: float(r[s]) for s in ("tree", "system") if s in r and math.isfinite(r[s])}
        if main:
            events.append({"name": "CPU busy %", "ph": "C", "pid": pid, "tid": 0, "ts": ts, "args": main})
        per_core = {c: float(r[c]) for c in cores if math.isfinite(r[c])}
        if per_core:
            events.append({"name": "per-core busy %", "ph": "C", "pid": pid, "tid": 0, "ts": ts, "args": per_core})
    return events


def _of_point(df: pd.DataFrame, point: dict) -> pd.DataFrame:
    for k, v in point.items():
        df = df[df[k] == v] if len(df) else df
    return df


def experiment_trace(experiment: str, spans: pd.DataFrame, samples: pd.DataFrame, repeat: int = 0) -> dict:
    """Every point's window ``repeat`` as one trace: its own role's, or each role its timeline
    declares (the workload: current settings and recommendation).

    Args:
        experiment: a registered experiment (its declared keys name the points).
        spans: the experiment's combined ``spans.csv``.
        samples: the experiment's combined ``samples.csv``; ``tree``, ``system`` and per-core
            ``cpu<i>`` series become counters "CPU busy %" and "per-core busy %".
        repeat: which round to export.

    Returns:
        The trace as a JSON-ready dict.
    """
    spec = registry.get(experiment).spec
    keys = list(spec.keys)
    roles = spec.timeline.roles if spec.timeline else {"point": ""}
    spans, samples = (d if "role" in d or d.empty else d.assign(role="point") for d in (spans, samples))
    if "repeat" not in samples:  # header-only file: no point wrote samples
        samples = samples.iloc[0:0]
    sp_all = spans[(spans["repeat"] == repeat) & spans["role"].isin(list(roles))] if len(spans) else spans
    sa_all = samples[(samples["repeat"] == repeat) & samples["role"].isin(list(roles))] if len(samples) else samples
    points = sp_all[keys].drop_duplicates() if len(sp_all) else pd.DataFrame(columns=keys)
    if len(sa_all):
        points = pd.concat([points, sa_all[keys].drop_duplicates()]).drop_duplicates()
    events: list[dict] = []
    panels = [(p, role, label) for p in points.sort_values(keys).to_dict("records") for role, label in roles.items()]
    for pid, (point, role, label) in enumerate(panels, start=1):
        name = f"{experiment} {point_label(point)}" + (f" ({label})" if label else "")
        events.append(_meta("process_name", pid, 0, name))
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        mine = {"role": role, **point}
        events += _span_events(pid, _of_point(sp_all, mine), experiment, _SPAN_BASE | set(keys))
        events += _counter_events(pid, _of_point(sa_all, mine))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"experiment": experiment, "repeat": repeat, "roles": list(roles), "time_origin": "window start"},
    }


def jobs_trace(jobs: pd.DataFrame, host: str) -> dict:
    """The run's measurement jobs (:func:`analysis.runinfo.job_intervals`) as one trace: one
    trace thread per job, its phases as complete events, measured windows nested in ``run``.
    Times are from the first job's start."""
    events: list[dict] = [_meta("process_name", 1, 0, f"measurement jobs on {host}")]
    if len(jobs):
        t0 = jobs["start_unix"].min()
        order = jobs.groupby("job")["start_unix"].min().sort_values().index.tolist()
        for tid, job in enumerate(order, start=1):
            events.append(_meta("thread_name", 1, tid, job))
            events.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
            for r in jobs[jobs["job"] == job].to_dict("records"):
                events.append(
                    {
                        "name": r["phase"],
                        "cat": r["experiment"],
                        "ph": "X",
                        "pid": 1,
                        "tid": tid,
                        "ts": round((r["start_unix"] - t0) * US, 3),
                        "dur": round((r["end_unix"] - r["start_unix"]) * US, 3),
                    }
                )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"host": host, "time_origin": "first job start"},
    }


#: Required fields per event phase (Trace Event Format), checked by :func:`validate_trace`.
REQUIRED = {"X": ("name", "pid", "tid", "ts", "dur"), "C": ("name", "pid", "ts", "args"), "M": ("name", "pid", "args")}


def validate_trace(trace: dict) -> int:
    """Check a trace against the Trace Event Format rules this exporter relies on.

    Returns:
        The number of events.

    Raises:
        ValueError: naming the first offending event index and what is wrong: not an object
        with a ``traceEvents`` list, an unknown ``ph``, a missing field, a non-integer
        ``pid``/``tid``, a negative or non-finite ``ts``/``dur``, a non-numeric counter value,
        metadata without ``args.name``/``args.sort_index``.
    """
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("a trace must be a JSON object with a 'traceEvents' list")
    for i, e in enumerate(trace["traceEvents"]):
        ph = e.get("ph")
        if ph not in REQUIRED:
            raise ValueError(f"event {i}: ph {ph!r} is not one of {sorted(REQUIRED)}")
        missing = [f for f in REQUIRED[ph] if f not in e]
        if missing:
            raise ValueError(f"event {i} ({ph}): missing {missing}")
        for f in ("pid", "tid"):
            if f in e and (not isinstance(e[f], int) or isinstance(e[f], bool)):
                raise ValueError(f"event {i}: {f} must be an integer, got {e[f]!r}")
        for f in ("ts", "dur"):
            if f in e and not (isinstance(e[f], (int, float)) and math.isfinite(e[f]) and e[f] >= 0):
                raise ValueError(f"event {i}: {f} must be a finite number >= 0 (microseconds), got {e[f]!r}")
        if ph == "C" and not all(isinstance(v, (int, float)) and math.isfinite(v) for v in e["args"].values()):
            raise ValueError(f"event {i}: counter values must be finite numbers, got {e['args']!r}")
        if ph == "M" and not ({"name", "sort_index"} & set(e["args"])):
            raise ValueError(f"event {i}: metadata needs args.name or args.sort_index")
    return len(trace["traceEvents"])
