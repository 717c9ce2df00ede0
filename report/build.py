"""Build the report's data model from analysis outputs and host metadata (no rendering here).

:func:`build_context` reads ``results/<host>/host.json`` and, per experiment,
``summary.csv`` and ``findings.json`` plus the figure PNGs and the presence of its Chrome
trace, and ``fidelity.csv`` and ``run.json``, and returns a plain dict of
already-formatted strings for the templates. It reads no other result. What an experiment's
section says (title, question, what, why, figure captions and alt texts) and how its table is
laid out (metric units, extra columns, flags) come from its package through
:mod:`lab.registry`; the report's own prose is ``report/sections.yaml``.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
from pathlib import Path

import pandas as pd
import yaml

from analysis.capacity import cpus_text
from analysis.findings import INTERVALS, bound, interval
from analysis.tables import read_table
from lab import registry
from lab.declare import point_label
from lab.fileio import read_findings, read_json_object
from lab.host import Host
from lab.interpreters import describe
from report.format import fmt as _fmt
from report.trust import capacity_paragraph, capacity_rows, headlines, trust_context

#: The report's own prose: captions of the figures of the whole run, the comparison's caption.
SECTIONS = yaml.safe_load((Path(__file__).with_name("sections.yaml")).read_text(encoding="utf-8"))

#: Flags every summary carries, in the order the flags column lists them.
COMMON_FLAGS = ("best", "noisy", "contended", "oversubscribed", "other_node")


def interpreter_rows(entries: list[dict]) -> list[tuple[str, str]]:
    """Label/value pairs, one per configured interpreter (``interpreters.json``): what it is,
    its build and GIL state, and where it was found."""
    rows = []
    for e in entries:
        where = e.get("executable") or e.get("path") or e.get("command") or ""
        rows.append((f"interpreter {e['label']}", f"{describe(e)}" + (f"; {where}" if where and e.get("ok") else "")))
    return rows


def user_env_rows(env: dict, interpreters: list[dict] = ()) -> list[tuple[str, str]]:
    """Label/value pairs of the user's shell (``user_env.json``; empty when absent): its thread
    variables, what torch made of them, and a ``PYTHON_GIL`` it set, which the measured
    interpreters did not apply (they start with ``-I``), with the GIL each label ran under
    instead (``interpreters.json``) and how to set it per label."""
    if not env:
        return []
    variables = dict(env.get("variables") or {})
    shell_gil = variables.pop("PYTHON_GIL", None)
    text = ", ".join(f"{k}={v}" for k, v in variables.items()) or "none"
    rows = [
        ("Thread variables of your shell", text),
        (
            "torch intra-op / inter-op threads in your shell (measured)",
            f"{env.get('torch_threads')} / {env.get('torch_interop_threads')}",
        ),
    ]
    if shell_gil is not None:
        ran = [
            f"{e['label']} GIL {'on' if e.get('gil_enabled') else 'off'}"
            for e in interpreters
            if e.get("ok") and e.get("free_threaded")
        ]
        rows.append(
            (
                "PYTHON_GIL of your shell",
                f"PYTHON_GIL={shell_gil} was set and not applied: the measured interpreters start with -I, which"
                " ignores PYTHON* variables"
                + (f" ({', '.join(ran)})" if ran else "")
                + "; set the GIL per label in config interpreters, e.g."
                " {label: 3.13t-gil, command: ..., python_gil: 1}",
            )
        )
    return rows


def _sysctls(settings) -> str:
    """``name=value, ...`` of host.json's ``scheduler`` (``sched_`` dropped from each name);
    "not recorded" for a host.json from before the lab read them, "none readable" for ``{}``."""
    if settings is None:
        return "not recorded"
    return ", ".join(f"{k.removeprefix('sched_')}={v}" for k, v in settings.items()) or "none readable"


def environment_rows(host: dict) -> list[tuple[str, str]]:
    """Label/value pairs for the environment table, from host.json."""
    par = host.get("torch_parallel") or {}
    isa = host.get("isa") or {}
    return [
        ("Host label", host.get("host", "")),
        ("CPU model", host.get("cpu_model") or "unknown"),
        ("Logical CPUs / physical cores", f"{host.get('logical_cpus')} / {host.get('physical_cores')}"),
        ("Available CPUs (affinity)", str(host.get("available_cpus"))),
        ("cgroup CPU quota (CPUs)", _fmt(host.get("cgroup_quota_cpus")) or "none"),
        ("ISA flags", ", ".join(k for k, v in isa.items() if v) or "none of interest"),
        ("Memory", f"{host.get('memory_gib')} GiB"),
        ("OS", host.get("os", "")),
        ("Kernel scheduler settings (kernel.sched_*)", _sysctls(host.get("scheduler"))),
        (
            "Python",
            f"{host.get('python_implementation', '')} {host.get('python_version', '')}"
            f" (GIL {'enabled' if host.get('gil_enabled', True) else 'disabled'})",
        ),
        ("torch", host.get("torch_version", "")),
        ("ATen parallel backend", str(par.get("aten_parallel_backend"))),
        ("Intra-op / inter-op threads (default)", f"{par.get('at_num_threads')} / {par.get('at_num_interop_threads')}"),
        ("OpenMP / MKL max threads", f"{par.get('omp_max_threads')} / {par.get('mkl_max_threads')}"),
        ("MKL", str(par.get("mkl_version"))),
        ("oneDNN", str(par.get("onednn_version"))),
        ("Load average before the run (1, 5, 15 min)", ", ".join(f"{x:.2f}" for x in host.get("load_avg_1_5_15", []))),
        ("Git commit", str(host.get("git_commit"))),
    ]


def _columns(spec, multi_metric: bool, metric: str) -> list[str]:
    cols = list(spec.keys) + (["unit"] if multi_metric else [])
    unit = "" if multi_metric else f" ({spec.unit(metric)})"
    cols += ["n", f"median{unit}", "IQR", "95% CI", "baseline, same job", "speedup (95% CI)", "a rerun (95%)"]
    cols += ["efficiency"] if spec.parallel_units else []
    cols += [c.header for c in spec.extra_columns if c.in_table]
    return cols + ["CPU util %", "flags"]


def _is_true(v) -> bool:
    return v is not None and not pd.isna(v) and bool(v)


def _flags(spec, r: pd.Series) -> str:
    """The flags column of one point: the common flags (``best`` saying so where it is the
    baseline, kept since no point's CI cleared it; ``contended`` naming the process that
    took the most CPU, ``oversubscribed`` with the share of the time a task waited for a CPU
    where the kernel measured it, ``stopped on budget`` where the rounds ended with the interval
    still wider than the target), then the experiment's declared ones."""
    flags = [name.replace("other_node", "on another node model") for name in COMMON_FLAGS if _is_true(r.get(name))]
    if "best" in flags and r.get("speedup_source") == "baseline":  # kept: no point's CI cleared it
        flags[flags.index("best")] = "best (the baseline: no point clearly faster)"
    pid = r.get("top_other_pid")
    if "contended" in flags and pid is not None and not pd.isna(pid):
        flags[flags.index("contended")] = f"contended (pid {int(pid)} {str(r.get('top_other') or '').split(' ')[0]})"
    wait = r.get("cpu_wait_pct")
    if "oversubscribed" in flags and wait is not None and not pd.isna(wait):  # the kernel's CPU pressure
        flags[flags.index("oversubscribed")] = f"oversubscribed (threads waited for a CPU {wait:.0f}% of the time)"
    if r.get("rounds_stopped") in ("budget", "max_rounds"):
        flags.append(f"stopped on {str(r['rounds_stopped']).replace('_', ' ')}")
    flags += [flag.label for flag in spec.flags if not pd.isna(r.get(flag.column)) and flag.raised(r.get(flag.column))]
    return ", ".join(flags)


