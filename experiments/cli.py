"""The command line every experiment's measurement module shares, and the files a point writes.

``python -m experiments.<name> --help`` lists one option per field of the experiment's frozen
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
import os
import platform
import sys
import time
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from experiments.fileio import write_csv, write_json
from experiments.host import OWNED_DIRS, available_cpus, default_host, sanitise_host
from experiments.params import field_type, oversubscription_skip, parse_bool, parse_overrides
from experiments.results import SAMPLE_COLUMNS, RunResult, metrics_rows, span_columns


@contextmanager
def exclusive(lock_path: str | None) -> Iterator[float]:
    """Hold an exclusive ``flock`` on ``lock_path`` (no-op when None); yields the wait in s.

    Measurement jobs take this lock so that two of them never measure at the same time,
    even when a scheduler starts them together.
    """
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


def build_parser(params_cls, description: str, prog: str | None = None) -> argparse.ArgumentParser:
    """An ``argparse`` parser with one ``--option`` per field of the ``Params`` dataclass.

    ``Literal[...]`` fields become choices; defaults come from the dataclass; a field's
    ``metadata["help"]`` is its help text. Common options: ``--out DIR`` (where the CSVs go),
    ``--host LABEL``, ``--lock PATH``, ``--max-oversubscription FACTOR`` and ``--baseline``.
    """
    p = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    for f in dataclasses.fields(params_cls):
        tp, choices = field_type(params_cls, f.name)
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=parse_bool if tp is bool else tp,
            choices=choices,
            default=f.default,
            help=f.metadata.get("help", "") if f.metadata else "",
        )
    p.add_argument("--out", required=True, help="output directory for metrics.csv, samples.csv, spans.csv")
    p.add_argument("--host", default=None, help="host label (default: sanitised hostname)")
    p.add_argument("--lock", default=None, help="lock file serialising measurement jobs")
    p.add_argument(
        "--max-oversubscription",
        type=float,
        default=None,
        metavar="FACTOR",
        help="skip the point if it asks for more than FACTOR x the available CPUs (None: no limit)",
    )
    p.add_argument(
        "--baseline",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="also measure this variant of the point (fields overridden), interleaved with it",
    )
    return p


def job_record(experiment: str, host: str, params, baseline, times: dict) -> dict:
    """The content of a point's ``job.json``: what ran, where, when, and the environment it saw.

    Args:
        times: ``job_start_unix``, ``lock_wait_s``, ``lock_acquired_unix``, ``lock_released_unix``
            (s); ``job_end_unix`` is added here.
    """
    return {
        "experiment": experiment,
        "host": host,
        "params": dataclasses.asdict(params),
        "baseline": dataclasses.asdict(baseline) if baseline else None,
        "pid": os.getpid(),
        "python": platform.python_version(),
        **times,
        "job_end_unix": time.time(),
        "env": {var: os.environ.get(var) for var in (*OWNED_DIRS, "OMP_NUM_THREADS", "MKL_NUM_THREADS")},
    }


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


def cli_main(
    experiment: str,
    params_cls,
    run: Callable[[typing.Any, typing.Any], RunResult],
    description: str,
    argv: list[str] | None = None,
) -> int:
    """Command-line entry point shared by the experiments' measurement modules.

    Parses ``argv`` into ``params_cls`` (and ``--baseline`` overrides into a second Params),
    runs ``run(params, baseline)`` while holding the measurement lock (or, for a point above
    ``--max-oversubscription``, records one row with status ``skipped`` and the reason; see
    :func:`experiments.params.oversubscription_skip`), and writes the point's files into ``--out``.

    Returns:
        0; parameter errors exit with status 2 and a message naming the parameter.
    """
    from experiments import JOB_START_UNIX

    parser = build_parser(params_cls, description, prog=f"python -m experiments.{experiment}")
    args = parser.parse_args(argv)
    try:
        params = params_cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(params_cls)})
        overrides = parse_overrides(params_cls, args.baseline)
        baseline = dataclasses.replace(params, **overrides) if args.baseline else None
    except ValueError as exc:
        parser.error(str(exc))
    host = sanitise_host(args.host) if args.host else default_host()
    print(f"[{experiment}] {params}", file=sys.stderr, flush=True)
    skip = oversubscription_skip(params, args.max_oversubscription, available_cpus())
    with exclusive(args.lock) as waited:
        locked_at = time.time()
        result = RunResult.skipped(skip) if skip is not None else run(params, baseline)
        released_at = time.time()
    times = {"job_start_unix": JOB_START_UNIX, "lock_wait_s": waited}
    times |= {"lock_acquired_unix": locked_at, "lock_released_unix": released_at}
    job = job_record(experiment, host, params, baseline, times)
    _log_rows(experiment, write_point(Path(args.out), result, host, experiment, params, job))
    return 0
