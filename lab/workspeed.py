"""The work's own speed inside a measured window: the time one fixed unit of its work took.

The capacity probe (:mod:`lab.probe`) measures the machine between rounds, for a few
milliseconds. On the 2-vCPU VM the machine's slowdowns come and go within tenths of a second,
and they land inside the windows, where the probe cannot look: in a quick run 30 minutes after
another, in 7 of the 14 rounds of gil's 2 CPU-bound processes the slower process ran its loop's
chunks at 1.33-2.19x the CPU time a chunk of the sequential baseline took in the same round
(each process on a CPU for 93-99% of its chunks' wall time, steal 0), while the probe beside six
of those rounds read 1.89-2.03 CPUs delivered. The point read 1.93x in the first run and 1.48x
in the second, and 1.93x and 1.94x on whole cores by the time its own chunks took
(docs/benchmarks.md, 2026-12-07 afternoon).

A worker that runs fixed units of work (a loop's equal chunks, training steps of one model)
times each unit. The time a unit took is what one unit of the work cost on the CPU it got: it
grows where the machine delivered less than a whole core to that CPU (a busy SMT sibling, a host
thread on the same core, a lower clock, the host taking the vCPU away) and where another process
took the CPU while the unit ran, which is the capacity probe's own measure (its loops' elapsed
time) applied to the work itself, inside the window. Time outside the units (starting and joining
processes, handing results back) is not in it: that is the point's own cost. Nor may the point's
own workers wait for each other's CPUs: only points with no more workers than CPUs record it.
So, per window, :func:`unit_ms` is the time of one unit on the window's slowest worker, the one
the window waited for; the point's value over its baseline's in the same round is how much
slower the machine ran the work in the point's window than in the baseline's
(:mod:`analysis.wholecores`: the speedup on whole cores).

Why elapsed time and not the unit's CPU time: CPU time sees the slower CPU but not a CPU that
another process held. In a new user's quick run beside another agent's work, 2 processes read
0.83x with their chunks on a CPU 51% of their time; divided by their chunks' CPU time alone they
read 1.03x "on whole cores", by their chunks' elapsed time 1.74x, where runs on an idle machine
read 1.92-1.96x so (docs/benchmarks.md, 2026-12-07 afternoon).

Only work whose workers share nothing may record it: threads on one shared list, or intra-op
threads of one matrix product, slow each other down by design, and that slowdown is what such a
point measures. Nor can it tell from the host's doing a slowdown the workers cause each other
through hardware they share (memory bandwidth, a shared cache).

Threads under the GIL are the one case timed by CPU time (``cpu=True``): one of them runs
bytecode at a time, so a unit's elapsed time holds the other threads' turns, and its CPU time is
the time it took on the CPU it got. Their sequential baseline keeps its elapsed time, so a CPU
that another process held from the baseline still counts against it, while one held from the
threads shows in their speedup, and their check names the load it measured. Per round, their
speedup times this ratio is about the share of their window that ran their units at the
baseline's pace: about 1 under the GIL, about 2 on 2 CPUs without it. On the AVX-512 EPYC VM
their loop ran each chunk in 0.78-0.88x the CPU time the sequential loop's chunks took in the
same rounds (a vCPU that pauses while the other thread holds the GIL runs faster: 24.7 against
27.9 ms a loop of 1M iterations in plain CPython), so 2 GIL-bound threads read 1.13-1.34x over
sequential, and about 1x at the sequential loop's pace (docs/benchmarks.md, 2026-12-07).
"""

from __future__ import annotations

import math

from lab.declare import Col

#: The metrics column (docs/csv-schema.md).
UNIT_COLUMN = "unit_ms"

#: What :data:`UNIT_COLUMN` timed: ``elapsed`` (the slowest worker's time inside its units) or
#: ``cpu`` (the workers' CPU time, pooled: threads under the GIL); empty where it is empty.
CLOCK_COLUMN = "unit_clock"

#: Its declaration, for an experiment's :attr:`lab.declare.Experiment.columns`.
COLUMNS = {
    UNIT_COLUMN: Col(
        "float",
        "time one fixed unit of the window's work took on its slowest worker (each worker's time inside its"
        " units over its units, the largest; `lab.workspeed`), only where the workers share nothing and are no"
        " more than the CPUs, or are threads under the GIL (timed by their CPU time: one runs at a time); empty"
        " elsewhere",
        "ms",
    ),
    CLOCK_COLUMN: Col(
        "str",
        "what `unit_ms` timed: `elapsed` (the slowest worker's time inside its units) or `cpu` (the workers' CPU"
        " time inside them, pooled over the workers: threads under the GIL, which run one at a time); empty where"
        " `unit_ms` is",
        "-",
    ),
}


def clock_of(unit: float, cpu: bool) -> str:
    """The :data:`CLOCK_COLUMN` value of a window whose :func:`unit_ms` is ``unit``, timed by CPU
    time where ``cpu``: "" where ``unit`` is not a finite number."""
    return ("cpu" if cpu else "elapsed") if math.isfinite(unit) else ""


def unit_ms(spans: list[dict], units: str | None = None, cpu: bool = False) -> float:
    """Time one unit of a window's work took on its slowest worker, ms.

    Args:
        spans: the window's work spans, each with ``actor`` (a worker), ``start_s`` and ``end_s``
            (its start and end on one clock, s), and ``cpu_s`` (the worker's CPU time in it, s)
            where ``cpu``.
        units: the span key holding how many units of work the span did (``steps``); None where
            every span is one unit (equal chunks of a loop).
        cpu: threads under the GIL (the module docstring): each span timed by its ``cpu_s``
            instead of its elapsed time, which holds the other threads' turns, and pooled over the
            workers, whose units the window holds one after another (not the slowest's).

    Returns:
        ``1000 max_a (sum of actor a's end_s - start_s / sum of its units)``; where ``cpu``,
        ``1000 sum of cpu_s / sum of units`` over all workers. NaN where no span has both. A
        span whose length is negative or not a finite number, or whose units are not a finite
        positive number, is left out; spans without ``actor`` count as one worker.
    """
    took: dict[str, float] = {}
    done: dict[str, float] = {}
    for s in spans:
        t = _number(s.get("cpu_s")) if cpu else _number(s.get("end_s")) - _number(s.get("start_s"))
        n = _number(s.get(units)) if units else 1.0
        if not (t >= 0 and 0 < n < math.inf):  # NaN compares False: a span without either is left out
            continue
        actor = "" if cpu else str(s.get("actor", ""))
        took[actor] = took.get(actor, 0.0) + t
        done[actor] = done.get(actor, 0.0) + n
    per_unit = [took[a] / done[a] for a in took if done[a] > 0]
    return 1000.0 * max(per_unit) if per_unit else math.nan


def _number(v) -> float:
    """``v`` as a float, NaN for None, booleans, infinities and what is not a number."""
    if v is None or isinstance(v, bool):
        return math.nan
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x if math.isfinite(x) else math.nan
