"""Physics self-check: do the measured ratios agree with what theory predicts on this host?

Each check compares a measured quantity with the range theory allows and gives a verdict,
``pass`` or ``warn`` (with the reason), or ``n/a`` when the data for it was not measured. An
experiment contributes its own checks through the ``fidelity`` hook (one Context) in its package's
``analysis.py`` (for example the gil experiment: CPU-bound threads about 1x, sleeping threads
about N x, processes scaling with the CPUs); :func:`speedup_check` builds one from a summary.
The sampler's checks are the pipeline's own and live here:

* the sampler's reading of one busy-looping process: within 10 percentage points of the CPU
  time the kernel accounts to that process over the same window (``time.process_time``), which
  is 100 / available CPUs % where the host delivers a whole CPU. Comparing with the kernel's
  account, not the ideal, keeps a VM whose vCPU is shared (steal time) from failing the
  sampler for what the host did; the reason then says how much of a CPU the loop got;
* the sampler's own cost: under 1 ms of CPU per sample, which is 1% of one CPU at the default
  10 Hz (the goal) and scales with the configured rate (e.g. 4% at 40 Hz). The reason gives it
  beside what the machine charged in the same windows for the least a sampler does per sample
  (waking up and reading two /proc files, ``wake_read_ms`` of :mod:`lab.selfcheck`): on a VM
  most of the cost is waking an idle vCPU, which moves with the host.

Ratios are the speedups of :mod:`analysis.stats`: medians of per-round paired ratios of a
point and its baseline measured interleaved in the same job. The sampler's cost is its own
CPU time during the self-check's idle windows, where nothing else of ours runs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.capacity import causes, unread
from analysis.findings import pick

#: CPU time the sampler may spend per sample (ms): 1% of one CPU at 10 samples/s.
SAMPLE_BUDGET_MS = 1.0

#: The least of the sampler's budget (% of one CPU), whatever its rate: its reads at a window's
#: start and end do not scale with ``sample_hz``, and 0.1% of one CPU moves no figure the lab
#: resolves (its narrowest intervals are about 1% wide). At 0.1 Hz the budget by the rate alone
#: was 0.01%, and a cost of 0.02% read as "a noticeable share of a CPU".
COST_FLOOR_PCT = 0.1

COLUMNS = ["check", "expected", "measured", "ci_low", "ci_high", "verdict", "reason"]

#: Columns of the self-check's metrics that the checks read.
SELFCHECK_COLUMNS = ("load", "role", "sampler_tree_pct", "process_cpu_pct", "sampler_cpu_pct")

NO_CI = (np.nan, np.nan)


def check_row(check: str, expected: str, measured, ok: bool, reason_ok: str, reason_warn: str, ci=NO_CI) -> dict:
    """One row of fidelity.csv: ``n/a`` when ``measured`` is missing, else pass or warn."""
    if measured is None or not np.isfinite(measured):
        return dict(zip(COLUMNS, (check, expected, np.nan, np.nan, np.nan, "n/a", "not measured in this run")))
    verdict, reason = ("pass", reason_ok) if ok else ("warn", reason_warn)
    return dict(zip(COLUMNS, (check, expected, float(measured), ci[0], ci[1], verdict, reason)))


def speedup_check(
    summary: pd.DataFrame | None,
    where: dict,
    check: str,
    expected: str,
    holds: Callable[[float], bool],
    reason_ok: str,
    reason_warn: str | Callable[[pd.Series | None, float | None], str],
) -> dict:
    """A check of the speedup of the point ``where`` (``{key: value}``) in ``summary``.

    Args:
        holds: whether a measured speedup agrees with theory.
        reason_warn: the reason of a warning, or a function of the summary row and the speedup
            that explains it from what was measured (e.g. :func:`analysis.capacity.capacity_reason`).
    """
    r = pick(summary, **where)
    s = r["speedup"] if r is not None else None
    ci = (r["speedup_ci_low"], r["speedup_ci_high"]) if r is not None else NO_CI
    warn = reason_warn(r, s) if callable(reason_warn) else reason_warn
    ok = s is not None and np.isfinite(s) and holds(s)
    return check_row(check, expected, s, ok, reason_ok, warn, ci)


#: A point whose speedup exceeds the CPUs the probe read as delivered by more than this factor
#: got more than the reading says (the probe's one-CPU loop ran faster in that job than the
#: point's baseline did): its check names the gap instead of a share above 100% of the reading.
OVER_PROBE = 1.1


def delivered(r, n: int) -> float | None:
    """CPUs the machine delivered to a point's ``n`` busy CPUs while it was measured (the
    capacity probe's ``cpus_delivered``, capped at ``n``), or None where no probe ran."""
    got = r.get("cpus_delivered") if r is not None else None
    if got is None or not np.isfinite(got):
        return None
    return float(min(got, n))