def _measured_cells(spec, r: pd.Series) -> list[str]:
    ci = f"{_fmt(r['ci_low'])} - {_fmt(r['ci_high'])}" if math.isfinite(r["ci_low"]) else ""
    sp = bound(r["speedup"]) + "x" if math.isfinite(r["speedup"]) else ""
    if math.isfinite(r.get("speedup_ci_low", float("nan"))):
        sp += f" ({bound(r['speedup_ci_low'])}-{bound(r['speedup_ci_high'])})"
    iv = interval(r, "rerun") if r.get("speedup_source") != "baseline" else None
    rerun = f"{bound(iv[0])}-{bound(iv[1])}" if iv else ""
    row = [str(int(r["n"])), _fmt(r["median"]), _fmt(r["iqr"]), ci, _fmt(r.get("baseline_median")), sp, rerun]
    if spec.parallel_units:
        row.append(f"{r['parallel_efficiency']:.0%}" if math.isfinite(r["parallel_efficiency"]) else "")
    row += [_fmt(r[c.name]) for c in spec.extra_columns if c.in_table]
    flags = _flags(spec, r)
    why = r.get("reason")
    if not math.isfinite(r["median"]) and isinstance(why, str) and why:  # an ok row that says why it has none
        flags = f"{flags}; {why}" if flags else why
    return row + [_fmt(r["cpu_util_pct"], 3), flags]


