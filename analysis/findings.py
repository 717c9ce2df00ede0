"""Findings: plain-language sentences whose every number is computed from a summary table.

Each experiment's ``findings`` hook (its package's ``analysis.ANALYSIS``) takes a
:class:`lab.contract.Context` (the output of :func:`analysis.stats.summarise`, the host ...)
and returns its sentences; an optional ``tables`` hook returns extra tables for the report
(``{"caption", "columns", "rows"}`` of text). :func:`findings` calls them through the
registry. The helpers here format numbers and pick rows the same way for every experiment.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def bound(v: float) -> str:
    """A ratio (a speedup, or a bound of its interval) as the report writes it everywhere: two
    decimals, or three where two would round it to 1.00 from either side (0.998 is not 1.00: it
    says whether the interval holds 1), or two significant digits below 0.1, never in exponent
    form (0.009, not 0.00: a ratio is above 0; 0.000041, not 4.1e-05). So a table's cell and a
    finding's sentence give one speedup alike (1.90x in both, not 1.9x in one)."""
    if 0 < abs(v) < 0.1:
        return np.format_float_positional(v, precision=2, unique=False, fractional=False, trim="-")
    text = f"{v:.2f}"
    return f"{v:.3f}" if text == "1.00" and v != 1 else text


#: The intervals a speedup can be given with: the column infix in the summary (``speedup_ci_low``,
#: ``speedup_rerun_low``, ``speedup_norm_ci_low`` ...) and the words before the bounds.
INTERVALS = {"ci": "95% CI", "rerun": "95% rerun interval"}


def interval(row, kind: str = "ci", figure: str = "speedup") -> tuple[float, float] | None:
    """``row``'s ``kind`` interval (a key of :data:`INTERVALS`) of ``figure`` (``speedup`` or
    ``speedup_norm``) as (low, high), or None where a bound is missing or not finite."""
    lo, hi = row.get(f"{figure}_{kind}_low"), row.get(f"{figure}_{kind}_high")
    ok = lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi)
    return (lo, hi) if ok else None


def fmt_x(row, kind: str = "ci") -> str:
    """``1.93x (95% CI 1.85-2.01)``; without the interval when it is unknown. ``kind="rerun"``:
    the 95% rerun interval instead, where a rerun of the point is expected to read
    (:mod:`analysis.stats`): ``1.93x (95% rerun interval 1.80-2.07)``, the first screen's form
    (the CI where a row has no rerun interval: results analysed before it existed)."""
    text = interval_text(row, kind)
    return f"{bound(row['speedup'])}x" + (f" ({text})" if text else "")


def interval_text(row, kind: str = "ci", figure: str = "speedup") -> str:
    """``95% rerun interval 1.80-2.07`` (:func:`interval` in words); the CI where ``row`` has no
    ``kind`` interval (results analysed before the rerun interval existed); "" without either."""
    if interval(row, kind, figure) is None:
        kind = "ci"
    iv = interval(row, kind, figure)
    return f"{INTERVALS[kind]} {bound(iv[0])}-{bound(iv[1])}" if iv is not None else ""


#: A speedup on whole cores within this share of the measured one reads as measured on whole
#: cores: its headline gives the speedup alone, unless the figure on whole cores is the surer
#: one even so (:func:`_surer_on_whole_cores`).
WHOLE_CORES = 0.03


