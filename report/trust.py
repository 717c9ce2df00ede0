"""The report's "Can these numbers be trusted?" section and its line on the first screen: the
theory checks, the flags, what limited the CPUs (measured), the processes outside the pipeline
that took CPU, the points that stopped on their time budget, and the run's timing. Built from
analysis outputs only (``fidelity.csv``, ``run.json``, ``interference.csv``) and host.json."""

from __future__ import annotations

import math

import pandas as pd

from analysis.capacity import IDLE_RERUN, STEAL_PCT, cpus_text
from analysis.findings import bound
from report.format import fmt as _fmt

CAVEAT_SHARE = 0.25
"""Above this share of contended points the first screen opens with a caveat: its answers were
measured while other processes took CPU."""


def _caveat(trust: dict) -> str:
    text = f"{trust['contended']} of {trust['points']} points were measured while other processes took CPU"
    if trust["others"]:
        top = trust["others"][0]
        text += f" (most of all pid {top['pid']} `{top['cmdline']}`, {top['cpu_s']} s of CPU)"
    return text + "; the answers below may be those of a busier machine: rerun on an idle one before acting on them."


def _scoped(lines: list[dict]) -> list[dict]:
    """Where a question's ``topic`` was answered on the user's own model (``scope`` ``model``),
    an answer measured on one operator (``scope`` ``operator``) comes after it and says whose
    figure to go by: a matmul's bfloat16 gain is not a model's."""
    models = {h["topic"]: h for h in lines if h.get("topic") and h.get("scope") == "model"}
    out = []
    for h in lines:
        model = models.get(h.get("topic"))
        if model is not None and h.get("scope") == "operator":
            h = {**h, "answer": f"{h['answer']} (your model's own figure is the line above)"}
            out.insert(out.index(model) + 1 if model in out else len(out), h)
        else:
            out.append(h)
    return out


def _marked(h: dict) -> dict:
    """A headline whose experiment had contended points (findings.json ``contended``: ``[k, n]``)
    says so after its answer: a point slowed by another process can lose to one it would beat."""
    if not h.get("contended"):
        return h
    k, n = h["contended"]
    if h["answer"].endswith(IDLE_RERUN):  # the experiment said it already (the workload's verification): once
        return {**h, "answer": f"{h['answer']} ({k} of {n} points contended)"}
    return {**h, "answer": f"{h['answer']} ({k} of {n} points contended: {IDLE_RERUN})"}


def headlines(exps: list[dict], trust: dict) -> list[dict]:
    """The report's first screen: each experiment's answers (``findings.json`` ``headlines``), in
    report order, each linked to its section, then the trust verdict (naming the process that
    took the most CPU, if one did). Where more than :data:`CAVEAT_SHARE` of the measured points
    were contended, a caveat saying so comes first."""
    out = _scoped([{**_marked(h), "anchor": e["name"]} for e in exps for h in e.get("headlines", [])])
    if trust["points"] and trust["contended"] > CAVEAT_SHARE * trust["points"]:
        out.insert(0, {"question": "Measured under contention:", "answer": _caveat(trust), "anchor": "trust"})
    verdict = f"{trust['passed']} of {trust['passed'] + trust['warned']} theory checks pass"
    verdict += f"; {trust['contended']} of {trust['points']} measured points contended"
    if trust["contended"] and trust["others"]:
        top = trust["others"][0]
        verdict += f" (most of all by pid {top['pid']} `{top['cmdline']}`, {top['cpu_s']} s of CPU)"
    verdict += f", {trust['noisy']} noisy"
    if trust["budget_stopped"]:
        verdict += f"; {len(trust['budget_stopped'])} stopped on the time budget with a wide interval"
    if trust["problems"]:
        verdict += f"; {sum(p['points'] for p in trust['problems'])} not measured (skipped, failed or timed out)"
    return [*out, {"question": "Can these numbers be trusted?", "answer": verdict, "anchor": "trust"}]