def summary_table(summary: pd.DataFrame, experiment: str) -> dict:
    """Columns and formatted rows of an experiment's summary table."""
    spec = registry.get(experiment).spec
    metric = summary["metric"].dropna().iloc[0] if summary["metric"].notna().any() else ""
    multi_metric = summary["metric"].nunique() > 1
    cols = _columns(spec, multi_metric, metric)
    rows, above = [], None
    for _, r in summary.iterrows():
        row = [_fmt(r[k]) for k in spec.keys] + ([spec.unit(r["metric"])] if multi_metric else [])
        if r["status"] != "ok":
            # n = 0, the status where the median would be, the reason in the flags column (once
            # for the rows below that share it)
            why = f"{r['status']}: {r['reason']}"
            row += ["0", str(r["status"])] + [""] * (len(cols) - len(row) - 3) + [why if why != above else "as above"]
            above = why
        else:
            above = None
            row += _measured_cells(spec, r)
        rows.append(row)
    return {"columns": cols, "rows": rows}


def unmeasured(rows: pd.DataFrame, keys: list[str]) -> list[dict]:
    """The points of ``rows`` (summary rows whose status is not ok) as the report lists them:
    one entry per status and reason, ``{"point", "status", "reason", "points"}``, so a reason
    shared by several points (no native bfloat16, for each thread count) is written once.
    ``point`` names them in one label where they differ in one key (``workload=matmul_bf16
    threads=1, 2, 4``), else joins their labels with "; "; ``points`` counts them."""
    out = []
    for (status, reason), grp in rows.groupby(["status", "reason"], sort=False, dropna=False):
        points = [{k: r[k] for k in keys} for _, r in grp.iterrows()]
        varying = [k for k in keys if len({str(p[k]) for p in points}) > 1]
        if len(varying) == 1:
            parts = [
                f"{k}={', '.join(dict.fromkeys(str(p[k]) for p in points))}" if k in varying else f"{k}={points[0][k]}"
                for k in keys
            ]
            label = " ".join(parts)
        else:
            label = "; ".join(point_label(p) for p in points)
        out.append({"point": label, "status": str(status), "reason": reason, "points": len(points)})
    return out


def _ci_text(r: pd.Series) -> str:
    """``1.93x (95% CI 1.85-2.01)`` of a point's speedup, or of its median for a baseline point
    (speedup 1 by definition) or one without a speedup."""
    if math.isfinite(r.get("speedup_ci_low", float("nan"))) and r.get("speedup_source") != "baseline":
        return f"{bound(r['speedup'])}x (95% CI {bound(r['speedup_ci_low'])}-{bound(r['speedup_ci_high'])})"
    if math.isfinite(r.get("ci_low", float("nan"))):
        return f"median {_fmt(r['median'])} (95% CI {_fmt(r['ci_low'])}-{_fmt(r['ci_high'])})"
    return "no 95% CI"


def figure(host_dir: Path, name: str, text: dict) -> dict:
    """One figure for the templates: ``name``, ``file`` (relative to host_dir, for Markdown),
    ``data_uri`` (the PNG inlined, for the self-contained HTML), ``caption`` and ``alt``.

    Args:
        text: ``{"caption", "alt"}`` of the figure.

    Raises:
        FileNotFoundError: if the PNG is missing.
    """
    path = host_dir / "figures" / f"{name}.png"
    return {
        "name": name,
        "file": f"figures/{name}.png",
        "data_uri": "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii"),
        "caption": text["caption"],
        "alt": text["alt"],
    }


