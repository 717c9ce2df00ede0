"""Why a point got fewer CPUs than it asked for, stated only from what was measured.

The measurement records, per window, the CPU other processes used and the one that used the
most (``interference_pct``, ``top_other``), the steal time, the time the CPU quota throttled
the job and the CPUs' frequency; per job and per host, the affinity, the quota of the job's own
cgroup and which cgroup set it, and which available CPUs are SMT siblings
(:mod:`lab.capacity`, host.json ``capacity``). :func:`causes` turns the ones that were
measured and matter into sentences; :func:`capacity_reason` builds a theory check's warning
from them, "2 processes got 1.05 CPUs of 2: other processes used 0.98 CPU (pid 4242 ...)",
and falls back to a list of possibilities only where nothing measured explains the gap.

Thresholds: interference counts from 10% of one CPU (the ``contended`` flag,
:data:`lab.window.CONTENDED_PCT`), steal from 5% of the CPUs' time, throttling from
10 ms per window (one scheduler period of the default 100 ms quota period is 10x that).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.findings import WHOLE_CORES
from lab.window import CONTENDED_PCT

#: Steal time (% of the available CPUs' time) from which it is named as a cause.
STEAL_PCT = 5.0

#: Throttling per window (s) from which the quota is named as a cause.
THROTTLED_S = 0.01

#: What an answer measured while other processes took CPU advises (said once per answer).
IDLE_RERUN = "rerun on an idle machine before acting on it"


def pooled_contended(windows: pd.DataFrame) -> bool:
    """Whether other processes took more than :data:`lab.window.CONTENDED_PCT` % of one CPU over
    ``windows`` (metrics rows: ``interference_pct``, ``wall_s``) taken together: their
    interference weighted by wall time. One short window's figure is mostly the kernel's 10 ms
    CPU-time ticks (two CPUs and the job's tree, each read to a tick at both ends of a 0.1 s
    window, move it by tens of % of a CPU), so "any window flagged" flags most comparisons of
    several windows on an idle machine; pooled, that noise averages out and real contention,
    which lasts, stays. Rows without ``interference_pct`` fall back to their ``contended``
    flags (any). Raises nothing; False for no rows."""
    if windows.empty:
        return False
    if "interference_pct" not in windows or "wall_s" not in windows:
        return bool(windows["contended"].fillna(False).astype(bool).any()) if "contended" in windows else False
    other = pd.to_numeric(windows["interference_pct"], errors="coerce")
    wall = pd.to_numeric(windows["wall_s"], errors="coerce")
    ok = other.notna() & wall.notna() & (wall > 0)
    return bool(ok.any() and (other[ok] * wall[ok]).sum() / wall[ok].sum() > CONTENDED_PCT)


def _value(r, key: str) -> float:
    v = r.get(key) if r is not None else None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return v


def cpus_text(n: float | None) -> str:
    """``1 CPU``, ``0.98 CPU``, ``1.50 CPUs``, ``2 CPUs``; ``? CPUs`` when ``n`` is unknown (None)."""
    if n is None or not np.isfinite(n):
        return "? CPUs"
    if not float(n).is_integer():
        return f"{n:.2f} CPU" + ("s" if n > 1 else "")
    return f"{int(n)} CPU{'s' if n != 1 else ''}"


def other_process(r) -> str:
    """``pid 4242 `python train.py` (0.97 CPU)`` for a summary row's top other process, or ``""``."""
    pid = r.get("top_other_pid") if r is not None else None
    if pid is None or pd.isna(pid):
        return ""
    share = _value(r, "top_other_cpu_pct")
    used = f" ({share / 100:.2f} CPU)" if np.isfinite(share) else ""
    return f"pid {int(pid)} `{r.get('top_other') or '?'}`{used}"


def quota_text(host: dict) -> str:
    """``a CPU quota of 1 CPU set by cgroup /x`` from host.json, or ``""`` without a quota."""
    quota = (host or {}).get("cgroup_quota_cpus")
    if not quota:
        return ""
    where = (host or {}).get("cgroup_quota_cgroup")
    return f"a CPU quota of {cpus_text(quota)}" + (f" set by cgroup {where}" if where else "")


