"""GIL experiment, theory checks (the report's "Can these numbers be trusted?"): what the GIL
and the available CPUs let each mode reach, per interpreter. Called by
:mod:`experiments.gil.analysis` from its ``fidelity`` hook."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.capacity import DELIVERED_WHOLE, capacity_reason, causes
from analysis.fidelity import scaling_check, speedup_check
from analysis.findings import lead_view, pick
from experiments.gil import shortfall


def with_interpreter(summary: pd.DataFrame | None) -> pd.DataFrame | None:
    """``summary`` with an ``interpreter`` column (``default`` where a table has none)."""
    if summary is None or "interpreter" in summary.columns:
        return summary
    return summary.assign(interpreter="default")


def gil_on(summary: pd.DataFrame, label: str) -> bool:
    """Whether the GIL was on in the measured processes of ``label`` (True where not recorded)."""
    if "gil_enabled" not in summary.columns:
        return True
    values = summary.loc[(summary["interpreter"] == label) & summary["gil_enabled"].notna(), "gil_enabled"]
    return bool(values.iloc[0]) if len(values) else True


#: Work that runs in parallel reaches at least this share of the CPUs the machine delivered to it.
SCALING_SHARE = 0.7

#: Why a scaling check warned when nothing measured explains it: the possibilities, last resort.
GENERIC = (
    "no quota throttling, steal, other process or SMT sibling was measured; the tasks left CPUs idle "
    "(time outside them, such as start-up, or waiting)"
)


def _scaling_checks(
    summary: pd.DataFrame | None, label: str, tag: str, workers: list, ncpu: int, host: dict
) -> list[dict]:
    rows = []
    for n in workers:
        cpus = min(n, ncpu)
        cases = [("cpu", "processes", "CPU-bound Python", "each process has its own interpreter and GIL")]
        cases.append(("release", "threads", "C code that releases the GIL (sha256)", "hashlib releases the GIL"))
        if summary is not None and not gil_on(summary, label):
            cases.append(("cpu", "threads", "CPU-bound Python, GIL off", "with the GIL off, bytecode runs in parallel"))
        for workload, mode, what, why in cases:
            rows.append(
                scaling_check(
                    summary,
                    {"interpreter": label, "workload": workload, "mode": mode, "workers": n},
                    f"{what}{tag}: {n} {mode} over sequential",
                    cpus,
                    SCALING_SHARE,
                    why,
                    lambda r, s, cpus=cpus, what=f"{n} {mode}": capacity_reason(r, s, cpus, GENERIC, host, what),
                )
            )
    return rows


def _threads_check(summary: pd.DataFrame | None, label: str, tag: str, host: dict, parts: dict | None) -> dict:
    """The GIL's check: CPU-bound Python on 2 threads reads 0.70x-1.15x of sequential, judged on
    the figure the headline gives (:func:`analysis.findings.lead_view`): at the sequential loop's
    pace where the threads timed their chunks' CPU time and that figure leads, since the loop's
    own pace in the threads is the machine's doing, not the GIL's (on the AVX-512 EPYC VM each
    chunk took 0.81x the sequential loop's CPU time: 1.16x measured, 0.99x at its pace); else
    the measured speedup. ``parts``: the threads point's :func:`experiments.gil.shortfall.shortfall`."""
    point = {"interpreter": label, "workload": "cpu", "mode": "threads", "workers": 2}
    r = pick(summary, **point) if summary is not None else None
    paced, at = shortfall.paced_of(r), ""
    if np.isfinite(paced):  # the measured figure and why it differs follow
        said = shortfall.pace(parts, r["speedup"], paced)
        at = f"judged at the sequential loop's pace ({r['speedup']:.2f}x measured{': ' + said if said else ''})"
    why = "the GIL lets one thread run bytecode at a time" + (f"; {at}" if at else "")
    return speedup_check(
        lead_view(summary) if at else summary,
        point,
        f"CPU-bound Python{tag}: 2 threads over sequential",
        "0.70x to 1.15x",
        lambda s: 0.7 <= s <= 1.15,
        why,
        lambda lead, sp: (f"{at}; " if at else "") + _threads_reason(lead, sp, host, None if at else parts),
    )


def _threads_reason(r: pd.Series | None, s: float | None, host: dict, parts: dict | None = None) -> str:
    """Why CPU-bound threads under the GIL left 0.70x-1.15x of sequential: what was measured
    while they ran (other processes, steal, quota; :func:`analysis.capacity.causes`) first,
    then the loop's own pace in the threads against the sequential loop's (``parts``, the
    threads point's :func:`experiments.gil.shortfall.shortfall`; :func:`~experiments.gil.shortfall.pace`),
    then an interval that reaches into the range (noise), else that nothing measured explains
    it. The GIL itself was measured on (the check runs only then)."""
    if r is None or s is None or not np.isfinite(s):
        return "not measured"
    found = causes(r, host, units=2)
    if found:
        return (
            f"2 threads ran {s:.2f}x of sequential, outside what the GIL allows, while {'; '.join(found)}: "
            "a point and its baseline that meet different loads give a ratio off by the change"
        )
    lo, hi = r.get("speedup_ci_low", np.nan), r.get("speedup_ci_high", np.nan)
    short = _short_cpus(r)
    paced = shortfall.pace(parts, s, shortfall.paced_of(r))
    if paced:
        return f"{paced}; {short}" if short else paced
    if np.isfinite(lo) and np.isfinite(hi) and lo <= 1.15 and hi >= 0.7:
        noise = f"its 95% CI ({lo:.2f}-{hi:.2f}) reaches into the range the GIL allows: measurement noise"
        return f"{noise}; {short}" if short else noise
    if short:
        return f"outside the range the GIL allows with the GIL measured on; {short}"
    return "outside the range the GIL allows with the GIL measured on, and nothing measured explains it"


def _short_cpus(r: pd.Series) -> str:
    """Where the capacity probe of the point's own rounds read fewer CPUs delivered than the
    point asked for (below :data:`analysis.capacity.DELIVERED_WHOLE` of them), what it read, in
    words; else "". The probe's all-CPU level is limited by its slowest CPU, so ``delivered /
    asked`` is the slowest CPU's speed with all busy over one CPU's alone. Under the GIL one
    thread runs at a time, at the speed its CPU has then, so a sequential baseline and its
    threads that ran on CPUs, or at moments, of different speeds give a ratio off by their ratio
    (on an AVX2 EPYC VM, 2 threads read 1.26x over sequential in a job whose probe read 1.18 of
    2 CPUs delivered)."""
    got, asked = (pd.to_numeric(r.get(c, np.nan), errors="coerce") for c in ("cpus_delivered", "cpus_asked"))
    if not (np.isfinite(got) and np.isfinite(asked) and asked > 1 and got < DELIVERED_WHOLE * asked):
        return ""
    return (
        f"the machine delivered {got:.2f} of {asked:g} CPUs in the same rounds (the capacity probe: with all busy,"
        f" the slowest ran at {got / asked:.0%} of one CPU alone), and one thread runs at the speed its CPU has"
        " then, which the baseline's rounds need not have shared"
    )


def _interpreter_checks(
    summary: pd.DataFrame | None, label: str, tag: str, ncpu: int, host: dict, threads_parts: dict | None
) -> list[dict]:
    rows = []
    if summary is None or gil_on(summary, label):
        rows.append(_threads_check(summary, label, tag, host, threads_parts))
    workers = sorted(summary["workers"].unique()) if summary is not None else [2]
    for n in workers:
        rows.append(
            speedup_check(
                summary,
                {"interpreter": label, "workload": "io", "mode": "threads", "workers": n},
                f"I/O-bound sleep loop{tag}: {n} threads over sequential",
                f">= {0.9 * n:.2f}x",
                lambda s, n=n: s >= 0.9 * n,
                "sleeping threads release the GIL and overlap",
                "sleeping threads did not overlap as expected",
            )
        )
    return rows + _scaling_checks(summary, label, tag, workers, ncpu, host)


def threads_pace(spans: pd.DataFrame | None, replicates: pd.DataFrame | None, label: str) -> dict | None:
    """:func:`experiments.gil.shortfall.shortfall` of interpreter ``label``'s 2 CPU-bound threads
    (the point the threads check judges); None without their spans."""
    point = {"interpreter": label, "workload": "cpu", "mode": "threads", "workers": 2}
    return shortfall.shortfall(spans, replicates, point)


def fidelity(
    summary: pd.DataFrame | None,
    ncpu: int,
    host: dict,
    spans: pd.DataFrame | None = None,
    replicates: pd.DataFrame | None = None,
) -> list[dict]:
    """Theory checks per interpreter: under the GIL, CPU-bound Python on 2 threads 0.70x to
    1.15x of sequential (the GIL serialises bytecode); with the GIL off, CPU-bound threads at
    least 0.7 min(N, CPUs); N sleeping threads at least 0.9 N (sleep releases the GIL); C code
    that releases the GIL (sha256) on N threads and CPU-bound Python on N processes at least
    0.7 min(N, available CPUs), under any build. A workload not measured gives no check
    (``speedup_check`` on a missing point reports it as not measured). ``spans`` and
    ``replicates`` (spans.csv, replicates.csv) give the threads' own pace, which the threads
    check names where it differs from the sequential loop's (:func:`threads_pace`)."""
    summary = with_interpreter(summary)
    if summary is None:
        return _interpreter_checks(None, "default", "", ncpu, host, None)[:1]
    measured = summary[summary["status"] == "ok"] if "status" in summary.columns else summary
    several = measured["interpreter"].nunique() > 1
    rows = []
    for label in dict.fromkeys(measured["interpreter"]):
        tag = f" ({label})" if several else ""
        present = set(summary.loc[summary["interpreter"] == label, "workload"])
        parts = threads_pace(spans, replicates, label)
        checks = _interpreter_checks(summary, label, tag, ncpu, host, parts)
        rows += [r for r in checks if _workload_of(r["check"]) in present]
    return rows


def _workload_of(check: str) -> str:
    """The workload a check's text is about."""
    if check.startswith("I/O-bound"):
        return "io"
    if check.startswith("C code"):
        return "release"
    return "cpu"
