"""Command line of the analysis: ``python -m analysis summarise|figure ...``.

``summarise --experiment E --out-dir D [--host-json H] METRICS...`` validates every point's
metrics.csv and writes D/replicates.csv, D/summary.csv, D/spans.csv, D/samples.csv and
D/findings.json. ``figure NAME --host-dir results/<host> --out F.png`` draws one figure.
``trace NAME --host-dir results/<host> --out T.json`` exports a timeline as Chrome trace JSON.
``runinfo ... --jobs-csv J`` also writes every job's phases and measured windows.
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


def cmd_figure(args) -> int:
    from analysis.figures import DRAW

    fig = DRAW[args.name](**_figure_data(args.name, Path(args.host_dir), FIGURES[args.name]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, bbox_inches="tight", metadata={"Software": None})
    tmp.replace(out)
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


def cmd_fidelity(args) -> int:
    from analysis.fidelity import checks

    host = json.loads(Path(args.host_json).read_text())
    read = lambda p: pd.read_csv(p) if p else None  # noqa: E731
    table = checks(
        read(args.gil), read(args.intraop), read(args.selfcheck), int(host["available_cpus"]), args.sample_hz
    )
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
    args = p.parse_args(argv)
    commands = {
        "summarise": cmd_summarise,
        "figure": cmd_figure,
        "trace": cmd_trace,
        "fidelity": cmd_fidelity,
        "runinfo": cmd_runinfo,
    }
    try:
        return commands[args.cmd](args)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
