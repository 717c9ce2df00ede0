"""Command line of the analysis: ``python -m analysis summarise|figure ...``.

``summarise --experiment E --out-dir D [--host-json H] METRICS...`` validates every point's
metrics.csv and writes D/replicates.csv, D/summary.csv, D/spans.csv, D/samples.csv and
D/findings.json. ``figure NAME --host-dir results/<host> --out F.png`` draws one figure.
``trace NAME --host-dir results/<host> --out T.json`` exports a timeline as Chrome trace JSON.
``runinfo ... --jobs-csv J`` also writes every job's phases and measured windows.
``compare --baseline B --experiments E... --out-dir D HOSTDIR...`` compares host directories
(D/environment.csv, D/comparison.csv, D/best.csv, D/hosts.json); ``compare-figure E
--compare-dir D --out F.png`` draws one experiment's comparison chart.
Invalid input exits with status 1 and a message naming file, row and column.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from analysis.findings import findings
from analysis.load import DataError, load_experiment, load_sidecars
from analysis.spec import FIGURES, SPECS, TIMELINES
from analysis.stats import summarise


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)


def _write_json(obj, path: Path) -> None:
    """Write ``obj`` as JSON atomically, NaN and infinities as null."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_finite(obj), indent=2, allow_nan=False))
    tmp.replace(path)


def _finite(obj):
    """NaN and infinities become null: JSON has no NaN."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def cmd_summarise(args) -> int:
    spec = SPECS[args.experiment]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    reps = load_experiment(args.metrics, args.experiment)
    summary = summarise(reps, args.experiment)
    host = json.loads(Path(args.host_json).read_text()) if args.host_json else {}
    host.setdefault("available_cpus", int(reps["available_cpus"].max()) if "available_cpus" in reps else None)
    _write_csv(load_sidecars(args.metrics, "spans.csv", spec.keys, reps), out / "spans.csv")
    _write_csv(load_sidecars(args.metrics, "samples.csv", spec.keys, reps), out / "samples.csv")
    _write_csv(reps, out / "replicates.csv")
    _write_csv(summary, out / "summary.csv")
    result = findings(args.experiment, summary, host)
    _write_json(result, out / "findings.json")
    for line in result["findings"]:
        print(line, file=sys.stderr)
    return 0


def _figure_data(name: str, host_dir: Path, experiment: str | None) -> dict:
    """Read what figure ``name``'s drawing function asks for by parameter name."""
    import inspect

    from analysis.figures import DRAW

    wanted = inspect.signature(DRAW[name]).parameters
    files = {"jobs": host_dir / "jobs.csv"}
    if experiment:
        files |= {k: host_dir / experiment / f"{k}.csv" for k in ("summary", "spans", "samples", "replicates")}
    data = {}
    for key in wanted:
        if key == "host":
            data["host"] = json.loads((host_dir / "host.json").read_text())
        elif key in files:
            data[key] = pd.read_csv(files[key])
        else:
            raise TypeError(f"figure {name}: no data called {key!r}")
    return data