def contention_text(c: dict, others: list[dict], ncpu, contended: int, points: int) -> str:
    """One paragraph: how much of the run was contended, by whom, and what that does to the
    numbers (run.json ``contention`` for the windows, interference.csv for the processes; the
    points counted as the report's tables flag them: ``contended`` of ``points`` measured)."""
    if not c or not c.get("windows"):
        return ""
    if not c.get("contended_windows"):
        return (
            f"No other process used more than 10% of a CPU in any of the {c['windows']} measured windows: "
            "the CPUs were the lab's alone."
        )
    text = (
        f"{contended} of {points} measured points were contended (their median window's other "
        f"processes used over 10% of a CPU); {c['contended_windows']} of {c['windows']} windows were "
        f"({c['contended_time_pct']:.0f}% of the measured time), and in them other processes"
        f" used a median {c['other_cpu_median']:.2f} CPU of {c.get('cpus') or ncpu}"
    )
    if others:
        top = others[0]
        points = f"{top['points']} point{'s' if top['points'] != 1 else ''}"
        text += (
            f", most of all pid {top['pid']} `{top['cmdline']}` ({top['cpu_s']} s of CPU during {points};"
            f" a median {top['cpu']} CPU in its windows)"
        )
    left, quota = c["cpus_left"], c.get("quota_cpus")
    binds = f" (the CPU quota of {cpus_text(quota)} binds first)" if quota and left >= quota else ""
    # a one-CPU baseline gets min(1, left) of a CPU and a parallel point at most left: their ratio
    cap = (
        f"a parallel speedup over one CPU is capped near {left:.2f}x in those windows"
        if left >= 1
        else "less than one: no parallel speedup was possible in those windows (capped near 1x)"
    )
    return (
        text
        + (
            f". CPU-bound work measured in those windows had about {left:.2f} CPUs left{binds}, {cap}; a point and"
            " its baseline met the same load only where both windows of a round were contended."
        )
        + _unnamed_text(c)
    )


def _unnamed_text(c: dict) -> str:
    """``" In 31 of the contended windows no single other process used 1% of a CPU or more, 29
    of them shorter than 0.1 s, where the kernel's 10 ms CPU accounting alone can read as tens
    of % of a CPU."``; "" where every contended window named one (run.json ``contention``,
    :func:`analysis.runinfo._unnamed`)."""
    n, short = c.get("unnamed_windows") or 0, c.get("unnamed_short_windows") or 0
    if not n:
        return ""
    text = f" In {n} of the contended windows no single other process used 1% of a CPU or more"
    if short:
        text += (
            f", {short} of them shorter than 0.1 s, where the kernel's 10 ms CPU accounting alone can read as"
            " tens of % of a CPU"
        )
    return text + "."


def _share(run: dict, key: str) -> str:
    """``run[key]`` (s) as a share of the measurement phase, ``4%``; "" where it is absent or 0."""
    seconds, phase = run.get(key) or 0.0, run.get("measurement_phase_s") or 0.0
    return f"{100 * seconds / phase:.0f}%" if seconds > 0 and phase > 0 else ""


def _at(seconds: float) -> str:
    """``42 s`` or ``2.6 min``: a time into the measurement phase."""
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def vm_events_text(vm: dict) -> str:
    """Each VM restore or clone the kernel logged during the measurement phase (run.json
    ``vm_events``, :func:`analysis.runinfo.vm_events`) with the single-CPU speed of the jobs on
    either side of it, as sentences; "" where there was none."""
    parts = []
    for e in (vm or {}).get("events") or []:
        text = f"{_at(e['at_s'])} into the measurement phase the kernel logged a {e['event']}"
        before, after = e.get("single_before"), e.get("single_after")
        if before and after:
            text += (
                f": one CPU ran {before / 1e6:.1f} M loop iterations/s in the jobs before it and"
                f" {after / 1e6:.1f} M/s after it ({100 * (after / before - 1):+.0f}%)"
            )
        parts.append(text[0].upper() + text[1:] + ".")
    return " ".join(parts)


