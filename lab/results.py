"""Interleaved measurement and what a measurement returns: raw rows, samples and spans.

An experiment's ``run(params, baseline)`` returns a :class:`RunResult`, usually through
:func:`interleave`, which measures a point and its baseline in alternating order within one
job. Nothing here aggregates: every row is one measured window (one replicate).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import typing
from collections.abc import Callable

from lab import probe as probe_mod
from lab import turns
from lab.rounds import Rounds
from lab.window import Meter, Window

#: Columns every metrics row carries. In metrics.csv the order is host, experiment, then the
#: experiment's parameters (Params fields), then the rest of these, then experiment-specific ones.
COMMON_COLUMNS = (
    "host",
    "experiment",
    "repeat",
    "role",
    "status",
    "reason",
    "wall_s",
    "cpu_util_pct",
    "available_cpus",
    "interference_pct",
    "contended",
    "sampler_cpu_pct",
    "pipeline_cpu_pct",
    "window_start_unix",
    "window_end_unix",
    "steal_pct",
    "cpu_wait_pct",
    "throttled_s",
    "cpu_freq_mhz",
    "top_other_pid",
    "top_other",
    "top_other_cpu_pct",
    "rounds_stopped",
)

#: Leading columns of samples.csv and spans.csv (docs/csv-schema.md).
SAMPLE_COLUMNS = ["repeat", "role", "t_s", "series", "busy_pct"]
SPAN_COLUMNS = ["repeat", "role", "actor", "kind", "start_s", "end_s"]


class PointError(ValueError):
    """A point's input that the job's files cannot answer (an interpreter label that is not
    in ``interpreters.json``): ``run`` raises it and the job exits 2 with the message, before
    it writes a file, so a typo on the command line never replaces a measured point."""


@dataclasses.dataclass
class RunResult:
    """What an experiment's ``run(params)`` returns: raw data, no aggregates.

    Attributes:
        rows: one dict per replicate (metrics; the CLI adds ``host`` and ``experiment``).
        samples: CPU samples, dicts with ``repeat, role, t_s, series, busy_pct``.
        spans: work spans, dicts with ``repeat, role, actor, kind, start_s, end_s`` (seconds
            from the start of the measured window) plus kind-specific fields.
        outcome: what a job decided while it measured (the workload's search: the winning
            configuration), written into its ``job.json`` for the jobs that depend on it.
        others: per window, the processes outside the job's tree that used the most CPU
            (dicts with ``repeat, role, pid, name, cmdline, cpu_s``, and ``cpu_pct``: % of one
            CPU over the span between the sampler's edge readings), written into ``job.json``.
        rounds: how the rounds ended (:meth:`lab.rounds.Rounds.record`), written into
            ``job.json``; None where the job measured no interleaved rounds.
    """

    rows: list[dict] = dataclasses.field(default_factory=list)
    samples: list[dict] = dataclasses.field(default_factory=list)
    spans: list[dict] = dataclasses.field(default_factory=list)
    outcome: dict | None = None
    others: list[dict] = dataclasses.field(default_factory=list)
    rounds: dict | None = None

    @classmethod
    def skipped(cls, reason: str, **row) -> RunResult:
        """A point that was not measured: one ``point`` row with status ``skipped``, the
        ``reason`` and any extra columns in ``row`` (e.g. the thread settings seen)."""
        return cls(rows=[{"repeat": 0, "role": "point", "status": "skipped", "reason": reason, **row}])

    @classmethod
    def failed(cls, reason: str, **row) -> RunResult:
        """A point that could not be measured because of its input (a workload that does not
        import, say): one ``point`` row with status ``failed`` and the ``reason``, which the
        outcome (``job.json``) repeats for the jobs that depend on this one. The job still
        exits 0; the workflow's ``point_status`` job reports the point at the end."""
        rows = [{"repeat": 0, "role": "point", "status": "failed", "reason": reason, **row}]
        return cls(rows=rows, outcome={"status": "failed", "reason": reason})

    def add_window(self, repeat: int, win: Window, role: str = "point", params=None, **row) -> dict:
        """Append a metrics row built from ``win`` plus ``row`` and keep its samples.

        ``role`` is ``point`` or ``baseline``; ``params`` (a Params object) overrides the
        job's parameters in this row's parameter columns (baseline rows).
        """
        full = {"repeat": repeat, "role": role, "status": "ok", "reason": "", **win.columns(), **row}
        if params is not None:
            full["_params"] = dataclasses.asdict(params)
        self.rows.append(full)
        self.samples.extend(
            {"repeat": repeat, "role": role, "t_s": t, "series": s, "busy_pct": round(v, 3)} for t, s, v in win.samples
        )
        self.others.extend(
            {
                "repeat": repeat,
                "role": role,
                "pid": pid,
                "name": name,
                "cmdline": cmd,
                "cpu_s": cpu_s,
                "cpu_pct": win.share_pct(cpu_s),
            }
            for pid, name, cmd, cpu_s in win.others
        )
        return full


@dataclasses.dataclass
class Measured:
    """One measured window of a :class:`Runner`.

    Attributes:
        win: the window (wall time, CPU, samples).
        row: experiment-specific metrics columns (throughput with its unit in the name ...).
        spans: work spans with ``actor, kind, start_s, end_s`` in seconds from ``win.t0``.
    """

    win: Window
    row: dict
    spans: list[dict] = dataclasses.field(default_factory=list)


class Runner(typing.Protocol):
    """A configuration point made ready to measure: set-up happens when it is created
    (``Runner(params, meter)``), ``once()`` measures one window with the meter, ``close()``
    releases processes. A runner may also have ``warm_up()``, which :func:`interleave` calls
    once every runner of the job is created: a runner that starts a process when created and
    waits for it in ``warm_up()`` lets the point's and the baseline's processes start at the
    same time (two interpreters of about 50 ms each, once per worker process)."""

    def once(self) -> Measured: ...

    def close(self) -> None: ...


def interleave(
    make_runner: Callable[[typing.Any, Meter], Runner], params, baseline=None, rounds: Rounds | None = None
) -> RunResult:
    """Measure rounds of a point and, interleaved, its baseline.

    Both are set up first, then warmed up (their ``warm_up()``, where they have one), with one
    :class:`~lab.window.Meter` at ``params.sample_hz``. In round ``r`` the point and the
    baseline are each measured once, in the order point, baseline for even ``r`` and
    baseline, point for odd ``r`` (A B B A ...), so that slow drift of a shared machine
    (timings here move by up to 30% between runs) affects both alike and cancels out of their
    ratio, as in asv's rounds and pyperf's worker processes. Without a baseline, or when the
    point is its own baseline, only the point is measured. A worker process of
    :func:`lab.workers.run_workers` waits, set up, for its turn (:func:`lab.turns.await_turn`).

    Before each round, where ``rounds.probe_ms`` is above 0, the capacity probe
    (:mod:`lab.probe`) measures what the machine delivers: its columns
    (:data:`lab.probe.COLUMNS`) go on both rows of the round, ``cpus_asked`` and
    ``cpus_delivered`` for each row's own work.

    Args:
        rounds: how many rounds (:class:`~lab.rounds.Rounds`): ``params.repeats`` when
            None; an adaptive policy measures more until the speedup's interval is narrow.

    Returns:
        A :class:`RunResult`; rows have ``role`` ``point`` or ``baseline``; ``rounds`` says
        how the rounds ended.
    """
    rounds = rounds or Rounds(params.repeats)
    with Meter(params.sample_hz) as meter:
        runners = [("point", params, make_runner(params, meter))]
        probe = None
        try:
            if baseline is not None and baseline != params:
                runners.append(("baseline", baseline, make_runner(baseline, meter)))
            for _, _, runner in runners:
                getattr(runner, "warm_up", lambda: None)()  # optional (see Runner)
            if rounds.probe_ms > 0:  # the job's workers' shared probe, else one of its own
                probe = probe_mod.shared() or probe_mod.Probe(meter.ncpu, rounds.probe_ms)
            result = _measure_rounds(runners, turns.await_turn(rounds), probe, meter.ncpu)
            turns.finished(result)  # in a worker process: the result goes before the tear-down
            return result
        finally:
            for _, _, runner in runners:
                runner.close()
            if probe is not None and probe is not probe_mod.shared():
                probe.close()


#: How long (s) the lab waits, after a window whose work ran OpenMP teams (:func:`may_spin`),
#: before it measures anything else: libgomp's threads that wait between parallel regions spin
#: 300,000 times before they sleep where ``OMP_WAIT_POLICY`` is unset (libgomp manual,
#: ``GOMP_SPINCOUNT``), milliseconds of two busy CPUs that the next window or probe reading would
#: share. Measured on the 2-vCPU AMD EPYC VM (docs/benchmarks.md, 2026-12-06 night): the probe's
#: delivered CPUs read right after 0.05-0.1 s of a 2-thread training loop were 1.40-1.70 or 3.41
#: (medians of 20-25 readings) where they read 2.0-2.1 after 2-50 ms of rest, and 2.0 with
#: ``OMP_WAIT_POLICY=PASSIVE`` either way; ten minutes later 1.88 against 1.92-2.09
#: (``benchmarks/spin_settle.py``): the size moves with the host's hour.
SPIN_SETTLE_S = 0.01


def may_spin(params) -> bool:
    """Whether work with these Params leaves libgomp threads spinning after a window: more than
    one intra-op thread (an int ``threads``) and an ``OMP_WAIT_POLICY`` other than PASSIVE in
    this job's environment (which its worker processes inherit: :data:`SPIN_SETTLE_S`)."""
    threads = getattr(params, "threads", 1)
    passive = os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
    return isinstance(threads, int) and threads > 1 and not passive


def _measure_rounds(runners: list[tuple[str, typing.Any, Runner]], rounds: Rounds, probe, ncpu: int) -> RunResult:
    """The rounds of :func:`interleave`, its runners set up and warmed up, ``probe`` (a
    :class:`lab.probe.Probe` or None) started; after a window of work that leaves threads
    spinning, :data:`SPIN_SETTLE_S` of rest before the next window or probe reading."""
    asked = {role: _cpus_asked(p) for role, p, _ in runners}
    spins = {role: may_spin(p) for role, p, _ in runners}
    result = RunResult()
    seen: dict[str, list[float]] = {"point": [], "baseline": []}
    t0, r, stopped = time.perf_counter(), 0, None
    settle = any(spins.values())  # the warm-ups ran them
    while stopped is None:
        if settle and probe is not None:
            time.sleep(SPIN_SETTLE_S)
            settle = False
        reading = probe.measure(asked.values()) if probe is not None else None
        for role, p, runner in runners if r % 2 == 0 else runners[::-1]:
            if settle:
                time.sleep(SPIN_SETTLE_S)
            m = runner.once()
            settle = spins[role]
            cap = probe_mod.row_columns(reading, asked[role], ncpu) if reading else {}
            result.add_window(r, m.win, role=role, params=p if role == "baseline" else None, **m.row, **cap)
            result.spans.extend({"repeat": r, "role": role, **s} for s in m.spans)
            seen[role].append(float(m.row.get(rounds.metric, math.nan)) if rounds.metric else math.nan)
        r += 1
        stopped = rounds.decide(r, time.perf_counter() - t0, seen["point"], seen["baseline"])
    result.rounds = rounds.record(r, stopped, time.perf_counter() - t0, seen["point"], seen["baseline"])
    for row in result.rows:  # a fact of the job, on each of its rows like available_cpus
        row["rounds_stopped"] = stopped
    return result


def _cpus_asked(params) -> int:
    """CPUs a point's work asks for at once (its Params' ``cpus_requested()``; 1 without one)."""
    asked = getattr(params, "cpus_requested", None)
    return int(asked()) if callable(asked) else 1


def metrics_rows(result: RunResult, host: str, experiment: str, params) -> tuple[list[dict], list[str]]:
    """The rows of ``metrics.csv`` and its column order (docs/csv-schema.md): ``host``,
    ``experiment``, the parameter columns (a baseline row's own parameters), then every other
    column in first-seen order."""
    # a tuple field is a set of values the job chose from, not the row's value: job.json has it
    param_cols = {k: v for k, v in dataclasses.asdict(params).items() if not isinstance(v, tuple)}
    rows = [
        {"host": host, "experiment": experiment, **(r.pop("_params", None) or param_cols), **r} for r in result.rows
    ]
    columns = list(dict.fromkeys([*COMMON_COLUMNS[:2], *param_cols, *(k for r in rows for k in r)]))
    return rows, columns


def span_columns(spans: list[dict]) -> list[str]:
    """spans.csv's columns: :data:`SPAN_COLUMNS`, then kind-specific ones in first-seen order."""
    return list(dict.fromkeys([*SPAN_COLUMNS, *(k for s in spans for k in s)]))


#: Keys the lab itself adds to a metrics row besides :data:`COMMON_COLUMNS` and the
#: capacity probe's (:data:`lab.probe.COLUMNS`): the worker process of a round, and a baseline
#: row's own parameters (``_params``, spread into the parameter columns when written).
LAB_COLUMNS = ("worker", "_params")


def check_rows(
    experiment: str, result: RunResult, params_cls, metric: str | None, columns, where: str = "EXPERIMENT.columns"
) -> None:
    """Refuse, before any file is written, rows the analysis could not read as declared: ok rows
    without the declared metric column, and any row with a column that is neither a parameter
    (``params_cls``), nor the lab's own, nor among ``columns`` (declared at ``where``).

    Raises:
        ValueError: naming the experiment, the columns and where to declare them.
    """
    lacking = [r for r in result.rows if r.get("status", "ok") == "ok" and metric and metric not in r]
    if lacking:
        have = ", ".join(sorted(k for k in lacking[0] if not k.startswith(("cpu", "system", "tree"))))
        raise ValueError(
            f"{experiment}: run() returned rows without the declared metric column {metric!r}"
            f" (EXPERIMENT.metrics); its rows hold {have}"
        )
    known = {*COMMON_COLUMNS, *probe_mod.COLUMNS, *LAB_COLUMNS, *(f.name for f in dataclasses.fields(params_cls))}
    known |= set(columns)
    undeclared = sorted({k for r in result.rows for k in r} - known)
    if undeclared:
        raise ValueError(
            f"{experiment}: run() returned rows with undeclared columns ({', '.join(undeclared)}); declare each"
            f" in {where} with Col(type, meaning, unit) (lab/declare.py), or drop it"
        )