def smt_text(host: dict, units: float | None = None) -> str:
    """``the 2 available CPUs are SMT siblings of 1 core`` where some available CPUs share a
    core (host.json ``capacity.smt_groups``) and the point ran more tasks or threads at once
    (``units``) than there are cores, so some of them shared one; else ``""``."""
    groups = ((host or {}).get("capacity") or {}).get("smt_groups")
    if not groups or all(len(g) == 1 for g in groups) or units is None or units <= len(groups):
        return ""
    cpus = sum(len(g) for g in groups)
    return f"the {cpus} available CPUs are SMT siblings of {len(groups)} core{'s' if len(groups) != 1 else ''}"


def causes(r, host: dict | None = None, units: float | None = None) -> list[str]:
    """The measured limits of a point's CPUs while it ran, most specific first: throttling by
    the CPU quota (naming the cgroup), other processes (naming the busiest), steal time, and
    SMT siblings among the available CPUs where the point's ``units`` (tasks or threads at
    once) outnumber the cores. Empty when none was measured."""
    out = []
    throttled = _value(r, "throttled_s")
    if np.isfinite(throttled) and throttled >= THROTTLED_S:
        quota = quota_text(host or {})
        out.append(f"the CPU quota throttled it {throttled:.2f} s per window" + (f" ({quota})" if quota else ""))
    other = _value(r, "interference_pct")
    if np.isfinite(other) and other > CONTENDED_PCT:
        who = other_process(r)
        out.append(f"other processes used {other / 100:.2f} CPU" + (f", most of all {who}" if who else ""))
    steal = _value(r, "steal_pct")
    if np.isfinite(steal) and steal >= STEAL_PCT:
        out.append(f"the hypervisor took {steal:.0f}% of the CPUs' time for other guests (steal)")
    smt = smt_text(host or {}, units)
    if smt:
        out.append(smt)
    return out


def unread(r, host: dict | None = None) -> list[str]:
    """The counters a point's windows could not read (NaN): what a warning cannot rule out."""
    names = {"interference_pct": "other processes' CPU", "steal_pct": "steal time"}
    if (host or {}).get("cgroup_quota_cpus"):
        names["throttled_s"] = "quota throttling"
    return [what for col, what in names.items() if not np.isfinite(_value(r, col))]


def note(r, host: dict | None = None, units: float | None = None) -> str:
    """`` (while it was measured: other processes used 0.98 CPU, ...)`` for a finding about a
    point with measured limits (``units``: its tasks or threads at once), else ``""``."""
    found = causes(r, host, units)
    return f" (while it was measured: {'; '.join(found)})" if found else ""


def one_cpu_note(host: dict | None, units: float) -> str:
    """``; this host has 1 available CPU, so N tasks cannot run at once`` where a point's
    parallel units exceed a single available CPU (its missing speedup is put down to that),
    naming the quota or affinity that limits it; else ``""``."""
    ncpu = (host or {}).get("available_cpus")
    if ncpu != 1 or not units or units <= 1:
        return ""
    quota = quota_text(host or {})
    why = f" ({quota})" if quota else f" (affinity {((host or {}).get('affinity') or ['?'])})"
    return f"; this host has 1 available CPU{why}, so {units:g} tasks cannot run at once"


def cpus_used(r, ncpu: int) -> float:
    """CPUs a point's process tree kept busy: median ``cpu_util_pct`` x available CPUs / 100."""
    return _value(r, "cpu_util_pct") * ncpu / 100.0