def capacity_paragraph(drift: dict, vm: dict | None = None) -> str:
    """What the capacity probe measured over the run (run.json ``capacity``), as a sentence, and
    what the report does with it, then :func:`vm_events_text` of run.json ``vm_events``; "" where
    no job ran the probe."""
    if not drift:
        return vm_events_text(vm or {})
    from analysis.schedule import capacity_text

    share = drift.get("probe_share_pct")
    cost = f" The probe took {share:.1f}% of the measurement phase." if share == share and share is not None else ""
    return (
        "Capacity over the run, measured by a fixed-work loop on one CPU and on all of them before every round "
        f"(lab/probe.py): {capacity_text(drift)}. A speedup is also given on whole cores, the figure that "
        "transfers to a rerun on the same machine: divided by the share of a core its work got, timed by the "
        "work's own units inside the windows where its workers share nothing (each round, the time a unit took "
        "on the slowest worker against the baseline's; for threads under the GIL, which run one at a time, a "
        "unit's CPU time pooled over them: lab/workspeed.py), else by the probe (the share of a "
        f"core per busy CPU, its median over the job's rounds).{cost}"
        + (f" {events}" if (events := vm_events_text(vm or {})) else "")
    )


def _steal_text(c: dict) -> str:
    """The steal row: the median over every measured window, and where any window had at
    least :data:`analysis.capacity.STEAL_PCT` %, how many and the most (a check that met it in
    its own windows, such as the sampler's, then reads against the run's figure)."""
    text = f"{c['steal_pct_median']:.1f}% of the CPUs' time"
    many, most = c.get("steal_windows") or 0, c.get("steal_pct_max")
    if many and most is not None:
        text += f"; {STEAL_PCT:.0f}% or more in {many} of {c.get('windows')} windows, up to {most:.0f}%"
    return text


def capacity_rows(host: dict, run: dict) -> list[tuple[str, str]]:
    """Label/value pairs of what limited the CPUs, measured (host.json ``capacity``, run.json
    ``contention``), each with the reason where it could not be read."""
    cap = host.get("capacity") or {}
    why = cap.get("unreadable") or {}
    c = run.get("contention") or {}
    quota = host.get("cgroup_quota_cpus")
    quota_text = (
        f"{cpus_text(quota)}, set by cgroup {host.get('cgroup_quota_cgroup')}"
        if quota
        else f"unreadable: {why['quota']}"
        if "quota" in why
        else f"none (cgroup {cap.get('cgroup_version') or '?'} {cap.get('own_cgroup') or ''} and its parents)"
    )
    groups = cap.get("smt_groups")
    cores = f"{cap.get('cores')} core{'s' if cap.get('cores') != 1 else ''}"
    smt = (
        f"unreadable: {why['smt']}"
        if groups is None and "smt" in why
        else ", ".join("{" + ",".join(map(str, g)) + "}" for g in groups or []) + f" ({cores})"
    )
    freq = cap.get("cpu_freq_mhz")
    vm = run.get("vm_events") or {"unreadable": "not recorded (a run.json from before the lab read the kernel log)"}
    events = "; ".join(f"{_at(e['at_s'])} into the measurement phase: {e['event']}" for e in vm.get("events") or [])
    steal = c.get("steal_pct_median")
    pipeline = c.get("pipeline_cpu_median")
    throttled = c.get("throttled_s")
    return [
        ("CPU quota of the pipeline's cgroup", quota_text),
        (
            "Available CPUs by core (SMT siblings together)",
            smt if groups is not None or "smt" in why else "not recorded",
        ),
        ("CPU frequency", f"{freq:.0f} MHz" if freq else f"unreadable: {why.get('cpu_freq_mhz', 'not recorded')}"),
        (
            "The VM restored from a snapshot or cloned (kernel log)",
            f"unreadable: {vm['unreadable']}" if vm.get("unreadable") else events or "not during the measurement phase",
        ),
        (
            "Steal time in measured windows (median)",
            _steal_text(c) if steal is not None else "unreadable",
        ),
        (
            "Quota throttling in measured windows",
            f"{throttled:.2f} s in all"
            if throttled is not None
            else ("unreadable (no cpu.stat counter)" if quota else "no quota"),
        ),
        (
            "The pipeline's own Snakemake, shell and supervisor in measured windows (median)",
            f"{pipeline:.2f} CPU (not counted as other processes)" if pipeline is not None else "not recorded",
        ),
    ]