def scaling_check(
    summary: pd.DataFrame | None,
    where: dict,
    check: str,
    n: int,
    share: float,
    why: str,
    reason_warn: Callable[[pd.Series | None, float | None], str],
) -> dict:
    """A check that a point running ``n`` CPUs' worth of work at once reaches at least ``share``
    of what the machine delivered to ``n`` busy CPUs in the same rounds (the capacity probe,
    :func:`delivered`), or of ``n`` where no probe ran: judged against the cores the machine
    gave, not the cores it has. ``reason_warn`` explains a shortfall
    (:func:`analysis.capacity.capacity_reason`)."""
    r = pick(summary, **where)
    got = delivered(r, n)
    need = share * (got if got is not None else n)
    expected = f">= {need:.2f}x" + (f" ({share:.0%} of the {got:.2f} CPUs delivered)" if got is not None else "")
    ok_reason = why
    sp = float(r["speedup"]) if r is not None and np.isfinite(r["speedup"]) else None
    if got is not None and sp is not None and sp > OVER_PROBE * got:
        # above what the probe read the machine delivered: no share of it to claim
        ok_reason += (
            f"; the point ran {sp:.2f}x, above the {got:.2f} of {n} CPUs the capacity probe read as delivered:"
            " the probe read less than this job's work got"
        )
    elif got is not None and got < 0.9 * n and sp is not None:
        ok_reason += (
            f"; the machine delivered {got:.2f} of {n} CPUs while it was measured (the capacity probe) and the point"
            f" reached {sp / got:.0%} of that"
        )
    row = speedup_check(summary, where, check, expected, lambda s: s >= need, ok_reason, reason_warn)
    if n <= 1 and row["verdict"] == "n/a":  # not a gap in the run: there was nothing to scale to
        row["reason"] = "1 available CPU: nothing to scale to"
    return row


def sampler_checks(selfcheck: pd.DataFrame | None, ncpu: int, sample_hz: float, host: dict | None = None) -> list[dict]:
    """The sampler against a busy loop, and its own cost (see the module docstring). Where the
    loop got less than 90% of a CPU, the reason names what was measured to take the rest (steal,
    other processes) or says that nothing inside the machine did; where the self-check's windows
    were too short for one sample at ``sample_hz``, that the check needs longer ones."""
    busy = selfcheck[(selfcheck["load"] == "busy") & (selfcheck["role"] == "point")] if selfcheck is not None else None
    has = busy is not None and len(busy) > 0
    m = float(np.median(busy["sampler_tree_pct"])) if has else None
    kernel = float(np.median(busy["process_cpu_pct"])) if has else float("nan")
    ideal = 100.0 / ncpu
    got = f"the loop got {kernel / ideal:.0%} of a CPU"
    cols = ("throttled_s", "interference_pct", "steal_pct")
    medians = {c: np.median(busy[c]) for c in cols if c in busy} if has else {}
    found, missing = (causes(medians, host), unread(medians, host)) if has else ([], [])
    if found:  # the self-check's own windows, which the run's medians under "What limited the CPUs" dilute
        why = "; ".join(found) + ", in this check's own windows"
    elif missing:
        why = f"nothing measured explains it; {', '.join(missing)} could not be read"
    else:
        why = "no steal time and no other process was measured inside the machine"
    short = f"; {got}: the host did not deliver a whole CPU ({why})"
    row = check_row(
        "sampler: one busy-looping process",
        f"{kernel:.1f}% +- 10 points (kernel CPU time; ideal {ideal:.1f}%)" if has else "no self-check in this run",
        m,
        m is not None and abs(m - kernel) <= 10,
        "the sampler agrees with the kernel's CPU time" + (short if kernel < 0.9 * ideal else f"; {got}"),
        "the sampler misreads a known load" + (short if kernel < 0.9 * ideal else ""),
    )
    if has and not np.isfinite(m):  # windows too short for one sample at this rate
        row["reason"] = (
            f"the sampler took no sample in the self-check's windows at {sample_hz:g} Hz:"
            " raise sample_hz or selfcheck.duration_s to check it"
        )
    return [row, _cost_row(selfcheck, sample_hz)]


def _cost_row(selfcheck: pd.DataFrame | None, sample_hz: float) -> dict:
    """The sampler's own cost: the median ``sampler_cpu_pct`` of the self-check's idle windows
    against :data:`SAMPLE_BUDGET_MS` per sample, and :data:`COST_FLOOR_PCT` at the least."""
    idle = selfcheck[selfcheck["load"] == "idle"] if selfcheck is not None else None
    cost = float(np.median(idle["sampler_cpu_pct"])) if idle is not None and len(idle) else None
    budget = max(sample_hz * SAMPLE_BUDGET_MS / 10, COST_FLOOR_PCT)
    floor = wake_floor_text(idle, cost, sample_hz)
    per = f"{SAMPLE_BUDGET_MS:g} ms per sample" + (
        f", and {COST_FLOOR_PCT:g}% at the least" if sample_hz * SAMPLE_BUDGET_MS / 10 < COST_FLOOR_PCT else ""
    )
    return check_row(
        f"sampler's own cost at {sample_hz:g} Hz",
        f"< {budget:g}% of one CPU ({per})",
        cost,
        cost is not None and cost < budget,
        "sampling does not perturb the measurements" + floor,
        "the sampler itself uses a noticeable share of a CPU" + floor,
    )


def wake_floor_text(idle: pd.DataFrame | None, cost_pct: float | None, sample_hz: float) -> str:
    """The sampler's cost per sample beside this machine's floor for it, as a clause (``""`` where
    the self-check did not measure the floor, ``wake_read_ms``: see :mod:`lab.selfcheck`).

    ``cost_pct`` is the sampler's CPU time, % of one CPU; per sample that is
    ``cost_pct / 100 / sample_hz`` s."""
    if idle is None or cost_pct is None or "wake_read_ms" not in idle or not idle["wake_read_ms"].notna().any():
        return ""
    floor_ms = float(np.median(idle["wake_read_ms"].dropna()))
    per_sample_ms = 10.0 * cost_pct / sample_hz
    times = f"{per_sample_ms / floor_ms:.1f} times" if floor_ms > 0 else "against"
    return (
        f": {per_sample_ms:.2f} ms per sample, {times} what waking {sample_hz:g} times a second to read two"
        f" /proc files cost this machine ({floor_ms:.2f} ms per wake-up, measured beside it)"
    )