def capacity_reason(r, s: float | None, n: int, generic: str, host: dict | None = None, what: str = "the work") -> str:
    """Why a scaling check warned: ``what`` got ``x`` CPUs of ``n``, because of the measured
    :func:`causes`; with none measured, what the point's own CPU use shows (busy CPUs that did
    not make it faster deliver part of a core each), and only then ``generic``.

    Args:
        r: the point's summary row (None when it was not measured).
        s: its speedup.
        n: the CPUs it could use at most (min of its parallel units and the available CPUs).
        generic: the possibilities, the last resort.
        host: host.json (quota, SMT siblings).
        what: the subject of the sentence, e.g. ``2 processes``.
    """
    if r is None or s is None or not np.isfinite(s):
        return generic
    ncpu = int((host or {}).get("available_cpus") or n)
    used = cpus_used(r, ncpu)
    head = f"{what} got {used:.2f} CPUs of {n}" if np.isfinite(used) else what
    found = causes(r, host, units=n)
    got = _value(r, "cpus_delivered")
    if np.isfinite(got) and n > 1:
        return _delivered_reason(r, s, n, min(got, n), what, used, found)
    if found:
        return f"{head}: " + "; ".join(found)
    util = _value(r, "cpu_util_pct")
    missing = unread(r, host)
    if np.isfinite(util) and used >= 0.7 * n and n > 1:
        ruled_out = "No other process, steal, quota throttling or SMT sibling was measured"
        if missing:
            ruled_out = f"Nothing measured explains it ({', '.join(missing)}: unreadable)"
        return (
            f"{head} ({util:.0f}% busy) yet ran only {s:.2f}x faster: each CPU delivered about "
            f"{100.0 * s / n:.0f}% of a core. {ruled_out}; possibilities: the host behind this machine giving "
            "less than whole cores (its SMT, throttling), memory bandwidth, or threads spinning while they wait"
        )
    return f"{head}: {generic}" if np.isfinite(used) else generic


#: Where the machine delivered at least this share of the cores a point could use, a shortfall
#: is not the host's: the probe saw whole cores.
DELIVERED_WHOLE = 0.9


def machine_took(r, host: dict | None, units: float) -> bool:
    """Whether something measured beside a point's own work took CPUs from it (``units``: the
    CPUs it could use): one of its :func:`causes` (other processes, steal, quota, SMT
    siblings), or the capacity probe of its rounds delivering fewer than
    :data:`DELIVERED_WHOLE` of ``units``."""
    got = _value(r, "cpus_delivered")
    return bool(causes(r, host, units)) or (np.isfinite(got) and got < DELIVERED_WHOLE * units)


def _delivered_reason(r, s: float, n: int, got: float, what: str, used: float, found: list[str]) -> str:
    """Why a point fell short, from the capacity probe of its own rounds: the machine delivered
    fewer cores (the host's doing, with what was measured inside the machine), or it delivered
    them and the work did not use them (the work's or the lab's own doing: the point's CPU
    use says which)."""
    share = s / got if got > 0 else float("nan")
    probe = f"the machine delivered {got:.2f} of {n} CPUs in the same rounds (the capacity probe)"
    if got < DELIVERED_WHOLE * n:
        text = f"{what} ran {s:.2f}x with {got:.2f} cores delivered: {share:.0%} of what the machine gave; {probe}"
        return text + (f", while {'; '.join(found)}" if found else ", with nothing measured inside it taking them")
    text = f"{probe}, yet {what} ran only {s:.2f}x: {share:.0%} of it, a shortfall the host's cores do not explain"
    inside = _inside_windows(r, s, n)
    if inside:
        return f"{probe}, yet {what} ran only {s:.2f}x; {inside}" + (
            f"; measured while it ran: {'; '.join(found)}" if found else ""
        )
    if found:
        return text + f"; measured while it ran: {'; '.join(found)}"
    if np.isfinite(used) and used < 0.8 * n:
        return text + f": its work kept only {used:.2f} CPUs busy (time outside the tasks: start-up, waiting)"
    if np.isfinite(used):
        return text + f": its work kept {used:.2f} CPUs busy but each did less than the probe's loop on a core"
    return text