def _named(others: pd.DataFrame | None) -> list[dict]:
    """The report's rows of interference.csv: its first 5 processes (most CPU time first), as text."""
    return [
        {
            "pid": int(r["pid"]),
            "name": r["name"],
            "cmdline": r["cmdline"],
            "cpu_s": f"{r['cpu_s']:.1f}",  # what ranks them (interference.csv: most CPU time first)
            "cpu": f"{r['cpu_pct_median'] / 100:.2f}",
            "cpu_max": f"{r['cpu_pct_max'] / 100:.2f}",
            "points": int(r["points"]),
            "windows": int(r["windows"]),
            "labels": r["labels"],
        }
        for _, r in (others if others is not None else pd.DataFrame()).head(5).iterrows()
    ]


def trust_context(
    fidelity: pd.DataFrame, run: dict, exps: list[dict], now_unix: float, others: pd.DataFrame | None = None
) -> dict:
    """The "Can these numbers be trusted?" section: fidelity checks, flags, contention (with
    the other processes of ``interference.csv`` named), points that stopped on the time budget,
    and run timing."""
    checks = []
    for _, r in fidelity.iterrows():
        measured = ""
        if math.isfinite(r["measured"]):
            unit = "% of one CPU" if "cost" in r["check"] else "%" if "sampler" in r["check"] else "x"
            unit = "ms" if str(r["expected"]).endswith(" ms") else unit
            sep = "" if unit.startswith("%") else " "  # 2.59% of one CPU, 5.3 ms, as the rest of the report
            measured = f"{bound(r['measured'])}x" if unit == "x" else f"{_fmt(r['measured'])}{sep}{unit}"
            if math.isfinite(r["ci_low"]):
                measured += f" (95% CI {bound(r['ci_low'])}-{bound(r['ci_high'])})"
        checks.append({k: r[k] for k in ("check", "expected", "verdict", "reason")} | {"measured": measured})
    flags = [row[-1] for e in exps for row in e["table"]["rows"]]
    problems = [
        {"experiment": e["name"]} | {k: p[k] for k in ("point", "status", "reason", "points")}
        for e in exps
        for p in e["problems"]
    ]
    named = _named(others)
    budget = [{"experiment": e["name"], **b} for e in exps for b in e.get("budget_stopped", [])]
    contended, measured = sum("contended" in f for f in flags), len(flags) - sum(p["points"] for p in problems)
    return {
        "others": named,
        "contention": contention_text(
            run.get("contention") or {}, named, run.get("available_cpus"), contended, measured
        ),
        "budget_stopped": budget,
        "problems": problems,
        "checks": checks,
        "passed": int((fidelity["verdict"] == "pass").sum()),
        "warned": int((fidelity["verdict"] == "warn").sum()),
        "measurement_phase": f"{run['measurement_phase_s']:.0f} s",
        "total": f"{now_unix - run['start_unix']:.0f} s",
        "measured_share": f"{run['measured_share_pct']:.0f}%",
        "probe_share": _share(run, "probe_s"),
        "upfront_share": _share(run, "upfront_s"),
        "jobs": run["measurement_jobs"],
        "overhead_per_job": f"{run['overhead_per_job_s']:.1f} s",
        "between_jobs": f"{run['measurement_phase_s'] - run['job_s']:.0f} s",
        "noisy": sum("noisy" in f for f in flags),
        "contended": contended,
        "points": measured,
    }