def _save_figure(fig, out: Path) -> None:
    """Save a matplotlib Figure as PNG atomically (no timestamp metadata), creating the folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, bbox_inches="tight", metadata={"Software": None})
    tmp.replace(out)


def cmd_figure(args) -> int:
    from analysis.figures import DRAW

    fig = DRAW[args.name](**_figure_data(args.name, Path(args.host_dir), FIGURES[args.name]))
    _save_figure(fig, Path(args.out))
    return 0


def cmd_trace(args) -> int:
    from analysis.trace import experiment_trace, jobs_trace, validate_trace

    host_dir = Path(args.host_dir)
    if args.name == "jobs":
        trace = jobs_trace(pd.read_csv(host_dir / "jobs.csv"), host_dir.name)
    else:
        d = host_dir / args.name
        trace = experiment_trace(args.name, pd.read_csv(d / "spans.csv"), pd.read_csv(d / "samples.csv"))
    n = validate_trace(trace)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    _write_json(trace, Path(args.out))
    print(f"{n} trace events", file=sys.stderr)
    return 0


def cmd_status(args) -> int:
    """Write every point's status; exit 1 naming the failed and timed-out points."""
    spec_rows = []
    for path in args.summaries:
        s = pd.read_csv(path)
        if s.empty:
            continue
        spec = SPECS[str(s["experiment"].iloc[0])]
        for _, r in s.iterrows():
            point = "/".join(f"{k}~{r[k]}" for k in spec.keys)
            spec_rows.append(
                {
                    "experiment": spec.name,
                    "point": point,
                    "status": r["status"],
                    "reason": "" if pd.isna(r.get("reason")) else str(r.get("reason")),
                    "metrics": str(Path(path).parent / point / "metrics.csv"),
                }
            )
    table = pd.DataFrame(spec_rows, columns=["experiment", "point", "status", "reason", "metrics"])
    _write_csv(table, Path(args.out))
    bad = table[table["status"].isin(["failed", "timeout"])]
    skipped = table[table["status"] == "skipped"]
    print(
        f"{len(table)} points: {len(table) - len(bad) - len(skipped)} ok, {len(skipped)} skipped,"
        f" {len(bad)} failed or timed out",
        file=sys.stderr,
    )
    if len(bad):
        for _, r in bad.iterrows():
            print(f"  {r['status']}: {r['experiment']} {r['point']}: {r['reason']}", file=sys.stderr)
        host = Path(args.summaries[0]).parent.parent.name
        print(
            "The report lists them. Measure them again with (add the --configfile you ran with): "
            f"snakemake --cores 4 --forcerun {' '.join(bad['metrics'])} --config host={host}",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_config(args) -> int:
    import yaml

    config = json.loads(args.json)
    out = Path(args.out)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(
        "# Configuration this host's results were measured with (written by the workflow).\n"
        + yaml.safe_dump(config, sort_keys=False)
    )
    tmp.replace(out)
    return 0


def cmd_compare(args) -> int:
    from analysis.compare import compare_hosts, load_host

    hosts = [load_host(d, args.experiments) for d in args.host_dirs]
    tables = compare_hosts(hosts, args.baseline, args.experiments)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        _write_csv(df, out / f"{name}.csv")
    meta = {
        "baseline": args.baseline,
        "experiments": args.experiments,
        "hosts": [{"name": h.name, "path": str(h.path), "available_cpus": h.cpus, "host": h.host} for h in hosts],
    }
    _write_json(meta, out / "hosts.json")
    c = tables["comparison"]
    print(
        f"{(c['status'] == 'compared').sum()} compared, {(c['status'] == 'not comparable').sum()} not comparable",
        file=sys.stderr,
    )
    return 0


def cmd_compare_figure(args) -> int:
    from analysis.figures import compare_chart

    d = Path(args.compare_dir)
    meta = json.loads((d / "hosts.json").read_text())
    fig = compare_chart(pd.read_csv(d / "comparison.csv"), args.experiment, meta)
    _save_figure(fig, Path(args.out))
    return 0


#: Columns of the self-check's metrics that the fidelity checks read.
SELFCHECK_COLUMNS = ("load", "role", "sampler_tree_pct", "process_cpu_pct", "sampler_cpu_pct")


def cmd_fidelity(args) -> int:
    from analysis.fidelity import checks
    from analysis.load import DataError

    host = json.loads(Path(args.host_json).read_text())
    read = lambda p: pd.read_csv(p) if p else None  # noqa: E731
    selfcheck = read(args.selfcheck)
    if selfcheck is not None:
        for col in SELFCHECK_COLUMNS:
            if col not in selfcheck.columns:
                raise DataError(args.selfcheck, f"missing column (have: {', '.join(selfcheck.columns)})", column=col)
    table = checks(read(args.gil), read(args.intraop), selfcheck, int(host["available_cpus"]), args.sample_hz)
    _write_csv(table, Path(args.out))
    for _, r in table.iterrows():
        print(f"{r['verdict']:5} {r['check']}: {r['measured']:.3g} (expected {r['expected']})", file=sys.stderr)
    return 0


def cmd_runinfo(args) -> int:
    from analysis.runinfo import job_intervals, job_label, run_timing

    host = json.loads(Path(args.host_json).read_text())
    jobs = [json.loads(Path(p).read_text()) for p in args.jobs]
    metrics = [pd.read_csv(Path(p).with_name("metrics.csv")) for p in args.jobs]
    _write_json(run_timing(jobs, metrics, host), Path(args.out))
    if args.jobs_csv:
        _write_csv(job_intervals([job_label(p) for p in args.jobs], jobs, metrics), Path(args.jobs_csv))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summarise", help="validate and summarise one experiment's metrics")
    s.add_argument("--experiment", required=True, choices=sorted(SPECS))
    s.add_argument("--out-dir", required=True)
    s.add_argument("--host-json", default=None)
    s.add_argument("metrics", nargs="+", help="per-point metrics.csv files")
    f = sub.add_parser("figure", help="draw one figure")
    f.add_argument("name", choices=sorted(FIGURES))
    f.add_argument("--host-dir", required=True, help="results/<host>")
    f.add_argument("--out", required=True)
    t = sub.add_parser("trace", help="export a timeline as Chrome trace event JSON")
    t.add_argument("name", choices=[*TIMELINES, "jobs"], help="an experiment with spans, or jobs (the job schedule)")
    t.add_argument("--host-dir", required=True, help="results/<host>")
    t.add_argument("--out", required=True)
    fi = sub.add_parser("fidelity", help="compare measured ratios with theory (fidelity.csv)")
    fi.add_argument("--host-json", required=True)
    fi.add_argument("--gil", default=None, help="gil summary.csv")
    fi.add_argument("--intraop", default=None, help="intraop summary.csv")
    fi.add_argument("--selfcheck", default=None, help="selfcheck metrics.csv")
    fi.add_argument("--sample-hz", type=float, required=True)
    fi.add_argument("--out", required=True)
    ri = sub.add_parser("runinfo", help="run duration and share inside measured windows (run.json)")
    ri.add_argument("--host-json", required=True)
    ri.add_argument("--out", required=True)
    ri.add_argument("--jobs-csv", default=None, help="also write every job's phases and windows (jobs.csv)")
    ri.add_argument("jobs", nargs="+", help="job.json of every measurement job")
    st = sub.add_parser("status", help="every point's status (status.csv); exit 1 if any failed or timed out")
    st.add_argument("--out", required=True)
    st.add_argument("summaries", nargs="+", help="summary.csv of every experiment")
    cfg = sub.add_parser("config", help="write the run's configuration (JSON) as YAML")
    cfg.add_argument("--json", required=True, help="the configuration as a JSON object")
    cfg.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="compare host directories against a baseline host")
    c.add_argument("--baseline", required=True, help="name (directory name) of the baseline host")
    c.add_argument("--experiments", nargs="+", required=True, choices=sorted(SPECS))
    c.add_argument("--out-dir", required=True)
    c.add_argument("host_dirs", nargs="+", help="results/<host> directories")
    cf = sub.add_parser("compare-figure", help="draw one experiment's comparison chart")
    cf.add_argument("experiment", choices=sorted(SPECS))
    cf.add_argument("--compare-dir", required=True)
    cf.add_argument("--out", required=True)
    args = p.parse_args(argv)
    commands = {
        "summarise": cmd_summarise,
        "figure": cmd_figure,
        "trace": cmd_trace,
        "fidelity": cmd_fidelity,
        "runinfo": cmd_runinfo,
        "config": cmd_config,
        "status": cmd_status,
        "compare": cmd_compare,
        "compare-figure": cmd_compare_figure,
    }
    try:
        return commands[args.cmd](args)
    except (DataError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
