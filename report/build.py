"""Build the report's data model from analysis outputs and host metadata (no rendering here).

:func:`build_context` reads ``results/<host>/host.json`` and, per experiment,
``summary.csv`` and ``findings.json`` plus the figure PNGs and the presence of its Chrome
trace, and ``fidelity.csv`` and ``run.json``, and returns a plain dict of
already-formatted strings for the templates. It reads nothing else.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from pathlib import Path

import pandas as pd
import yaml

from analysis.spec import SPECS

SECTIONS = yaml.safe_load((Path(__file__).with_name("sections.yaml")).read_text())

NUMERIC = ("measured", "ci_low", "ci_high")

UNITS = {"tasks_per_s": "tasks/s", "samples_per_s": "samples/s", "gflop_per_s": "GFLOP/s"}


def _fmt(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, (bool,)):
        return "yes" if v else ""
    if isinstance(v, (int,)) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1000):
        return f"{int(v):,}"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if 0 < abs(v) < 0.001:
            return "< 0.001"
        return f"{v:.{digits}g}"
    return str(v)


def _flag(v) -> bool:
    return str(v) == "True" or v is True


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


def summary_table(summary: pd.DataFrame, experiment: str) -> dict:
    """Columns and formatted rows of an experiment's summary table."""
    spec = SPECS[experiment]
    metric = summary["metric"].dropna().iloc[0] if summary["metric"].notna().any() else ""
    multi_metric = summary["metric"].nunique() > 1
    cols = list(spec.keys)
    if multi_metric:
        cols.append("unit")
    cols += [
        "n",
        f"median{'' if multi_metric else ' (' + UNITS.get(metric, metric) + ')'}",
        "IQR",
        "95% CI",
        "baseline, same job",
        "speedup (95% CI)",
    ]
    if spec.units:
        cols.append("efficiency")
    extra = {
        "data_stall_pct": "data stall %",
        "latency_ms": "latency ms",
        "first_call_s": "first call s",
        "setup_s": "setup s",
    }
    cols += [extra[c] for c in spec.extra_medians if c in extra]
    cols += ["CPU util %", "flags"]
    rows = []
    for _, r in summary.iterrows():
        row = [_fmt(r[k]) for k in spec.keys]
        if multi_metric:
            row.append(UNITS.get(r["metric"], r["metric"]))
        if r["status"] != "ok":
            # n = 0, the status where the median would be, the reason in the flags column
            reason = "" if pd.isna(r.get("reason")) else str(r.get("reason"))
            row += ["0", str(r["status"])] + [""] * (len(cols) - len(row) - 3) + [f"{r['status']}: {reason}"]
            rows.append(row)
            continue
        ci = f"{_fmt(r['ci_low'])} - {_fmt(r['ci_high'])}" if math.isfinite(r["ci_low"]) else ""
        sp = _fmt(r["speedup"], 3) + "x" if math.isfinite(r["speedup"]) else ""
        if math.isfinite(r.get("speedup_ci_low", float("nan"))):
            sp += f" ({r['speedup_ci_low']:.2f}-{r['speedup_ci_high']:.2f})"
        row += [str(int(r["n"])), _fmt(r["median"]), _fmt(r["iqr"]), ci, _fmt(r.get("baseline_median")), sp]
        if spec.units:
            row.append(f"{r['parallel_efficiency']:.0%}" if math.isfinite(r["parallel_efficiency"]) else "")
        row += [_fmt(r[c]) for c in spec.extra_medians if c in extra]
        flags = [name for name in ("best", "noisy", "contended", "oversubscribed") if _flag(r.get(name))]
        if str(r.get("worker_warning", "") or "") not in ("", "nan"):
            flags.append("worker warning")
        if "allclose" in r and str(r["allclose"]) == "False":
            flags.append("output differs from eager")
        row += [_fmt(r["cpu_util_pct"], 3), ", ".join(flags)]
        rows.append(row)
    return {"columns": cols, "rows": rows}


def trust_context(fidelity: pd.DataFrame, run: dict, exps: list[dict], now_unix: float) -> dict:
    """The "Can these numbers be trusted?" section: fidelity checks, flags and run timing."""
    checks = []
    for _, r in fidelity.iterrows():
        measured = ""
        if math.isfinite(r["measured"]):
            unit = "% of one CPU" if "cost" in r["check"] else "%" if "sampler" in r["check"] else "x"
            measured = _fmt(r["measured"]) + (unit if unit == "x" else f" {unit}")
            if math.isfinite(r["ci_low"]):
                measured += f" (95% CI {r['ci_low']:.2f}-{r['ci_high']:.2f})"
        checks.append({k: r[k] for k in ("check", "expected", "verdict", "reason")} | {"measured": measured})
    flags = [row[-1] for e in exps for row in e["table"]["rows"]]
    problems = [
        {"experiment": e["name"], "point": p["point"], "status": p["status"], "reason": p["reason"]}
        for e in exps
        for p in e["problems"]
    ]
    return {
        "problems": problems,
        "checks": checks,
        "passed": int((fidelity["verdict"] == "pass").sum()),
        "warned": int((fidelity["verdict"] == "warn").sum()),
        "measurement_phase": f"{run['measurement_phase_s']:.0f} s",
        "total": f"{now_unix - run['start_unix']:.0f} s",
        "measured_share": f"{run['measured_share_pct']:.0f}%",
        "jobs": run["measurement_jobs"],
        "overhead_per_job": f"{run['overhead_per_job_s']:.1f} s",
        "between_jobs": f"{run['measurement_phase_s'] - run['job_s']:.0f} s",
        "noisy": sum("noisy" in f for f in flags),
        "contended": sum("contended" in f for f in flags),
        "points": len(flags),
    }