def experiment_context(host_dir: Path, name: str) -> dict:
    """One experiment's section: its prose, findings, extra tables, figures, trace and table."""
    exp = registry.get(name)
    summary = read_table(host_dir / name / "summary.csv", name)
    found = read_findings(host_dir / name / "findings.json")
    problems = unmeasured(summary[summary["status"] != "ok"], list(exp.spec.keys))
    trace = host_dir / "traces" / f"{name}.json"
    stopped = (
        summary["rounds_stopped"].fillna("") if "rounds_stopped" in summary else pd.Series("", index=summary.index)
    )
    budget = [
        {
            "point": point_label({k: r[k] for k in exp.spec.keys}),
            "n": int(r["n"]),
            "ci": _ci_text(r),
            "why": str(stopped[i]).replace("_", " "),
        }
        for i, r in summary.iterrows()
        if stopped[i] in ("budget", "max_rounds")
    ]
    return {
        "name": name,
        "problems": problems,
        "budget_stopped": budget,
        **{k: exp.prose[k] for k in ("title", "question", "what", "why")},
        "findings": found["findings"],
        "tables": found.get("tables", []),
        "headlines": found.get("headlines", []),
        "table": summary_table(summary, name),
        "figures": [figure(host_dir, fig, exp.prose["figures"][fig]) for fig in exp.spec.all_figures],
        "trace": f"traces/{name}.json" if trace.exists() else None,
    }


def build_context(host_dir: str | Path, experiments: list[str]) -> dict:
    """The report's data model.

    Args:
        host_dir: ``results/<host>``.
        experiments: experiment names, in report order.

    Returns:
        ``{"host", "cpu_model", "available_cpus", "available_cpus_text" ("1 CPU", "2 CPUs"),
        "environment", "parallel_info", "generated",
        "trust", "experiments": [...]}``, each experiment with ``name, title, question, what,
        why, findings, tables, table, figures, trace, problems`` (``figures``: see
        :func:`figure`; ``tables``: extra tables of its findings; ``trace``: path of its Chrome
        trace relative to host_dir, or None); ``trust`` also has ``schedule`` (the job-schedule
        figure or None) and ``trace`` (``traces/jobs.json`` or None).

    Raises:
        FileNotFoundError: naming the missing analysis output or host.json.
        ValueError: for an experiment that is not registered, or a host.json whose
            ``available_cpus`` is no count (:meth:`lab.host.Host.from_files`).
    """
    host_dir = Path(host_dir)
    exps = [experiment_context(host_dir, name) for name in experiments]
    host = Host.load(host_dir, need_host_json=True)  # host.json (missing: an error), user_env, interpreters
    fidelity = read_table(host_dir / "fidelity.csv")
    run = read_json_object(host_dir / "run.json") | {"available_cpus": host.get("available_cpus")}
    now = dt.datetime.now(dt.UTC)
    others_file = host_dir / "interference.csv"
    others = read_table(others_file) if others_file.exists() else None
    trust = trust_context(fidelity, run, exps, now.timestamp(), others)
    trust["capacity"] = capacity_rows(host, run)
    env, interps = host.get("user_environment", {}), host.get("interpreters", [])
    schedule = host_dir / "figures" / "job_schedule.png"
    trust["schedule"] = (
        figure(host_dir, "job_schedule", SECTIONS["figures"]["job_schedule"]) if schedule.exists() else None
    )
    trust["trace"] = "traces/jobs.json" if (host_dir / "traces" / "jobs.json").exists() else None
    cap_fig = host_dir / "figures" / "run_capacity.png"
    trust["capacity_figure"] = (
        figure(host_dir, "run_capacity", SECTIONS["figures"]["run_capacity"]) if cap_fig.exists() else None
    )
    trust["capacity_text"] = capacity_paragraph(run.get("capacity") or {}, run.get("vm_events"))
    glance = headlines(exps, trust)
    return {
        "trust": trust,
        "host": host.label,
        "cpu_model": host.get("cpu_model") or "unknown CPU",
        "available_cpus": host.get("available_cpus"),
        "available_cpus_text": cpus_text(host.get("available_cpus")),
        "environment": environment_rows(host) + interpreter_rows(interps) + user_env_rows(env, interps),
        "headlines": glance,
        "rerun_intervals": any(INTERVALS["rerun"] in h["answer"] for h in glance),
        "parallel_info": host.get("torch_parallel_info", ""),
        "generated": now.strftime("%Y-%m-%d %H:%M UTC"),
        "experiments": exps,
    }
