"""The command line every experiment's measurement module shares, and the files a point writes.

``python -m lab.point <name> --help`` lists one option per field of the experiment's frozen
``Params`` dataclass plus ``--out``, ``--host``, ``--lock``, ``--max-oversubscription`` and
``--baseline``. :func:`cli_main` parses them, holds the measurement lock while the experiment's
pure ``run(params, baseline)`` measures, and writes ``metrics.csv``, ``samples.csv``,
``spans.csv`` and ``job.json`` into ``--out`` (docs/csv-schema.md), atomically, ``metrics.csv``
last: its presence means the point is complete.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import functools
import os
import platform
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from lab import capacity, hostinfo
from lab.fileio import output_dir_problem, read_json_object, write_csv, write_json
from lab.host import OWNED_DIRS, affinity, available_cpus, host_label, job_scratch
from lab.params import (
    declaration,
    field_type,
    is_tuple,
    oversubscription_problem,
    oversubscription_skip,
    parse_bool,
    parse_overrides,
    parse_value,
)
from lab.results import SAMPLE_COLUMNS, PointError, RunResult, check_rows, metrics_rows, span_columns
from lab.rounds import MAX_ROUNDS_WORKERS, Rounds, as_option
from lab.threads import check_job_env, load_time_settings
from lab.workers import run_workers


@contextmanager
def exclusive(lock_path: str | None) -> Iterator[float]:
    """Hold an exclusive ``flock`` on ``lock_path`` (no-op when None); yields the wait in s. Measurement
    jobs take it so that two never measure at the same time, even when a scheduler starts them together."""
    if not lock_path:
        yield 0.0
        return
    Path(lock_path).parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - t
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _tuple_arg(params_cls, name: str, text: str) -> tuple:
    try:
        return parse_value(params_cls, name, text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rounds_options(p: argparse.ArgumentParser) -> None:
    """The options of :func:`rounds_policy` (how many interleaved rounds, in how many workers)."""
    g = p.add_argument_group("rounds", "how many interleaved rounds (lab/rounds.py, lab/workers.py)")
    g.add_argument(
        "--rounds-target-ci-pct",
        type=float,
        default=0.0,
        metavar="PCT",
        help="measure rounds until the speedup's 95%% CI half-width is below PCT %% of it (0: --repeats) [>= 0]",
    )
    g.add_argument("--rounds-budget-s", type=float, default=0.0, metavar="S", help="s the rounds may take [>= 0]")
    for what, unit in (("target-ci-pct", "PCT"), ("budget-s", "S")):  # lab.rounds.Rounds._goal
        lead = f"the --rounds-{what} while the point beats its baseline (median speedup > 1); default: the same"
        g.add_argument(f"--rounds-lead-{what}", type=float, default=None, metavar=unit, help=lead + " [>= 0]")
    g.add_argument("--rounds-max", type=int, default=0, metavar="N", help="at most N rounds (0: --repeats)")
    g.add_argument("--rounds-workers", type=int, default=1, metavar="W", help="split the rounds over W processes [1-8]")
    probe = "before each round, measure the delivered capacity with a loop of MS ms (lab/probe.py); 0: none [>= 0]"
    g.add_argument("--rounds-probe-ms", type=float, default=0.0, metavar="MS", help=probe)


def _help(decl) -> str:
    """A field's ``--help`` line: its declared help and unit, and its bounds
    (``%`` doubled for argparse's formatting)."""
    bounds = [f"{sign} {v:g}" for sign, v in ((">=", decl.min), (">", decl.above), ("<=", decl.max)) if v is not None]
    text = decl.describe() + (f" [{', '.join(bounds)}]" if bounds else "")
    text += f" (a value here; {', '.join(decl.symbols)}: in the config file only)" if decl.symbols else ""
    return text.replace("%", "%%")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in ``--help``, but not ``(default: None)``: such an option's help says what applies."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


def build_parser(params_cls, description: str, prog: str | None = None) -> argparse.ArgumentParser:
    """An ``argparse`` parser with one ``--option`` per field of the ``Params`` dataclass.

    ``Literal[...]`` fields become choices; defaults come from the dataclass; a field's
    ``metadata["help"]`` is its help text. Common options: ``--out DIR`` (where the CSVs go),
    ``--host LABEL``, ``--lock PATH``, ``--max-oversubscription FACTOR``, ``--baseline``,
    ``--host-file``, ``--after`` and the rounds options (:func:`_rounds_options`).
    """
    p = argparse.ArgumentParser(prog=prog, description=description, formatter_class=_Help)
    for f in dataclasses.fields(params_cls):
        tp, choices = field_type(params_cls, f.name)
        if is_tuple(params_cls, f.name):  # a set of values, comma separated: 0,1,2
            convert, choices = functools.partial(_tuple_arg, params_cls, f.name), None
        else:
            convert = parse_bool if tp is bool else tp
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=convert,
            choices=choices,
            default=f.default,
            help=_help(declaration(f)),
        )
    p.add_argument("--out", required=True, default=argparse.SUPPRESS, help="where the point's CSV files go")
    p.add_argument("--host", default=None, help="host label; default: this machine's sanitised hostname")
    p.add_argument("--lock", default=None, help="lock file serialising measurement jobs; none if not given")
    over = "skip the point if it asks for more than FACTOR x the available CPUs; no limit if not given"
    p.add_argument("--max-oversubscription", type=float, default=None, metavar="FACTOR", help=over)
    _rounds_options(p)
    p.add_argument(
        "--baseline",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="also measure this variant of the point (fields overridden), interleaved with it",
    )
    p.add_argument(
        "--host-file",
        nargs="*",
        default=[],
        metavar="PATH",
        help="host-level JSON files the experiment reads (e.g. user_env.json), passed to run()",
    )
    p.add_argument(
        "--after",
        nargs="*",
        default=[],
        metavar="DIR",
        help="point directories this point depends on: their job.json (its outcome) is passed to run()",
    )
    return p