def fmt_transfer(row, kind: str = "rerun") -> str:
    """A speedup as the report's headlines give it: the figure that transfers between runs, with
    its ``kind`` interval (:data:`INTERVALS`; the headlines' is the 95% rerun interval, where a
    rerun is expected to read, which ``benchmarks/repeatability.py`` checks against reruns).
    Where the capacity probe measured that the machine delivered less than whole cores to a
    point's busy CPUs (its speedup on whole cores, :mod:`analysis.stats` ``speedup_norm``, differs from the
    measured one by over 3%, or less but is the narrower: :func:`_surer_on_whole_cores`), the speedup on
    whole cores with its interval and what was measured: ``1.97x on whole cores (95% rerun interval
    1.75-2.16; 1.33x measured while each busy CPU got 0.68 of a core; 2 CPUs delivered 1.35)``, the
    share being what the measured figure is divided by (measured over on whole cores: the point's share
    of a core per busy CPU over its baseline's, which is 1 for a one-CPU baseline; it is below the CPUs
    delivered over the CPUs asked where the point kept fewer CPUs busy than it asked for,
    :func:`analysis.wholecores.with_share`). Where the work timed its own units inside the windows
    (``speedup_norm_source`` ``in-window``), the share is how fast its slowest worker ran a unit
    against its baseline's: ``1.92x on whole cores (...; 1.48x measured while its slowest worker
    ran at about 0.77 of its baseline's speed, timed by the work's own units; the probe between rounds
    read 1.98 of 2 CPUs delivered)``, or by CPU time (:func:`_timed_by_the_work`). Else :func:`fmt_x`.
    Where the capacity readings' own spread widens the 95% CI on whole cores across 1 while the measured one lies
    clear of it, the measured figure (which the winner rules decide on, :func:`winner`) leads and the other follows
    as too wide to decide on: ``1.90x (...); on whole cores 2.21x (...), too wide to decide on``. So it leads where
    the correction costs more certainty than it removes bias (:func:`_spread_outweighs`): ``1.81x (...); on whole
    cores 1.89x (...), too uncertain to be worth its 5% correction``. A figure on whole cores above the point's own
    CPU count (more than its CPUs can give) says that the probe's loop, corrected for, is not this work: the measured
    figure alone is given there, with the CPUs delivered and why it is not corrected (no figure the line calls
    wrong); so it is where the probe read more CPUs delivered than the point asked for (2.24 of 2: the noise of its
    loops of a few ms), which no machine delivers. Decisions read the 95% CI whatever ``kind`` is shown."""
    case = transfer_case(row)
    asked, got, norm, s = (row.get(c) for c in ("cpus_asked", "cpus_delivered", "speedup_norm", "speedup"))
    if row.get("speedup_norm_source") == "in-window" and case in ("overshoots", "on_whole_cores"):
        return _timed_by_the_work(row, kind, case)
    if case in ("measured", "whole"):
        return fmt_x(row, kind)
    if case == "probe_noise":
        return (
            f"{fmt_x(row, kind)}; the probe read {got:.2f} CPUs delivered of the {int(asked)} the point asked for,"
            " more than there are (its short loops' noise): no correction"
        )
    text = interval_text(row, kind, "speedup_norm")
    if case == "too_wide":
        return f"{fmt_x(row, kind)}; on whole cores {bound(norm)}x ({text}), too wide to decide on"
    if case == "spread":
        return (
            f"{fmt_x(row, kind)}; on whole cores {bound(norm)}x ({text}), too uncertain to be worth its"
            f" {100 * abs(norm / s - 1):.0f}% correction"
        )
    if case == "overshoots":
        return (
            f"{fmt_x(row, kind)}, measured while {int(asked)} CPUs delivered {got:.2f}: not corrected, since the"
            f" correction would give more than the {int(asked)}x that {int(asked)} whole cores allow"
            " (the probe's loop is not this work)"
        )
    text += "; " if text else ""
    share = f"{s / norm:.2f}"
    return (
        f"{bound(norm)}x on whole cores ({text}{bound(s)}x measured while each busy CPU got {share} of a core;"
        f" {int(asked)} CPUs delivered {got:.2f})"
    )


def _timed_by_the_work(row, kind: str, case: str) -> str:
    """:func:`fmt_transfer` of a point whose speedup on whole cores the work's own speed inside the
    windows gave (``speedup_norm_source`` ``in-window``): ``case`` ``on_whole_cores`` or ``overshoots``.
    Where its units were timed by the workers' CPU time, pooled (``unit_clock`` ``cpu``: threads
    under the GIL), ``0.99x on whole cores (...; 1.20x measured while its workers, which ran one at
    a time, ran a unit at about 1.22 of its baseline's speed by their CPU time; ...)``."""
    got, norm, s = (row.get(c) for c in ("cpus_delivered", "speedup_norm", "speedup"))
    asked = cpus_of(row)
    if case == "overshoots":
        return (
            f"{fmt_x(row, kind)}: not corrected, since the correction by the work's own speed would give more than"
            f" the {int(asked)}x that {int(asked)} whole cores allow"
        )
    text = interval_text(row, kind, "speedup_norm")
    seen = got is not None and np.isfinite(got)
    probe = f"; the probe between rounds read {got:.2f} of {int(asked)} CPUs delivered" if seen else ""
    who = (
        "its workers, which ran one at a time, ran a unit at about {:.2f} of its baseline's speed by their CPU time"
        if row.get("unit_clock") == "cpu"
        else "its slowest worker ran at about {:.2f} of its baseline's speed, timed by the work's own units"
    )
    return (
        f"{bound(norm)}x on whole cores ({text + '; ' if text else ''}{bound(s)}x measured while"
        f" {who.format(s / norm)}{probe})"
    )


