"""Command line of the analysis: ``python -m analysis summarise|figure|trace|... ``.

``summarise --experiment E --out-dir D [--host-json H] METRICS...`` validates every point's
metrics.csv and writes D/replicates.csv, D/summary.csv, D/spans.csv, D/samples.csv and
D/findings.json. ``figure NAME --host-dir results/<host> --out F.png`` draws one figure.
``trace NAME --host-dir results/<host> --out T.json`` exports a timeline as Chrome trace JSON.
``fidelity`` compares measured ratios with theory; ``runinfo ... --jobs-csv J`` writes the run's
timing and every job's phases and measured windows; ``status`` every point's status.
``compare --baseline B --experiments E... --out-dir D HOSTDIR...`` compares host directories
(D/environment.csv, D/comparison.csv, D/best.csv, D/hosts.json); ``compare-figure E
--compare-dir D --out F.png`` draws one experiment's comparison chart.
Experiments and figures are those of :mod:`lab.registry`. Invalid input exits with
status 1 and a message naming file, row and column.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd

from analysis.hooks import findings
from analysis.load import load_experiment, load_sidecars, mark_other_nodes
from analysis.stats import summarise
from analysis.tables import DataError, read_table
from lab import fileio, registry
from lab.fileio import output_dir_problem, output_file_problem, read_json_object, write_frame, write_json, write_text
from lab.host import Host
from lab.params import declaration, sample_hz_field


def cmd_summarise(args) -> int:
    out = Path(args.out_dir)
    # the host: its host.json, the user's shell (lab/userenv.py) and the interpreters the measured
    # code ran under (lab/interpreters.py), where given
    host = Host.from_files(out.parent.name, args.host_json, args.user_env, args.interpreters)
    reps = mark_other_nodes(load_experiment(args.metrics, args.experiment), host, args.allow_mixed_nodes)
    own = registry.get(args.experiment).hooks().summarise
    summary = own(reps) if own is not None else summarise(reps, args.experiment)
    jobs = [read_json_object(p) for p in (Path(m).with_name("job.json") for m in args.metrics) if p.exists()]
    if "available_cpus" not in host:  # no host.json: the CPUs the windows were measured against
        cpus = pd.to_numeric(reps.get("available_cpus", pd.Series(dtype=float)), errors="coerce").max()
        host = host.with_facts(available_cpus=int(cpus) if pd.notna(cpus) else None)
    spans = load_sidecars(args.metrics, "spans.csv", args.experiment, reps)
    write_frame(out / "spans.csv", spans)
    write_frame(out / "samples.csv", load_sidecars(args.metrics, "samples.csv", args.experiment, reps))
    write_frame(out / "replicates.csv", reps)
    write_frame(out / "summary.csv", summary)
    result = findings(args.experiment, summary, host, reps, jobs, spans)
    write_json(out / "findings.json", result)
    for line in result["findings"]:
        print(line, file=sys.stderr)
    return 0


def cmd_figure(args) -> int:
    from analysis.figures import draw_figure
    from lab.fileio import write_figure

    write_figure(Path(args.out), draw_figure(args.name, Path(args.host_dir)))
    return 0


def cmd_trace(args) -> int:
    from analysis.trace import experiment_trace, jobs_trace, validate_trace

    host_dir = Path(args.host_dir)
    if args.name == "jobs":
        trace = jobs_trace(read_table(host_dir / "jobs.csv"), host_dir.name)
    else:
        d = host_dir / args.name
        spans, samples = (read_table(d / f, args.name) for f in ("spans.csv", "samples.csv"))
        trace = experiment_trace(args.name, spans, samples)
    n = validate_trace(trace)
    write_json(Path(args.out), trace)
    print(f"{n} trace events", file=sys.stderr)
    return 0


#: A failed point's reason that names a config key: its input was bad (the workload's entry),
#: not the run; measuring it again would fail again.
INPUT_ERROR = r"(?:^|\()config key "


def _advice(bad: pd.DataFrame, host: str, rerun_args: str | None = None) -> str:
    """What to do about the failed points ``bad`` (rows of status.csv): the key to fix where a
    reason names one, and the commands that measure them again, with ``rerun_args`` (the run's
    ``--profile``, ``--configfile`` and ``--config`` arguments, which name the host label) where
    given. A changed key reruns its points by itself (Snakemake's ``params`` trigger); a user's
    module edited since, or a failure of the run, does not."""
    of_input = bad["reason"].fillna("").str.contains(INPUT_ERROR)
    add = " (add the --configfile you ran with)"  # the run's own arguments unknown
    run = f": snakemake --cores 4 {rerun_args}" if rerun_args else f"{add}: snakemake --cores 4"
    command = run + " --forcerun {}" + ("" if rerun_args else f" --config host={shlex.quote(host)}")
    text = "The report lists them."
    if of_input.any():
        points = " ".join(shlex.quote(m) for m in bad[of_input]["metrics"])
        text += (
            " Those whose reason names a config key failed on their input: fix that key, and the next run"
            " measures them again; where the fault was in the code the key names, measure them again once it is"
            " fixed with" + command.format(points) + "."
        )
    if (~of_input).any():
        points = " ".join(shlex.quote(m) for m in bad[~of_input]["metrics"])
        text += " Measure the others again with" + command.format(points)
    return text


def cmd_status(args) -> int:
    """Write every point's status; exit 1 naming the failed and timed-out points, with the
    command that measures them again, or (bad input, :data:`INPUT_ERROR`) the key to fix."""
    rows = []
    for path in args.summaries:
        s = read_table(path)
        if s.empty:
            continue
        spec = registry.get(str(s["experiment"].iloc[0])).spec
        for _, r in s.iterrows():
            point = "/".join(f"{k}~{r[k]}" for k in spec.keys)
            metrics = str(Path(path).parent / point / "metrics.csv")
            rows.append(
                {
                    "experiment": spec.name,
                    "point": point,
                    "status": r["status"],
                    "reason": r["reason"],
                    "metrics": metrics,
                }
            )
    table = pd.DataFrame(rows, columns=["experiment", "point", "status", "reason", "metrics"])
    write_frame(Path(args.out), table)
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
        print(_advice(bad, Path(args.summaries[0]).parent.parent.name, args.rerun_args), file=sys.stderr)
        return 1
    return 0


def cmd_config(args) -> int:
    import yaml

    header = "# Configuration this host's results were measured with (written by the workflow).\n"
    write_text(Path(args.out), header + yaml.safe_dump(fileio.json_object(args.json, "--json"), sort_keys=False))
    return 0


def cmd_artefact(args) -> int:
    """Write one of an experiment's artefacts (``Experiment.artefacts``) from its findings' data."""
    exp = registry.get(args.experiment)
    if args.name not in exp.spec.artefacts:
        raise ValueError(f"{args.experiment} declares no artefact {args.name!r}; it has {list(exp.spec.artefacts)}")
    found = read_json_object(Path(args.findings))
    write_text(Path(args.out), exp.hooks().artefacts[args.name](found.get("data") or {}))
    return 0


def load_hosts(dirs: list[str], experiments: list[str]) -> tuple[list, list[dict]]:
    """Every host directory that can be read, and ``{"name", "path", "reason"}`` for each one
    that cannot (a missing host.json, a file without a column the comparison needs ...): one
    broken directory must not sink the comparison of the others. Each reason is printed as a
    line ``not comparable: <host>: <reason>`` on stderr."""
    from analysis.compare import load_host

    hosts, broken = [], []
    for d in dirs:
        try:
            hosts.append(load_host(d, experiments))
        except (DataError, ValueError, OSError) as exc:
            broken.append({"name": Path(d).name, "path": str(d), "reason": str(exc)})
            print(f"not comparable: {Path(d).name}: {exc}", file=sys.stderr)
    return hosts, broken


def cmd_compare(args) -> int:
    from analysis.compare import compare_hosts, package_tables

    hosts, broken = load_hosts(args.host_dirs, args.experiments)
    names = [h.name for h in hosts]
    baseline = args.baseline if args.baseline in names else (names[0] if names else args.baseline)
    if baseline != args.baseline:
        why = (
            "could not be read"
            if any(b["name"] == args.baseline for b in broken)
            else f"is not among the hosts ({', '.join(names + [b['name'] for b in broken])})"
        )
        print(f"not comparable: baseline host {args.baseline} {why}; {baseline} is the baseline", file=sys.stderr)
    if len(hosts) < 2 and broken:  # too few left: the cause is the unreadable ones, not a missing machine
        unread = ", ".join(b["name"] for b in broken)
        raise ValueError(
            f"need at least 2 hosts to compare; {len(hosts)} could be read ({', '.join(names) or 'none'}), and"
            f" {unread} could not (the 'not comparable' lines say why): mend those directories, or measure"
            " them again (an incomplete one: snakemake with its --config host=NAME)"
        )
    tables = compare_hosts(hosts, baseline, args.experiments)
    out = Path(args.out_dir)
    for name, df in tables.items():
        write_frame(out / f"{name}.csv", df)
    write_json(out / "tables.json", package_tables(hosts, args.experiments))
    meta = {
        "baseline": baseline,
        "experiments": args.experiments,
        "hosts": [{"name": h.name, "path": str(h.path), "available_cpus": h.cpus, "host": dict(h.host)} for h in hosts],
        "not_comparable": broken,
    }
    write_json(out / "hosts.json", meta)
    c = tables["comparison"]
    print(
        f"{(c['status'] == 'compared').sum()} compared, {(c['status'] == 'not comparable').sum()} not comparable",
        file=sys.stderr,
    )
    return 0


def cmd_compare_figure(args) -> int:
    from analysis.figures import compare_chart
    from lab.fileio import write_figure

    d = Path(args.compare_dir)
    meta = read_json_object(d / "hosts.json")
    write_figure(Path(args.out), compare_chart(read_table(d / "comparison.csv"), args.experiment, meta))
    return 0


def cmd_fidelity(args) -> int:
    from analysis.fidelity import SELFCHECK_COLUMNS
    from analysis.hooks import checks

    host = read_json_object(Path(args.host_json))
    selfcheck = read_table(args.selfcheck) if args.selfcheck else None
    if selfcheck is not None:
        for col in SELFCHECK_COLUMNS:
            if col not in selfcheck.columns:
                raise DataError(args.selfcheck, f"missing column (have: {', '.join(selfcheck.columns)})", column=col)
    summaries = {}
    for path in args.summaries:  # results/<host>/<experiment>/summary.csv
        summaries[Path(path).parent.name] = read_table(path, Path(path).parent.name)
    folders = {Path(path).parent.name: Path(path).parent for path in args.summaries}  # spans.csv etc. beside
    table = checks(summaries, selfcheck, int(host["available_cpus"]), args.sample_hz, host, folders)
    write_frame(Path(args.out), table)
    for _, r in table.iterrows():
        print(f"{r['verdict']:5} {r['check']}: {r['measured']:.3g} (expected {r['expected']})", file=sys.stderr)
    return 0


def cmd_runinfo(args) -> int:
    from analysis import runinfo

    host = read_json_object(Path(args.host_json))
    jobs = [read_json_object(Path(p)) for p in args.jobs]
    metrics = [read_table(Path(p).with_name("metrics.csv")) for p in args.jobs]
    labels = [runinfo.job_label(p) for p in args.jobs]
    timing = runinfo.run_timing(jobs, metrics, host)
    capacity = runinfo.capacity_table(labels, jobs, metrics)
    run = timing | {"contention": runinfo.contention(metrics, jobs, host)}
    run["capacity"] = runinfo.capacity_drift(capacity, timing["measurement_phase_s"])
    run["vm_events"] = runinfo.vm_events(jobs, capacity, timing["start_unix"], timing["end_unix"])
    write_json(Path(args.out), run)
    if args.jobs_csv:
        write_frame(Path(args.jobs_csv), runinfo.job_intervals(labels, jobs, metrics))
    if args.interference_csv:
        write_frame(Path(args.interference_csv), runinfo.interference_table(labels, jobs))
    if args.capacity_csv:
        write_frame(Path(args.capacity_csv), capacity)
    return 0


def _runinfo_parser(sub) -> None:
    ri = sub.add_parser("runinfo", help="run duration and share inside measured windows (run.json)")
    ri.add_argument("--host-json", required=True)
    ri.add_argument("--out", required=True)
    ri.add_argument("--jobs-csv", default=None, help="also write every job's phases and windows (jobs.csv)")
    ri.add_argument(
        "--interference-csv", default=None, help="also write the other processes that used the CPUs (interference.csv)"
    )
    ri.add_argument(
        "--capacity-csv", default=None, help="also write what the capacity probe measured per job (capacity.csv)"
    )
    ri.add_argument("jobs", nargs="+", help="job.json of every measurement job")


def _rate_hz(text: str) -> float:
    """``--sample-hz``: a number within the bounds every ``Params`` declares for its
    ``sample_hz`` (:func:`lab.params.sample_hz_field`); argparse names the option otherwise."""
    try:
        hz = float(text)
        declaration(sample_hz_field()).check("sample_hz", hz)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc) if "sample_hz" in str(exc) else f"not a number: {text!r}") from None
    return hz


def _parser() -> argparse.ArgumentParser:
    names = list(registry.experiments())
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summarise", help="validate and summarise one experiment's metrics")
    s.add_argument("--experiment", required=True, choices=names)
    s.add_argument("--out-dir", required=True)
    s.add_argument("--host-json", default=None)
    s.add_argument("--user-env", default=None, help="user_env.json (the user's shell thread settings)")
    s.add_argument("--interpreters", default=None, help="interpreters.json (what each configured interpreter is)")
    s.add_argument(
        "--allow-mixed-nodes",
        action="store_true",
        help="summarise points measured on nodes unlike the host's (else they are skipped with the reason)",
    )
    s.add_argument("metrics", nargs="+", help="per-point metrics.csv files")
    f = sub.add_parser("figure", help="draw one figure")
    f.add_argument("name", help="a figure name (an experiment's declared figures, or run_capacity or job_schedule)")
    f.add_argument("--host-dir", required=True, help="results/<host>")
    f.add_argument("--out", required=True)
    timelines = [n for n, e in registry.experiments().items() if e.spec.timeline]
    t = sub.add_parser("trace", help="export a timeline as Chrome trace event JSON")
    t.add_argument("name", choices=[*timelines, "jobs"], help="an experiment with spans, or jobs (the job schedule)")
    t.add_argument("--host-dir", required=True, help="results/<host>")
    t.add_argument("--out", required=True)
    fi = sub.add_parser("fidelity", help="compare measured ratios with theory (fidelity.csv)")
    fi.add_argument("--host-json", required=True)
    fi.add_argument("--selfcheck", default=None, help="selfcheck metrics.csv")
    fi.add_argument(
        "--sample-hz", type=_rate_hz, required=True, help="the run's CPU sampler rate (samples/s, config sample_hz)"
    )
    fi.add_argument("--out", required=True)
    fi.add_argument("summaries", nargs="*", help="results/<host>/<experiment>/summary.csv of the experiments run")
    _runinfo_parser(sub)
    st = sub.add_parser("status", help="every point's status (status.csv); exit 1 if any failed or timed out")
    st.add_argument("--out", required=True)
    st.add_argument(
        "--rerun-args",
        help="the run's own --configfile and --config arguments (a shell string): the command printed for a failed"
        " point uses them; without it the command asks to add them",
    )
    st.add_argument("summaries", nargs="+", help="summary.csv of every experiment")
    cfg = sub.add_parser("config", help="write the run's configuration (JSON) as YAML")
    cfg.add_argument("--json", required=True, help="the configuration as a JSON object")
    cfg.add_argument("--out", required=True)
    a = sub.add_parser("artefact", help="write one of an experiment's artefacts (e.g. recommended.json)")
    a.add_argument("experiment", choices=names)
    a.add_argument("name", help="the artefact's file name, as the experiment declares it")
    a.add_argument("--findings", required=True, help="the experiment's findings.json")
    a.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="compare host directories against a baseline host")
    c.add_argument("--baseline", required=True, help="name (directory name) of the baseline host")
    c.add_argument("--experiments", nargs="+", required=True, choices=names)
    c.add_argument("--out-dir", required=True)
    c.add_argument("host_dirs", nargs="*", help="results/<host> directories (at least 2 readable ones)")
    cf = sub.add_parser("compare-figure", help="draw one experiment's comparison chart")
    cf.add_argument("experiment", choices=names)
    cf.add_argument("--compare-dir", required=True)
    cf.add_argument("--out", required=True)
    return p


COMMANDS = {
    "summarise": cmd_summarise,
    "figure": cmd_figure,
    "trace": cmd_trace,
    "fidelity": cmd_fidelity,
    "runinfo": cmd_runinfo,
    "config": cmd_config,
    "status": cmd_status,
    "artefact": cmd_artefact,
    "compare": cmd_compare,
    "compare-figure": cmd_compare_figure,
}


def main(argv: list[str] | None = None) -> int:
    """Run one command; invalid input, or an output that cannot be written, exits 1 with a
    message naming the file (and row and column, for a table)."""
    args = _parser().parse_args(argv)
    out_dir, out = getattr(args, "out_dir", None), getattr(args, "out", None)
    problem = output_dir_problem(out_dir) if out_dir is not None else output_file_problem(out) if out else None
    if problem:  # an output that cannot be written: said before reading or drawing anything
        print(f"error: --{'out-dir' if out_dir is not None else 'out'} {out_dir or out} {problem}", file=sys.stderr)
        return 1
    try:
        return COMMANDS[args.cmd](args)
    except (DataError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # an input that is missing or unreadable: name it, no traceback
        print(f"error: cannot read {exc.filename or 'an input'}: {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