def _inside_windows(r, s: float, n: int) -> str:
    """Where the work timed its own units inside the windows (``speedup_norm_source``
    ``in-window``, :mod:`analysis.wholecores`) and its slowest worker ran them more than 3%
    slower than its baseline did in the same rounds, that measurement in words; else "", and
    where the figure on whole cores would exceed the ``n`` CPUs the point could use (which no
    machine gives: the report's headline does not correct it either)."""
    norm = _value(r, "speedup_norm")
    timed = r.get("speedup_norm_source") == "in-window"
    if not (timed and np.isfinite(norm) and norm > 0):
        return ""
    if s / norm >= 1 - WHOLE_CORES or norm > (1 + WHOLE_CORES) * n:  # within 3%, or above its CPUs
        return ""
    if r.get("unit_clock") == "cpu":  # threads under the GIL, one at a time: their pace by CPU time, pooled
        return (
            f"its workers, which ran one at a time, ran their units at {s / norm:.2f} of its baseline's speed by their"
            f" CPU time; at the baseline's pace {norm:.2f}x"
        )
    return (
        f"its own units, timed inside the windows, ran at {s / norm:.2f} of its baseline's speed on its slowest worker"
        f" (time a unit): the machine delivered less inside the windows than the probe saw between them;"
        f" on whole cores {norm:.2f}x"
    )


def _median_of(df: pd.DataFrame, col: str) -> float:
    values = pd.to_numeric(df[col], errors="coerce").dropna() if col in df else pd.Series(dtype=float)
    return float(values.median()) if len(values) else np.nan


def capacity_columns(ok: pd.DataFrame, windows: pd.DataFrame) -> dict:
    """What limited a point's CPUs while it was measured, from every ok window of its job
    (``windows``: the point's and its interleaved baseline's, since both enter the speedup):
    ``contended`` (the median window's interference exceeded 10% of one CPU: a process that ran
    through the job, not a blip in one short window, which the sampler's 10 ms ticks make
    common), the medians of
    ``interference_pct`` and ``pipeline_cpu_pct`` (% of one CPU: other processes, and the
    Snakemake chain that started the job), ``steal_pct`` (% of the available CPUs' time),
    ``throttled_s`` (per window) and ``cpu_freq_mhz``; ``top_other`` (of the processes outside
    the job that topped a window, the one with the most CPU time over the job's windows: its
    command line), its
    ``top_other_pid`` and ``top_other_cpu_pct`` (median % of one CPU in the windows it topped);
    ``rounds_stopped`` (why the job's rounds ended: lab/rounds.py). ``ok`` gives the
    medians where the job's windows lack a column (files from older versions)."""
    w = windows[windows["status"] == "ok"] if "status" in windows and len(windows) else ok
    if not len(w):
        w = ok
    cols = ("interference_pct", "pipeline_cpu_pct", "steal_pct", "throttled_s", "cpu_freq_mhz")
    row = {c: _median_of(w, c) for c in cols}
    row |= {
        "contended": bool(row["interference_pct"] > CONTENDED_PCT),
        "top_other": "",
        "top_other_pid": pd.NA,
        "top_other_cpu_pct": np.nan,
    }
    if "top_other_pid" in w:
        named = w[w["top_other_pid"].notna()]
        if len(named):
            # the process that took the most CPU time over the job's windows
            share = pd.to_numeric(named["top_other_cpu_pct"], errors="coerce") * pd.to_numeric(named["wall_s"])
            pid = share.groupby(named["top_other_pid"]).sum().idxmax()
            mine = named[named["top_other_pid"] == pid]
            row |= {"top_other_pid": int(pid), "top_other": str(mine["top_other"].iloc[0])}
            row["top_other_cpu_pct"] = _median_of(mine, "top_other_cpu_pct")
    row["other_node"] = (
        bool(windows["other_node"].fillna(False).astype(bool).any()) if "other_node" in windows else False
    )
    stopped = w["rounds_stopped"].fillna("").astype(str) if "rounds_stopped" in w else pd.Series(dtype=str)
    row["rounds_stopped"] = next((x for x in stopped if x), "")
    return row