def transfer_case(row) -> str:
    """Which figure :func:`fmt_transfer` leads with, and why: ``on_whole_cores`` (the speedup on
    whole cores leads) or, where the measured speedup leads, ``measured`` (no probe reading),
    ``whole`` (the two within 3%), ``probe_noise`` (more CPUs read delivered than asked for),
    ``too_wide`` (the CI on whole cores holds 1 where the measured one does not, and is not the
    narrower: a narrower one that holds 1 says the point is no faster), ``spread``
    (:func:`_spread_outweighs`) or ``overshoots`` (above the point's own CPU count). Within 3%
    the figure on whole cores still leads where its CI is the narrower (:func:`_surer_on_whole_cores`:
    the rounds' own pace moved the measured speedup more than the correction moves it)."""
    asked, got, norm, s = (row.get(c) for c in ("cpus_asked", "cpus_delivered", "speedup_norm", "speedup"))
    timed = row.get("speedup_norm_source") == "in-window"  # by the work itself: the probe's reading is not used
    if timed:  # the probe may not have run (rounds.probe_ms 0): the CPUs the point asked for from its own units
        asked = cpus_of(row)
    if not all(v is not None and np.isfinite(v) for v in (asked, norm, s, *(() if timed else (got,)))) or s <= 0:
        return "measured"
    if abs(norm / s - 1) <= WHOLE_CORES and not _surer_on_whole_cores(row, np.log(norm / s)):
        return "whole"
    if not timed and got > asked * (1 + WHOLE_CORES):  # more CPUs than the point has: the probe's own noise
        return "probe_noise"
    ci, measured = interval(row, "ci", "speedup_norm"), interval(row, "ci")
    side = _side(*measured) if measured else 0
    if ci and side and _side(*ci) != side and not _narrower(ci, measured):  # a narrower one that holds 1 decides
        return "too_wide"
    if ci and measured and _spread_outweighs(np.log(norm / s), ci, measured):
        return "spread"
    if norm > asked * (1 + WHOLE_CORES):  # more than its CPUs can give: the probe's loop is not this work
        return "overshoots"
    return "on_whole_cores"


def cpus_of(row) -> float:
    """The CPUs a point asked for at once: the probe's ``cpus_asked``, else its parallel units
    (``speedup / parallel_efficiency``, :mod:`analysis.stats`); NaN where neither is known."""
    asked = row.get("cpus_asked")
    if asked is not None and np.isfinite(asked):
        return float(asked)
    s, eff = row.get("speedup"), row.get("parallel_efficiency")
    ok = all(v is not None and np.isfinite(v) for v in (s, eff)) and eff > 0
    return float(s / eff) if ok else float("nan")


def _surer_on_whole_cores(row, correction: float) -> bool:
    """Whether the speedup on whole cores, within 3% of the measured one, is still the figure to
    give: its 95% CI is the narrower on the log scale. Then it also has the smaller expected
    squared error, ``se_norm**2 < correction**2 + se_measured**2`` (the rule of
    :func:`_spread_outweighs` read the other way; ``correction`` the log of whole-cores over
    measured). A figure the probe corrects is never narrower (its CI adds the probe's spread to
    the measured one's), so this is the work that timed its own units while its baseline's
    rounds ran at a moving pace, which the measured speedup carries and the one on whole cores
    divides out (two quick runs of the AVX-512 EPYC VM, 2026-12-07: 2 processes 1.82x, 95% CI
    1.64-2.04, against 1.85x, 1.84-1.89, on whole cores). False where the two agree within 0.1%
    (a baseline's 1, a point the correction left alone), where either CI is missing or a bound
    is not positive."""
    ci, measured = interval(row, "ci", "speedup_norm"), interval(row, "ci")
    return abs(correction) >= 1e-3 and bool(ci and measured and _narrower(ci, measured))


