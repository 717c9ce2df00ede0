"""Workload experiment, analysis: the verified recommendation, the search that found it, what the
user's shell does to their own programs, and the charts.

The summary has two rows. ``stage=verify``: the recommendation's samples/s (median over the
verification's rounds, :func:`experiments.workload.recommend.gain_windows`), the current
settings' as the baseline measured in the same job, and the gain: the median of the per-round
ratios with its 95% CI (:mod:`analysis.stats`), ``best`` only when that CI lies above 1;
``memory_grows`` when a worker grew in any window. ``stage=search``: status, windows and a
``reason`` (why no median); its comparisons are in the job's outcome, table and chart.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import stats
from analysis.capacity import IDLE_RERUN, pooled_contended
from analysis.findings import INTERVALS, bound, fmt_x, interval_text
from analysis.rerun import RERUN_COLUMNS
from experiments.workload import KNOBS
from experiments.workload.figures import workload_search, workload_verify
from experiments.workload.recommend import (
    against_themselves,
    as_env,
    as_json,
    as_python,
    best_gave,
    describe_changes,
    environment_sentences,
    gain_text,
    gain_windows,
    incomplete_text,
    outcome,
    recommendation,
    search_sentence,
    untried_knobs,
)
from experiments.workload.search import geomean_ci
from lab.contract import Analysis, Context

STAT_COLUMNS = ["median", "q1", "q3", "iqr", "iqr_pct", "ci_low", "ci_high", "baseline_median"]
SPEEDUP_COLUMNS = [
    "speedup_ratio_of_medians",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    *stats.NORM_COLUMNS,
    *RERUN_COLUMNS,
]


def summarise(replicates: pd.DataFrame) -> pd.DataFrame:
    """The two-row summary of the module docstring."""
    summary = stats.summarise(gain_windows(replicates), "workload")
    search = summary["stage"] == "search"
    verify_rows = replicates[(replicates["stage"] == "verify") & (replicates["status"] == "ok")]
    if "memory_grows" in verify_rows and len(verify_rows):
        summary.loc[~search, "memory_grows"] = bool(verify_rows["memory_grows"].fillna(False).astype(bool).any())
    windows = replicates[(replicates["stage"] == "search") & (replicates["status"] == "ok")]
    extra = [c for c in summary.columns if c.startswith(("data_stall_pct", "peak_pss_mb"))]
    summary.loc[search, STAT_COLUMNS + SPEEDUP_COLUMNS + extra] = np.nan
    summary.loc[search, ["speedup_source"]] = ""
    summary.loc[search, ["noisy", "oversubscribed", "memory_grows"]] = False  # of many configurations: no meaning
    ok = search & (summary["status"] == "ok")
    summary.loc[ok, "n"] = len(windows)
    summary.loc[ok, "reason"] = "no median of its own: windows of many configurations, compared in the search's table"
    summary["best"] = ~search & (summary["speedup_ci_low"] > 1)
    return summary


def data(ctx: Context) -> dict:
    """The recommendation (:func:`experiments.workload.recommend.recommendation`), with the
    search's comparisons (:func:`search_trail`) and the user's shell: reads ``ctx.summary``,
    ``ctx.replicates``, ``ctx.jobs`` (the search's trail) and ``ctx.host`` (``user_environment``)."""
    summary, replicates, jobs, host = ctx.summary, ctx.replicates, ctx.jobs, ctx.host
    d = recommendation(summary, replicates, jobs)
    d["search"]["trail"] = search_trail(replicates, jobs).to_dict("records")
    d["search"]["untried"] = untried_knobs(jobs, d["search"]["trail"], d["search"].get("skipped_knobs") or {})
    return {**d, "user_environment": host.get("user_environment") or {}}


def _gain(d: dict) -> str:
    """The verified gain as the first screen gives it: with its 95% CI, which decides the
    verification, and its 95% rerun interval, where a rerun of the verification is expected to
    read (:func:`analysis.findings.interval_text`; the CI alone where the results predate the
    rerun interval). Both, so that "verified faster" beside a rerun interval that reaches below 1
    reads as what it is, not as a contradiction."""
    (lo, hi), (r_lo, r_hi) = d["gain_ci"], d.get("gain_rerun") or (np.nan, np.nan)
    row = {"speedup": d["gain"], "speedup_ci_low": lo, "speedup_ci_high": hi}
    ci = fmt_x(row)
    rerun = interval_text(row | {"speedup_rerun_low": r_lo, "speedup_rerun_high": r_hi}, "rerun")
    return ci[:-1] + f"; {rerun})" if rerun.startswith(INTERVALS["rerun"]) and ci.endswith(")") else ci


def _in_processes(d: dict) -> str:
    """`` in 2 worker processes`` where the verification split its rounds; "" otherwise."""
    n = d.get("processes") or 1
    return f" in {n} worker processes" if n > 1 else ""


def _recommendation_sentence(d: dict) -> str:
    if d["status"] != "ok":
        return f"No recommendation: {d['reason']}."
    gain = gain_text(d["gain"], d["gain_ci"])
    if d["verified"]:
        payoff = f" Its up-front cost pays off after {d['payoff_calls']:,} calls." if d.get("payoff_calls") else ""
        return (
            f"Recommendation: {describe_changes(d['changes'])}. Verified in a separate job over {d['rounds']} "
            f"interleaved rounds{_in_processes(d)}: {gain} the samples/s of"
            f" {d['current_source']}.{payoff}"
        )
    missing = incomplete_text(d)
    if missing:  # an unfinished search is no answer: say what it did not try and what would
        return (
            f"No recommendation yet: {missing}. What it compared found nothing verified faster than"
            f" {d['current_source']} ({gain} in the verification); raise workload.budget_s"
            " (or budget_max_s) to search the rest."
        )
    if (d.get("search") or {}).get("stopped") == "nothing to search":
        return (
            f"Nothing to search: the workload section offers no value of any knob other than {d['current_source']}'."
            f" Measured against themselves in the verification, they gave {gain}: the noise of this machine."
        )
    if against_themselves(d):
        return (
            f"Your current settings are fine here: the search found nothing clearly faster than {d['current_source']}. "
            f"Measured against themselves in the verification they gave {gain}: the noise of this machine."
        )
    return (
        f"Your current settings are fine here: the search's best configuration gave {gain} "
        "in the verification, not clearly faster."
    )


def _diagnosis_sentence(d: dict) -> str:
    """What the diagnosis measured and what the search therefore took first or skipped."""
    s = d.get("search") or {}
    diag = s.get("diagnosis")
    if not diag:
        return ""
    text = f"Diagnosis. {diag['sentence']}."
    order = s.get("order") or []
    parts = [f"So the search took {', '.join(order)}, in that order"] if order else []
    skipped = {k: v for k, v in (s.get("skipped_knobs") or {}).items() if v}
    if skipped:
        by_reason: dict[str, list[str]] = {}
        for knob, why in skipped.items():
            by_reason.setdefault(why, []).append(knob)
        said = "; ".join(f"{', '.join(k)} ({why})" for why, k in by_reason.items())
        parts.append(f"it skipped {said}" if order else f"The search skipped {said}")
    text += f" {'; '.join(parts)}." if parts else ""
    if s.get("needed_s"):
        text += f" A complete search needed about {s['needed_s']:.0f} s at this step time"
        text += f"; its budget was {s.get('budget_s') or 0:.0f} s" + (" (auto)." if s.get("budget_auto") else ".")
    return text


def _contention_sentence(d: dict) -> str:
    """A search comparison or verification measured while other processes took CPU, flagged:
    contention can invert it (2 OpenMP threads ran 6-10x slower than 1 while another process held
    a CPU; bfloat16 2.5x slower than float32 on a busy machine, 1.8x faster on an idle one)."""
    trail = d["search"].get("trail") or []
    flagged = [f"comparison {c['comparison']} ({c['knob']} {c['value']})" for c in trail if c.get("contended")]
    if d.get("status") == "ok" and d.get("verify_contended"):
        differ = [k for k in KNOBS if k in d["current"] and d["current"][k] != d["best_found"].get(k)]
        if differ:
            flagged.append(f"the verification ({', '.join(differ)} differ)")
    if not flagged:
        return ""
    return (
        f"Measured while other processes took CPU: {', '.join(flagged)}. A comparison under contention can"
        " invert: thread, worker and process counts compete with those processes for the same CPUs, and"
        " in this lab's runs of another day bfloat16 came out 2.5x slower than float32 busy, 1.8x faster idle."
        " Rerun on an idle machine before acting on it."
    )


def _measured_sentences(d: dict) -> list[str]:
    if d["status"] != "ok":
        return []
    m, out = d["measured"], []
    stall, util = m["data_stall_pct"], m["cpu_util_pct"]
    best = "the recommendation" if d["verified"] else "the search's best"
    if stall["current"]["median"] is not None:
        out.append(
            f"In the verification's windows (medians; the diagnosis above read one epoch of the start), the"
            f" training loop waited for data {stall['current']['median']:.0f}% of the time with the current "
            f"settings and {stall['best_found']['median']:.0f}% with {best}; the job's processes used "
            f"{util['current']['median']:.0f}% and {util['best_found']['median']:.0f}% of the available CPUs."
        )
    pss = m["peak_pss_mb"]
    if pss["current"]["median"] is not None:
        out.append(
            f"Peak memory (PSS, all processes): {pss['current']['median']:.0f} MB current, "
            f"{pss['best_found']['median']:.0f} MB {best.removeprefix('the ')}."
        )
    if d.get("memory_grows"):
        out.append(
            f"A DataLoader worker's private memory (USS) grew by {d.get('worker_uss_growth_mb') or 0:.0f} MB across"
            " an epoch: copy-on-read of Python objects in forked workers (pytorch/pytorch#13246); keep the"
            " dataset's storage in numpy arrays or tensors, not lists of Python objects."
        )
    return out


def _numerics_sentences(d: dict) -> list[str]:
    out = []
    for precision, n in (d.get("numerics") or {}).items():
        loss = ""
        if n.get("loss_after") is not None and np.isfinite(n["loss_after"]):
            loss = f"the loss after the same training steps is {n['loss_after']:.4g}"
            loss += f" against {n['loss_after_fp32']:.4g} in float32; "
        out.append(f"{precision} autocast: {loss}the outputs differ from float32 by at most {n['max_abs_diff']:.2g}.")
    return out


def findings(ctx: Context) -> list[str]:
    """The recommendation (or why there is none), the search, data stall, CPU and memory,
    bfloat16's numerical cost, and the user's shell: :func:`data` of ``ctx``, and ``ctx.host``'s CPUs."""
    host = ctx.host
    d = data(ctx)
    out = [_recommendation_sentence(d), _contention_sentence(d), _diagnosis_sentence(d), search_sentence(d)]
    out += [*_measured_sentences(d), *_numerics_sentences(d)]
    out += environment_sentences(d["user_environment"], host.get("available_cpus"))
    return [s for s in out if s]


def headlines(ctx: Context) -> list[dict]:
    """The report's first line: verified faster; searched completely, nothing clearly faster; or
    search incomplete (what it did not try, the budget that would); and :func:`precision_headline`
    (``scope`` ``model``: before a figure of one operator). From :func:`data` of ``ctx``."""
    d = data(ctx)
    kind, missing = outcome(d), incomplete_text(d)
    if kind == "failed":
        answer = f"no recommendation ({d['status']}: {d['reason']})"
    elif kind == "verified faster":
        answer = f"verified faster: {describe_changes(d['changes'])}: {_gain(d)}"
        answer += f" ({missing})" if missing else ""
        if d.get("verify_contended"):  # the figure may be the contention's, not the settings'
            answer += f"; measured while other processes took CPU: {IDLE_RERUN}"
    elif kind == "searched completely":
        answer = f"searched completely, nothing clearly faster: keep your settings ({best_gave(d)} {_gain(d)})"
    else:
        answer = f"{missing}; so far nothing verified faster than your settings ({_gain(d)})"
    out = [{"question": "What should I change for my workload on this machine?", "answer": answer}]
    return out + ([precision] if (precision := precision_headline(d)) else [])


def precision_headline(d: dict) -> dict | None:
    """The search's last bfloat16 comparison on the user's model (the nearest the recommendation;
    a first one against other settings is named beside it: a new user read "1.03x, no clear
    difference" from the first while the last, 1.54x, had made bfloat16 the recommendation): its
    ratio and interval, and a warning where its windows were contended (that can invert it)."""
    trail = d["search"].get("trail") or []
    comps = [c for c in trail if c.get("knob") == "precision" and c.get("rounds") and str(c["value"]).startswith("bf")]
    if not (comps := [c for c in comps if np.isfinite(c.get("ratio", np.nan))]):
        return None
    c = comps[-1]
    lo, hi = c.get("ci_low", np.nan), c.get("ci_high", np.nan)
    answer = f"precision {c['value']} on your model: {c['ratio']:.2f}x the best so far"
    answer += f" (95% CI {bound(lo)}-{bound(hi)})" if np.isfinite(lo) else ""
    answer += f", {c['decision']} ({int(c['rounds'])} interleaved rounds in the search)"
    if len(comps) > 1:
        answer += f"; the last of {len(comps)} comparisons, the first against other settings read"
        answer += f" {comps[0]['ratio']:.2f}x ({comps[0]['decision']})"
    if c.get("contended"):
        answer += "; measured while other processes took CPU, which can invert a precision comparison: rerun idle"
    question = "Does bfloat16 pay for your model here?"
    return {"question": question, "answer": answer, "topic": "precision", "scope": "model"}


def tables(ctx: Context) -> list[dict]:
    """The knobs side by side (current, best found, recommended) and the search's comparisons,
    from :func:`data` of ``ctx``."""
    d = data(ctx)
    out = []
    if d["status"] == "ok":
        rows = [[k, str(d["current"][k]), str(d["best_found"][k]), str(d["recommended"][k])] for k in KNOBS]
        out.append(
            {
                "caption": "Settings: current, the search's best, and the recommendation"
                " (the best only when the verification found it faster)",
                "columns": ["knob", "current", "best found", "recommended"],
                "rows": rows,
            }
        )
    trail = d["search"]["trail"]
    if trail:
        out.append(
            {
                "caption": "The search: each candidate against the best of its moment"
                " (ratio of samples/s, geometric mean of rounds, 95% CI)",
                "columns": ["#", "knob", "candidate", "rounds", "ratio (95% CI)", "decision"],
                "rows": [
                    [str(r["comparison"]), r["knob"], str(r["value"]), str(r["rounds"]), r["ratio_text"], r["decision"]]
                    for r in trail
                ],
            }
        )
    return out


def search_trail(replicates: pd.DataFrame, jobs: list[dict]) -> pd.DataFrame:
    """One row per comparison of the search: knob, value, rounds, the geometric mean of the paired
    rounds' ratios with the 95% interval the search decided with
    (:func:`experiments.workload.search.geomean_ci`, from the windows), and the job's decision."""
    trail = []
    for job in jobs:
        if (job.get("params") or {}).get("stage") == "search":
            trail = (job.get("outcome") or {}).get("trail") or []
    rows = (
        replicates[(replicates["stage"] == "search") & (replicates["status"] == "ok")]
        if len(replicates)
        else replicates
    )
    out = []
    measured_i = 0
    for c in trail:
        cand, inc = c["candidate"], c["incumbent"]
        also = [f"{k} {inc[k]} → {cand[k]}" for k in KNOBS if k != c["knob"] and cand.get(k) != inc.get(k)]
        rec = {
            "comparison": len(out),
            "knob": c["knob"],
            "value": f"{cand[c['knob']]}" + (f" (with {', '.join(also)})" if also else ""),
            "rounds": c["rounds"],
            "decision": c["decision"],
        }
        rec.update(ratio=np.nan, ci_low=np.nan, ci_high=np.nan, ratio_text=c.get("reason") or "", contended=False)
        if c["rounds"]:
            w = rows[rows["comparison"] == measured_i] if "comparison" in rows else rows.iloc[0:0]
            rec["contended"] = pooled_contended(w)
            pairs = w[w["role"] == "point"][["repeat", "value"]].merge(
                w[w["role"] == "baseline"][["repeat", "value"]], on="repeat"
            )
            ratios = (pairs["value_x"] / pairs["value_y"]).to_numpy(dtype=float)
            if len(ratios):  # the interval the search decided with
                mean, lo, hi = geomean_ci(list(ratios))
                rec.update(ratio=mean, ci_low=lo, ci_high=hi)
                rec["ratio_text"] = f"{mean:.2f}x" + (f" ({lo:.2f}-{hi:.2f})" if np.isfinite(lo) else "")
                if rec["contended"]:
                    rec["ratio_text"] += "; contended"
            measured_i += 1
        out.append(rec)
    return pd.DataFrame(out)


def timeline_points(ctx: Context) -> list[dict]:
    """The verification, if it was measured (from ``ctx.summary``)."""
    summary = ctx.summary
    ok = summary[(summary["stage"] == "verify") & (summary["status"] == "ok")]
    return [{"stage": "verify"}] if len(ok) else []


def compare_tables(hosts: list) -> list[dict]:
    """The hosts' recommendations side by side: one row per knob (the recommended value, and
    the current one where it differs), the verified gain and throughput, and whether the
    recommended value differs between hosts (``hosts``: :class:`analysis.hosts.HostResults`)."""
    if not hosts:
        return []
    data_of = {h.name: (h.findings.get("workload") or {}).get("data") or {} for h in hosts}
    rows = []
    for knob in KNOBS:
        cells = []
        for d in data_of.values():
            if d.get("status") != "ok":
                cells.append("n/a")
                continue
            rec, cur = d["recommended"][knob], d["current"][knob]
            cells.append(f"{rec}" if rec == cur else f"{rec} (from {cur})")
        values = {d["recommended"][knob] for d in data_of.values() if d.get("status") == "ok"}
        rows.append([knob, *cells, "yes" if len(values) > 1 else ""])
    gains = [
        gain_text(d["gain"], d["gain_ci"]) + (" verified" if d["verified"] else ", not clearly faster")
        if d.get("status") == "ok"
        else f"{d.get('status', 'n/a')}"
        for d in data_of.values()
    ]
    rows.append(["gain over the current settings", *gains, ""])
    return [
        {
            "caption": "Each host's recommendation (from its own verified measurement)"
            " and which knobs change between machines",
            "columns": ["knob", *data_of, "differs between hosts"],
            "rows": rows,
        }
    ]


ANALYSIS = Analysis(
    findings=findings,
    headlines=headlines,
    tables=tables,
    data=data,
    timeline_points=timeline_points,
    summarise=summarise,
    compare_tables=compare_tables,
    figures={"workload_search": workload_search, "workload_verify": workload_verify},
    artefacts={"recommended.json": as_json, "recommended.env": as_env, "recommended.py": as_python},
)