def figure(host_dir: Path, name: str) -> dict:
    """One figure for the templates: ``name``, ``file`` (relative to host_dir, for Markdown),
    ``data_uri`` (the PNG inlined, for the self-contained HTML), ``caption`` and ``alt``.

    Raises:
        FileNotFoundError: if the PNG is missing.
        KeyError: if sections.yaml has no caption and alt text for ``name``.
    """
    path = host_dir / "figures" / f"{name}.png"
    text = SECTIONS["figures"][name]
    return {
        "name": name,
        "file": f"figures/{name}.png",
        "data_uri": "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii"),
        "caption": text["caption"],
        "alt": text["alt"],
    }


def build_context(host_dir: str | Path, experiments: list[str]) -> dict:
    """The report's data model.

    Args:
        host_dir: ``results/<host>``.
        experiments: experiment names, in report order.

    Returns:
        ``{"host", "environment", "parallel_info", "generated", "experiments": [...]}``, each
        experiment with ``name, title, question, what, why, findings, seed_comparison, table,
        figures, trace`` (``figures``: see :func:`figure`; ``trace``: path of its Chrome trace
        relative to host_dir, or None); ``trust`` also has ``schedule`` (the job-schedule
        figure or None) and ``trace`` (``traces/jobs.json`` or None).

    Raises:
        FileNotFoundError: naming the missing analysis output.
    """
    host_dir = Path(host_dir)
    host = json.loads((host_dir / "host.json").read_text())
    exps = []
    for name in experiments:
        spec = SPECS[name]
        summary = pd.read_csv(host_dir / name / "summary.csv")
        found = json.loads((host_dir / name / "findings.json").read_text())
        figures = [figure(host_dir, fig) for fig in spec.figures]
        trace = host_dir / "traces" / f"{name}.json"
        seed = [
            {
                "workload": r["workload"],
                "seed": f"{r['seed_sequential_s']:.2f} s vs {r['seed_threads_s']:.2f} s = {r['seed_speedup']:.2f}x",
                "here": f"{r['speedup']:.2f}x"
                + (
                    f" (95% CI {r['speedup_ci_low']:.2f}-{r['speedup_ci_high']:.2f})"
                    if r["speedup_ci_low"] is not None and math.isfinite(r["speedup_ci_low"])
                    else ""
                ),
                "workers": r["workers"],
                "seed_machine": r["seed_machine"],
            }
            for r in found.get("seed_comparison", [])
        ]
        problems = [
            {
                "point": " ".join(f"{k}={r[k]}" for k in spec.keys),
                "status": str(r["status"]),
                "reason": "" if pd.isna(r.get("reason")) else str(r.get("reason")),
            }
            for _, r in summary.iterrows()
            if r["status"] != "ok"
        ]
        exps.append(
            {
                "name": name,
                "problems": problems,
                "title": SECTIONS[name]["title"],
                "question": spec.question,
                "what": SECTIONS[name]["what"],
                "why": SECTIONS[name]["why"],
                "findings": found["findings"],
                "seed_comparison": seed,
                "table": summary_table(summary, name),
                "figures": figures,
                "trace": f"traces/{name}.json" if trace.exists() else None,
            }
        )
    # keep the verdict "n/a" as text (pandas reads it as NaN by default)
    fidelity = pd.read_csv(host_dir / "fidelity.csv", keep_default_na=False, na_values={c: [""] for c in NUMERIC})
    run = json.loads((host_dir / "run.json").read_text())
    now = dt.datetime.now(dt.UTC)
    trust = trust_context(fidelity, run, exps, now.timestamp())
    trust["schedule"] = (
        figure(host_dir, "job_schedule") if (host_dir / "figures" / "job_schedule.png").exists() else None
    )
    trust["trace"] = "traces/jobs.json" if (host_dir / "traces" / "jobs.json").exists() else None
    return {
        "trust": trust,
        "host": host.get("host", host_dir.name),
        "cpu_model": host.get("cpu_model") or "unknown CPU",
        "available_cpus": host.get("available_cpus"),
        "environment": environment_rows(host),
        "parallel_info": host.get("torch_parallel_info", ""),
        "generated": now.strftime("%Y-%m-%d %H:%M UTC"),
        "experiments": exps,
    }