def _narrower(ci: tuple, other: tuple) -> bool:
    """Whether the interval ``ci`` is narrower than ``other`` on the log scale by more than 1% of
    its width (two as wide, a probe's correction with no spread of its own, are not told apart by
    the rounding of their bounds); False where a bound is not positive."""
    if min(ci[0], other[0]) <= 0:
        return False
    return bool(np.log(ci[1] / ci[0]) < 0.99 * np.log(other[1] / other[0]))


def _spread_outweighs(correction: float, norm_ci: tuple, measured_ci: tuple) -> bool:
    """Whether correcting for the CPUs delivered costs more certainty than it removes bias: the
    measured speedup, taken as off by the whole ``correction`` (log of whole-cores over measured),
    has the smaller expected squared error on the log scale, ``correction**2 + se_measured**2 <
    se_norm**2`` with ``se`` each 95% CI's half-width on the log scale over 1.96 (the
    bias-variance trade of choosing an estimator by mean squared error; the capacity readings'
    own round-to-round noise is what widens ``se_norm``). False where a bound is not positive."""
    if min(norm_ci[0], measured_ci[0]) <= 0:
        return False
    se = [float(np.log(hi / lo)) / 2 / 1.96 for lo, hi in (norm_ci, measured_ci)]
    return bool(correction**2 + se[1] ** 2 < se[0] ** 2)


def _side(lo, hi) -> int:
    """Where a speedup's 95% CI lies: 1 above 1, -1 below, 0 holding 1 (or unknown)."""
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return 0
    return 1 if lo > 1 else -1 if hi < 1 else 0


def num(v: float, unit: str) -> str:
    """A measured value with its unit: ``1,234 samples/s``, ``56.7 GFLOP/s``; ``n/a`` if not finite."""
    if not np.isfinite(v):
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f} {unit}"
    return f"{v:.3g} {unit}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 thread``, ``2 threads`` (``many``: the plural when it is not ``word + "s"``)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def best_row(summary: pd.DataFrame) -> pd.Series:
    """The row flagged ``best`` (see :func:`analysis.stats.summarise`), else the highest median."""
    flagged = summary[summary["best"]]
    return flagged.iloc[0] if len(flagged) else summary.loc[summary["median"].idxmax()]


def winner(summary: pd.DataFrame) -> pd.Series | None:
    """The group's clear winner: the row flagged ``best`` whose speedup's 95% CI lies above 1
    (:func:`analysis.stats.summarise`), or the baseline when every other measured point's CI
    lies below 1; None when some point's interval holds 1 and none clears it, which findings
    call "no clear winner"."""
    if "best" not in summary or summary.empty:
        return None
    flagged = summary[summary["best"] & (summary["speedup_ci_low"] > 1)]
    if len(flagged):
        return flagged.iloc[0]
    base = summary[summary["speedup_source"] == "baseline"] if "speedup_source" in summary else summary.iloc[0:0]
    others = summary[summary["speedup"].notna() & (summary["speedup_source"] != "baseline")]
    if len(base) and len(others) and (others["speedup_ci_high"] < 1).all():
        return base.iloc[0]
    return None


def best_index(grp: pd.DataFrame):
    """Index of a group's best row: the highest speedup whose 95% CI clears 1 (interleaved with
    the baseline, immune to drift between jobs), else the measured baseline; None for a group
    with no measured point (all skipped or failed), or where the baseline is not among the points
    (its value not swept) and no point clears it: a higher median alone is not a measured lead.
    ``grp`` needs ``speedup``, ``speedup_ci_low``, ``median`` and ``_is_base`` (bool)."""
    better = grp[(grp["speedup_ci_low"] > 1.0) & ~grp["_is_base"]]
    if len(better):
        return better["speedup"].idxmax()
    measured_base = grp["_is_base"] & grp["median"].notna()
    return measured_base.idxmax() if measured_base.any() else None