def read_after(dirs: list[str]) -> list[dict]:
    """The ``job.json`` of each point directory a point depends on (``Experiment.depends``).

    Raises:
        ValueError: if one is missing or not JSON, naming it.
    """
    return [read_json(Path(d) / "job.json", "--after") for d in dirs]


def read_json(path: str | Path, option: str):
    """A JSON file named on the command line.

    Raises:
        ValueError: naming the option and the file, if it is missing or not JSON.
    """
    try:
        return read_json_object(path)
    except (OSError, ValueError) as exc:  # read_json_object's ValueError names the file already
        said = f"{path}: cannot read it ({type(exc).__name__}: {exc})" if isinstance(exc, OSError) else exc
        raise ValueError(f"{option} {said}") from None


def job_record(experiment: str, host: str, params, baseline, times: dict, result: RunResult | None = None) -> dict:
    """The content of a point's ``job.json``: what ran, where, when, what it decided
    (``outcome``, see :class:`~lab.results.RunResult`), how its rounds ended
    (``rounds``), the processes outside its tree that used the most CPU in each window
    (``others``), the capacity facts that held for the job (``capacity``,
    :func:`lab.capacity.snapshot`), the node it ran on (``node``,
    :func:`lab.hostinfo.node`) and the environment it saw.

    Args:
        times: ``job_start_unix``, ``lock_wait_s``, ``lock_acquired_unix``, ``lock_released_unix``
            (s); ``job_end_unix`` is added here.
    """
    result = result or RunResult()
    return {
        "experiment": experiment,
        "host": host,
        "params": dataclasses.asdict(params),
        "baseline": dataclasses.asdict(baseline) if baseline else None,
        "outcome": result.outcome,
        "rounds": result.rounds,
        "others": result.others,
        "capacity": capacity.snapshot(affinity()),
        "node": hostinfo.node(),
        "pid": os.getpid(),
        "python": platform.python_version(),
        **times,
        "job_end_unix": time.time(),
        "env": {var: os.environ.get(var) for var in (*OWNED_DIRS, "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        | load_time_settings(os.environ),
    }


def rounds_policy(args, experiment: str, params, parser: argparse.ArgumentParser) -> Rounds:
    """The job's :class:`~lab.rounds.Rounds` from ``--repeats`` (the minimum),
    ``--rounds-target-ci-pct``, ``--rounds-budget-s``, their ``--rounds-lead-...`` forms,
    ``--rounds-max`` and ``--rounds-workers``; the metric that decides is the experiment's for
    this point (the registry's declaration). Bad values exit with status 2 and a message naming
    the option."""
    from lab import registry

    try:
        if args.rounds_max < 0:
            raise ValueError(f"--rounds-max must be >= 0 (0: as many as --repeats), got {args.rounds_max}")
        most = min(MAX_ROUNDS_WORKERS, params.repeats)  # each worker measures a round at least
        if not 1 <= args.rounds_workers <= most:
            allowed = f"1-{most} (config rounds.workers; at most --repeats {params.repeats})"
            raise ValueError(f"--rounds-workers must be {allowed}, got {args.rounds_workers}")
        target = args.rounds_target_ci_pct
        if target > 0 and not (args.rounds_budget_s > 0 and args.rounds_max >= params.repeats):
            raise ValueError(
                "--rounds-target-ci-pct needs --rounds-budget-s S (> 0) and --rounds-max N (>= --repeats):"
                " without them no round is added"
            )
        spec = registry.get(experiment).spec
        metric = spec.metric(dataclasses.asdict(params)) if target > 0 else ""
        max_rounds = args.rounds_max or params.repeats
        return Rounds(
            *(params.repeats, target, args.rounds_budget_s, max_rounds, metric, args.rounds_workers),
            probe_ms=getattr(args, "rounds_probe_ms", 0.0),
            setup_alone=spec.times_setup,
            lead_target_ci_pct=getattr(args, "rounds_lead_target_ci_pct", None),
            lead_budget_s=getattr(args, "rounds_lead_budget_s", None),
        )
    except (ValueError, KeyError) as exc:
        parser.error(as_option(str(exc)))


def write_point(out: Path, result: RunResult, host: str, experiment: str, params, job: dict) -> list[dict]:
    """Write a point's four files into ``out``, ``metrics.csv`` last; return the metrics rows."""
    rows, columns = metrics_rows(result, host, experiment, params)
    write_csv(out / "samples.csv", result.samples, SAMPLE_COLUMNS)
    write_csv(out / "spans.csv", result.spans, span_columns(result.spans))
    write_json(out / "job.json", job, sort_keys=True)
    write_csv(out / "metrics.csv", rows, columns)  # last: its presence means the point is complete
    return rows


def _log_rows(experiment: str, rows: list[dict]) -> None:
    nan = float("nan")
    for r in rows:
        print(
            f"[{experiment}] repeat={r['repeat']} {r.get('role', '')} status={r['status']} "
            f"wall_s={r.get('wall_s', nan):.4f} cpu_util_pct={r.get('cpu_util_pct', nan):.1f} {r.get('reason') or ''}",
            file=sys.stderr,
        )


def cli_main(exp, argv: list[str] | None = None) -> int:
    """Command-line entry point of every experiment: ``python -m lab.point <name> ...``.

    Runs :func:`measure_point` with the experiment's ``Params`` and ``run`` and the keyword
    arguments its declaration promises (:meth:`lab.declare.Experiment.run_options`).

    Args:
        exp: the experiment (:class:`lab.registry.Registered`).

    Returns:
        0; parameter errors exit with status 2 and a message naming the parameter.
    """
    module = exp.measurement()
    description = (module.__doc__ or exp.name).strip().splitlines()[0]
    return measure_point(
        exp.name,
        exp.params_cls,
        module.run,
        description,
        exp.run_options(),
        argv,
        metric=exp.spec.metric,
        columns=exp.spec.columns,
        columns_at=f"EXPERIMENT.columns ({exp.path / '__init__.py'})",
        job_env=exp.spec.env_of,
    )


def _check_or_exit(parser, experiment: str, result: RunResult, params, metric, declared) -> None:
    """:func:`lab.results.check_rows` for ``params``' point (``metric(point)`` its declared
    metric); its error, the package's fault, exits in one line and nothing is written."""
    rule = metric(dataclasses.asdict(params)) if metric else None
    try:
        check_rows(experiment, result, type(params), rule, *declared)
    except ValueError as exc:
        raise SystemExit(f"{parser.prog}: {exc}") from None


def _given(args, options: frozenset[str]) -> dict:
    """The keyword arguments of ``run`` besides ``rounds``, from the command line.

    Raises:
        ValueError: for an unreadable ``--after`` or ``--host-file``."""
    given = {}
    if "after" in options:
        given["after"] = read_after(args.after)
    if "host_files" in options:
        given["host_files"] = {Path(f).name: read_json(f, "--host-file") for f in args.host_file}
    if "max_oversubscription" in options:  # a job that chooses its own points
        given["max_oversubscription"] = args.max_oversubscription
    return given


def _parse(parser: argparse.ArgumentParser, argv, params_cls, options: frozenset[str], job_env):
    """``(args, params, baseline or None, run's keyword arguments)`` from ``argv``; a bad value, an
    environment other than the point's ``job_env`` (:func:`lab.threads.check_job_env`) or an
    ``--out`` that cannot be written exits with status 2 and a message naming it."""
    args = parser.parse_args(argv)
    try:
        params = params_cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(params_cls)})
        overrides = parse_overrides(params_cls, args.baseline)
        baseline = dataclasses.replace(params, **overrides) if args.baseline else None
        given = _given(args, options)
        why = check_job_env(job_env(dataclasses.asdict(params)), parser.prog) if job_env else None
        if why:
            raise ValueError(why)
        if (problem := output_dir_problem(args.out)) is not None:
            raise ValueError(f"--out {args.out!r} {problem}")
        if problem := oversubscription_problem(args.max_oversubscription):
            raise ValueError(problem)
    except ValueError as exc:
        parser.error(str(exc))
    return args, params, baseline, given


