"""Build the comparison report's data model from ``results/compare/`` (no rendering here).

:func:`build_compare_context` reads ``hosts.json``, ``environment.csv``, ``comparison.csv``,
``best.csv`` (written by ``python -m analysis compare``) and the figures
``figures/compare_<experiment>.png``, and returns plain, already formatted values for
``compare.html.j2`` and ``compare.md.j2``. It reads nothing else.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
from pathlib import Path

import pandas as pd

from analysis.findings import bound
from analysis.tables import read_table
from lab import registry
from lab.fileio import read_json_object
from report.build import SECTIONS
from report.format import fmt as _fmt


def _ci(lo, hi, digits: int = 3) -> str:
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    return f"{_fmt(lo, digits)} - {_fmt(hi, digits)}"


def _x(v, lo=None, hi=None) -> str:
    if v is None or not math.isfinite(v):
        return ""
    text = f"{bound(v)}x"
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        text += f" ({bound(lo)}-{bound(hi)})"
    return text


def experiment_table(c: pd.DataFrame, hosts: list[str]) -> dict:
    """Rows per point: for each host its median (95% CI), per available CPU, its own speedup
    (and on whole cores, where its capacity probe ran), and for non-baseline hosts the ratio to
    the baseline host (95% CI; per CPU), p-value and verdict. No ratio is put at equal one-CPU
    speed (:mod:`analysis.compare` says why)."""
    points = [p for p in dict.fromkeys(c["point"].fillna("")) if p]
    cols = [
        "point",
        "host",
        "n",
        "median (95% CI)",
        "per available CPU",
        "own speedup (95% CI)",
        "on whole cores",
        "ratio to baseline host (95% CI)",
        "per CPU",
        "Mann-Whitney p",
        "verdict",
    ]
    rows = []
    for point in points:
        for host in hosts:
            r = c[(c["point"] == point) & (c["host"] == host)]
            if r.empty:
                continue
            r = r.iloc[0]
            unit = registry.get(r["experiment"]).spec.unit(r["metric"]) if r["metric"] else ""
            median = f"{_fmt(r['median'])} {unit}".strip() if math.isfinite(r["median"]) else ""
            if median and _ci(r["ci_low"], r["ci_high"]):
                median += f" ({_ci(r['ci_low'], r['ci_high'])})"
            verdict = {"baseline": "baseline host", "compared": r["verdict"]}.get(r["status"], "not comparable")
            if r["status"] == "not comparable":
                verdict += f": {r['reason']}"
            elif r["status"] == "compared" and isinstance(r.get("reason"), str) and "too few" in r["reason"]:
                verdict += f" ({r['reason']})"
            rows.append(
                [
                    point,
                    host,
                    "" if pd.isna(r["n"]) else _fmt(r["n"]),
                    median,
                    _fmt(r["median_per_cpu"]),
                    _x(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
                    _x(r.get("speedup_norm", math.nan), r.get("speedup_norm_ci_low"), r.get("speedup_norm_ci_high")),
                    _x(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"]),
                    _x(r["ratio_per_cpu"]),
                    f"{r['p_value']:.2g}" if math.isfinite(r["p_value"]) else "",
                    verdict,
                ]
            )
    missing = c[(c["point"].fillna("") == "") & (c["status"] == "not comparable")]
    notes = [f"{r['host']}: {r['reason']}" for _, r in missing.iterrows()]
    return {"columns": cols, "rows": rows, "notes": notes}


def _experiment(d: Path, exp: str, c: pd.DataFrame, hosts: list[str], baseline: str, tables: dict) -> dict:
    """One experiment's part of the comparison report: title, its own tables, the point table,
    counts and figure."""
    title = registry.get(exp).prose["title"]
    fig = d / "figures" / f"compare_{exp}.png"
    return {
        "name": exp,
        "title": title,
        "tables": tables.get(exp, []),
        "table": experiment_table(c, hosts),
        "compared": int((c["status"] == "compared").sum()),
        "not_comparable": int((c["status"] == "not comparable").sum()),
        "significant": int(c["verdict"].isin(["faster", "slower"]).sum()),
        "figure": {
            "file": f"figures/compare_{exp}.png",
            "data_uri": "data:image/png;base64," + base64.b64encode(fig.read_bytes()).decode("ascii"),
            "alt": f"{title}: each host's speedups and its throughput relative to "
            f"{baseline}, point by point, with confidence intervals",
            "caption": SECTIONS["compare_caption"],
        },
    }


def schema_versions(hosts: list[dict]) -> list[str]:
    """``["<host>: <version>", ...]`` where the hosts' results schema versions differ (``lab.
    SCHEMA_VERSION`` in their host.json; "none recorded" without one), else ``[]``: every point
    of a host whose version is not the baseline's is then not comparable, and the report says why
    once rather than only point by point."""
    versions = {h["name"]: (h.get("host") or {}).get("schema_version") for h in hosts}
    if len(set(versions.values())) < 2:
        return []
    return [f"{name}: {v if v is not None else 'none recorded'}" for name, v in versions.items()]


def build_compare_context(compare_dir: str | Path) -> dict:
    """The comparison report's data model.

    Returns:
        ``hosts`` (name, cpus, cpu_model), ``baseline``, ``environment`` (columns, rows with a
        ``differs`` flag), ``experiments`` (name, title, table, figure, counts: those at least
        one host ran), ``not_run`` (the titles of the experiments of the comparison that no
        host ran), ``schema_versions`` (:func:`schema_versions`), ``best`` rows, ``generated``.

    Raises:
        FileNotFoundError: naming the missing comparison output.
    """
    d = Path(compare_dir)
    meta = read_json_object(d / "hosts.json")
    hosts = [h["name"] for h in meta["hosts"]]
    env = read_table(d / "environment.csv", types=dict.fromkeys(hosts, "str"))
    comparison = read_table(d / "comparison.csv")
    best = read_table(d / "best.csv", types={"best": "str", "group": "str"})
    own = read_json_object(d / "tables.json") if (d / "tables.json").exists() else {}
    by_exp = {exp: comparison[comparison["experiment"] == exp] for exp in meta["experiments"]}
    # an experiment no host ran has no point to show: listed once, not drawn as an empty section
    ran = {exp: c for exp, c in by_exp.items() if (c["point"].fillna("") != "").any()}
    exps = [_experiment(d, exp, c, hosts, meta["baseline"], own) for exp, c in ran.items()]
    not_run = [registry.get(exp).prose["title"] for exp in by_exp if exp not in ran]
    best_rows = [
        [r["experiment"], r["group"], r["host"], r["best"], _x(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"])]
        + ["yes" if r["shifts"] else ""]
        for _, r in best.iterrows()
    ]
    return {
        "hosts": [
            {"name": h["name"], "cpus": h["available_cpus"], "cpu_model": h["host"].get("cpu_model") or "unknown CPU"}
            for h in meta["hosts"]
        ],
        "baseline": meta["baseline"],
        "environment": {
            "columns": ["field", *hosts],
            "rows": [
                {"cells": [r["field"], *[str(r[h]) for h in hosts]], "differs": bool(r["differs"])}
                for _, r in env.iterrows()
            ],
        },
        "experiments": exps,
        "not_run": not_run,
        "not_comparable": meta.get("not_comparable", []),
        "schema_versions": schema_versions(meta["hosts"]),
        "best": {
            "columns": ["experiment", "group", "host", "best", "speedup (95% CI)", "differs between hosts"],
            "rows": best_rows,
        },
        "method": SECTIONS["compare_method"],
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