def lead_view(summary: pd.DataFrame) -> pd.DataFrame:
    """``summary`` as its headlines read it: where a row leads with its speedup on whole cores
    (:func:`transfer_case` ``on_whole_cores``), that figure and its 95% CI stand in ``speedup``,
    ``speedup_ci_low`` and ``speedup_ci_high``, and ``best`` is drawn again by the rule of
    :func:`analysis.stats.summarise` (the highest speedup whose CI lies above 1, else the
    baseline), so that :func:`winner` and :func:`unranked` judge the figure a headline prints: a
    tester read "threads" named the winner beside 2 processes at 1.89x on whole cores (95% CI
    1.72-1.97), judged on their measured 1.05x (0.83-1.83). Same index as ``summary``."""
    view = summary.copy()
    cols = ["speedup", "speedup_ci_low", "speedup_ci_high"]
    if view.empty or not set(cols + [c.replace("speedup", "speedup_norm") for c in cols]) <= set(view.columns):
        return view
    for idx, row in summary.iterrows():
        if transfer_case(row) == "on_whole_cores":
            view.loc[idx, cols] = [row[c.replace("speedup", "speedup_norm")] for c in cols]
    if "best" in view:
        base = view["speedup_source"] == "baseline" if "speedup_source" in view else pd.Series(False, view.index)
        grp = view.assign(_is_base=base, median=view["median"] if "median" in view else view["speedup"])
        view["best"] = view.index == best_index(grp)  # a row with a speedup was measured
    return view


def headline_winner(summary: pd.DataFrame) -> pd.Series | None:
    """:func:`winner` judged on the figures the headlines print (:func:`lead_view`): the row of
    ``summary`` itself (its measured and whole-cores columns intact, for :func:`fmt_transfer`),
    or None. A new user read a chart's 1.98x on whole cores beside a headline's "no clear winner",
    judged on the measured speedup."""
    best = winner(lead_view(summary))
    return None if best is None else summary.loc[best.name]


def unranked(summary: pd.DataFrame, best: pd.Series | None) -> pd.DataFrame:
    """The points that :func:`winner` passed over only for uncertainty: a higher median speedup
    than ``best``'s but a 95% CI that holds 1. Naming ``best`` the winner alone would claim more
    than the data shows (its lead over them is not measured); empty when ``best`` is None or
    the baseline."""
    if best is None or "speedup" not in summary or best.get("speedup_source") == "baseline":
        return summary.iloc[0:0]
    pts = summary[summary["speedup_source"] != "baseline"] if "speedup_source" in summary else summary
    return pts[(pts["speedup"] > best["speedup"]) & (pts["speedup_ci_low"] <= 1)]


def unranked_text(summary: pd.DataFrame, best: pd.Series | None, name, short: bool = False) -> str:
    """``"; 2 threads 1.81x (95% CI 0.34-2.09): a higher median but an interval holding 1, too
    uncertain to rank"``, to append to a sentence that names ``best``: the :func:`unranked`
    points, each named by ``name(row)``; empty when there are none. ``short``: the headline
    form, with the 95% rerun interval (:func:`fmt_x`): ``" (2 threads 1.81x (95% rerun interval
    0.25-2.97) too uncertain to rank)"``."""
    rows = unranked(summary, best)
    if rows.empty:
        return ""
    parts = ", ".join(f"{name(r)} {fmt_x(r, 'rerun' if short else 'ci')}" for _, r in rows.iterrows())
    if short:
        return f" ({parts} too uncertain to rank)"
    return f"; {parts}: a higher median but an interval holding 1, too uncertain to rank"


def slower(summary: pd.DataFrame) -> pd.DataFrame:
    """The points clearly slower than their baseline (speedup CI below 1)."""
    return summary[summary["speedup_ci_high"] < 1] if "speedup_ci_high" in summary else summary.iloc[0:0]


def pick(summary: pd.DataFrame | None, **where) -> pd.Series | None:
    """The first row whose columns equal ``where`` (typed values), or None."""
    if summary is None:
        return None
    mask = pd.Series(True, index=summary.index)
    for k, v in where.items():
        mask &= summary[k] == v
    hit = summary[mask]
    return hit.iloc[0] if len(hit) else None


def measured(summary: pd.DataFrame) -> pd.DataFrame:
    """The points with a median (at least one ok replicate)."""
    return summary[summary["median"].notna()]


def in_order(values, order) -> list:
    """The members of ``order`` present in ``values``, in ``order``'s order."""
    present = set(values)
    return [v for v in order if v in present]
