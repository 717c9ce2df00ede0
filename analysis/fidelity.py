"""Physics self-check: do the measured ratios agree with what theory predicts on this host?

Each check compares a measured quantity with the range theory allows and gives a verdict,
``pass`` or ``warn`` (with the reason), or ``n/a`` when the data for it was not measured:

* CPU-bound Python, 2 threads over sequential: 0.7x to 1.15x (the GIL serialises bytecode);
* I/O-bound sleep loop, N threads over sequential: at least 0.9 N (sleep releases the GIL);
* CPU-bound Python, N processes over sequential: at least 0.7 min(N, available CPUs);
* 1024^2 matmul GFLOP/s with threads = available CPUs over 1 thread: at least 0.75 x
  available CPUs (dense matmul is compute-bound and splits evenly);
* the sampler's reading of one busy-looping process: within 10 percentage points of the CPU
  time the kernel accounts to that process over the same window (``time.process_time``), which
  is 100 / available CPUs % where the host delivers a whole CPU. Comparing with the kernel's
  account, not the ideal, keeps a VM whose vCPU is shared (steal time) from failing the
  sampler for what the host did; the reason then says how much of a CPU the loop got;
* the sampler's own cost: under 1 ms of CPU per sample, which is 1% of one CPU at the default
  10 Hz (the goal) and scales with the configured rate (e.g. 4% at 40 Hz).

Ratios are the speedups of :mod:`analysis.stats`: medians of per-round paired ratios of a
point and its baseline measured interleaved in the same job. The sampler's cost is its own
CPU time during the self-check's idle windows, where nothing else of ours runs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: CPU time the sampler may spend per sample (ms): 1% of one CPU at 10 samples/s.
SAMPLE_BUDGET_MS = 1.0

COLUMNS = ["check", "expected", "measured", "ci_low", "ci_high", "verdict", "reason"]


def _row(check, expected, measured, ok, reason_ok, reason_warn, ci=(np.nan, np.nan)) -> dict:
    if measured is None or not np.isfinite(measured):
        return {
            "check": check,
            "expected": expected,
            "measured": np.nan,
            "ci_low": np.nan,
            "ci_high": np.nan,
            "verdict": "n/a",
            "reason": "not measured in this run",
        }
    return {
        "check": check,
        "expected": expected,
        "measured": float(measured),
        "ci_low": ci[0],
        "ci_high": ci[1],
        "verdict": "pass" if ok else "warn",
        "reason": reason_ok if ok else reason_warn,
    }


def _capacity_reason(r, s: float | None, n: int, generic: str) -> str:
    """Why a scaling check warned, from the point's own CPU utilisation: if the CPUs were busy
    but the work did not go faster, each CPU delivered only part of a core."""
    util = r.get("cpu_util_pct") if r is not None else None
    if s is not None and util is not None and np.isfinite(util) and util >= 70 and n > 1:
        per_cpu = 100.0 * s / n
        return (
            f"the CPUs were {util:.0f}% busy yet the work ran only {s:.2f}x faster: each of the {n} CPUs "
            f"delivered about {per_cpu:.0f}% of a full core (SMT siblings, host throttling or steal)"
        )
    return generic


def _speedup(summary: pd.DataFrame | None, **where):
    if summary is None:
        return None
    m = pd.Series(True, index=summary.index)
    for k, v in where.items():
        m &= summary[k].astype(str) == str(v)
    hit = summary[m]
    return hit.iloc[0] if len(hit) else None


def checks(
    gil: pd.DataFrame | None, intraop: pd.DataFrame | None, selfcheck: pd.DataFrame | None, ncpu: int, sample_hz: float
) -> pd.DataFrame:
    """Run every check.

    Args:
        gil, intraop: summary tables (``analysis.stats.summarise``) or None if not run.
        selfcheck: the self-check's metrics rows (``experiments.selfcheck``) or None.
        ncpu: available CPUs of the host.
        sample_hz: the sampler's rate (samples/s).

    Returns:
        One row per check with columns :data:`COLUMNS`.
    """
    rows = []
    ci = lambda r: (r["speedup_ci_low"], r["speedup_ci_high"])  # noqa: E731
    r = _speedup(gil, workload="cpu", mode="threads", workers=2)
    s = r["speedup"] if r is not None else None
    rows.append(
        _row(
            "CPU-bound Python: 2 threads over sequential",
            "0.70x to 1.15x",
            s,
            s is not None and 0.7 <= s <= 1.15,
            "the GIL lets one thread run bytecode at a time",
            "outside the range the GIL allows: measurement noise or a GIL-free build?",
            ci(r) if r is not None else (np.nan, np.nan),
        )
    )
    workers = sorted(gil["workers"].unique()) if gil is not None else [2]
    for n in workers:
        r = _speedup(gil, workload="io", mode="threads", workers=n)
        s = r["speedup"] if r is not None else None
        rows.append(
            _row(
                f"I/O-bound sleep loop: {n} threads over sequential",
                f">= {0.9 * n:.2f}x",
                s,
                s is not None and s >= 0.9 * n,
                "sleeping threads release the GIL and overlap",
                "sleeping threads did not overlap as expected",
                ci(r) if r is not None else (np.nan,) * 2,
            )
        )
    for n in workers:
        r = _speedup(gil, workload="cpu", mode="processes", workers=n)
        s = r["speedup"] if r is not None else None
        need = 0.7 * min(n, ncpu)
        rows.append(
            _row(
                f"CPU-bound Python: {n} processes over sequential",
                f">= {need:.2f}x",
                s,
                s is not None and s >= need,
                "each process has its own interpreter and GIL",
                _capacity_reason(
                    r, s, min(n, ncpu), "processes did not use the available CPUs: contention, or fewer real cores"
                ),
                ci(r) if r is not None else (np.nan,) * 2,
            )
        )
    r = _speedup(intraop, workload="matmul", threads=ncpu) if ncpu > 1 else None
    s = r["speedup"] if r is not None else None
    rows.append(
        _row(
            f"matmul GFLOP/s: {ncpu} thread{'s' if ncpu != 1 else ''} over 1",
            f">= {0.75 * ncpu:.2f}x",
            s,
            s is not None and s >= 0.75 * ncpu,
            "dense matmul splits evenly over cores",
            _capacity_reason(
                r, s, ncpu, "matmul did not scale with cores: SMT siblings, memory bandwidth, or a CPU quota"
            ),
            ci(r) if r is not None else (np.nan,) * 2,
        )
    )
    busy = selfcheck[(selfcheck["load"] == "busy") & (selfcheck["role"] == "point")] if selfcheck is not None else None
    has = busy is not None and len(busy) > 0
    m = float(np.median(busy["sampler_tree_pct"])) if has else None
    kernel = float(np.median(busy["process_cpu_pct"])) if has else float("nan")
    ideal = 100.0 / ncpu
    got = f"the loop got {kernel / ideal:.0%} of a CPU"
    short = f"; {got}: the host did not deliver a whole CPU (steal time or other load)"
    rows.append(
        _row(
            "sampler: one busy-looping process",
            f"{kernel:.1f}% +- 10 points (kernel CPU time; ideal {ideal:.1f}%)",
            m,
            m is not None and abs(m - kernel) <= 10,
            "the sampler agrees with the kernel's CPU time" + (short if kernel < 0.9 * ideal else f"; {got}"),
            "the sampler misreads a known load" + (short if kernel < 0.9 * ideal else ""),
        )
    )
    idle = selfcheck[selfcheck["load"] == "idle"] if selfcheck is not None else None
    cost = float(np.median(idle["sampler_cpu_pct"])) if idle is not None and len(idle) else None
    rows.append(
        _row(
            f"sampler's own cost at {sample_hz:g} Hz",
            f"< {sample_hz * SAMPLE_BUDGET_MS / 10:g}% of one CPU ({SAMPLE_BUDGET_MS:g} ms per sample)",
            cost,
            cost is not None and cost < sample_hz * SAMPLE_BUDGET_MS / 10,
            "sampling does not perturb the measurements",
            "the sampler itself uses a noticeable share of a CPU",
        )
    )
    return pd.DataFrame(rows, columns=COLUMNS)