def measure_point(
    experiment: str,
    params_cls,
    run: Callable[..., RunResult],
    description: str,
    options: frozenset[str] = frozenset(),
    argv: list[str] | None = None,
    prog: str | None = None,
    metric: Callable[[dict], str] | None = None,
    columns: Collection[str] = (),
    columns_at: str = "EXPERIMENT.columns",
    job_env: Callable[[dict], Mapping[str, str | None]] | None = None,
) -> int:
    """Parse ``argv`` into ``params_cls`` (and ``--baseline`` overrides into a second Params),
    run ``run(params, baseline, ...)`` with the keyword arguments named in ``options``
    (``rounds``, ``after``, ``host_files``, ``max_oversubscription``) while holding the
    measurement lock (or, for a point above ``--max-oversubscription``, record one row with
    status ``skipped`` and the reason; see :func:`lab.params.oversubscription_skip`), and write
    the point's files into ``--out``. ``metric(point)`` names the column every ok row must hold
    (the experiment's declared metric); ``columns`` names the columns its rows may hold
    besides its parameters and the lab's own (:func:`check_rows`), declared at ``columns_at``.
    ``job_env(point)`` names the environment the job must have started with (:func:`check_job_env`).

    Returns:
        0; bad parameters, and a :class:`~lab.results.PointError` from ``run``, exit 2 naming them.

    Raises:
        SystemExit: before any file is written, for ok rows without the declared metric column
            or rows with an undeclared column (one line naming them and where to declare them).
    """
    from lab import JOB_START_UNIX

    parser = build_parser(params_cls, description, prog=prog or f"python -m lab.point {experiment}")
    args, params, baseline, given = _parse(parser, argv, params_cls, options, job_env)
    host = host_label(args.host)
    out = Path(args.out).resolve()  # where the job was asked to write, whatever directory the run leaves
    print(f"[{experiment}] {params}", file=sys.stderr, flush=True)
    skip = oversubscription_skip(params, args.max_oversubscription, available_cpus())
    policy = rounds_policy(args, experiment, params, parser) if "rounds" in options else None
    with exclusive(args.lock) as waited, job_scratch(sweep=bool(args.lock)) as scratch:
        locked_at = time.time()
        try:
            if skip is not None:
                result = RunResult.skipped(skip)
            elif policy is not None:  # a job of interleaved rounds, in one or more worker processes
                result = run_workers(lambda rounds: run(params, baseline, **given, rounds=rounds), policy)
            else:
                result = run(params, baseline, **given)
        except PointError as exc:  # input the job's files cannot answer: exit 2, nothing written
            parser.error(str(exc))
        times = {"job_start_unix": JOB_START_UNIX, "lock_wait_s": waited, "lock_acquired_unix": locked_at}
        times["job_scratch"] = str(scratch)
    times["lock_released_unix"] = time.time()
    _check_or_exit(parser, experiment, result, params, metric, (columns, columns_at))
    job = job_record(experiment, host, params, baseline, times, result)
    _log_rows(experiment, write_point(out, result, host, experiment, params, job))
    return 0
