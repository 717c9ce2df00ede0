"""The work's own speed inside a measured window: the CPU time of one fixed unit of its work.

The capacity probe (:mod:`lab.probe`) measures the machine between rounds, for a few
milliseconds. On the 2-vCPU VM the machine's slowdowns come and go within tenths of a second,
and they land inside the windows, where the probe cannot look: in a quick run 30 minutes after
another, in 7 of the 14 rounds of gil's 2 CPU-bound processes the slower process ran its loop's
chunks at 1.33-2.19x the CPU time a chunk of the sequential baseline took in the same round
(each process on a CPU for 93-99% of its chunks' wall time, steal 0), while the probe beside six
of those rounds read 1.89-2.03 CPUs delivered. The point read 1.48x against 1.93x in the first
run, and 1.90x and 1.88x so corrected (docs/benchmarks.md, 2026-12-07 afternoon).

A worker that runs fixed units of work (a loop's equal chunks, training steps of one model)
times each unit with its own CPU clock. A unit's CPU time is what one unit of the work cost on
the CPU it got: it grows where the machine delivered less than a whole core to that CPU (a busy
SMT sibling, a host thread on the same core, a lower clock), and it does not grow where the
guest's own scheduler let the worker wait (more workers than CPUs: the point's own cost, which
no correction may remove). So, per window, :func:`unit_cpu_ms` is the CPU time of one unit on the
window's slowest worker, the one the window waited for; the point's value over its baseline's
in the same round is how much slower the CPUs ran the work in the point's window than in the
baseline's (``analysis.stats``: the speedup on whole cores).

Only work whose workers share nothing may record it: threads on one shared list, or intra-op
threads of one matrix product, slow each other down by design, and that slowdown is what such a
point measures. On a guest whose kernel accounts steal time, a thread's CPU time leaves out the
time the host took the vCPU away; the unit's CPU time then sees only slowdowns while it ran.
"""

from __future__ import annotations

import math

from lab.declare import Col

#: The metrics column (docs/csv-schema.md).
UNIT_CPU_COLUMN = "unit_cpu_ms"

#: Its declaration, for an experiment's :attr:`lab.declare.Experiment.columns`.
COLUMNS = {
    UNIT_CPU_COLUMN: Col(
        "float",
        "CPU time of one fixed unit of the window's work on its slowest worker (each worker's CPU time over"
        " its units, the largest; `lab.workspeed`), only where the workers share nothing and are no more than"
        " the CPUs; empty elsewhere",
        "ms",
    )
}


def unit_cpu_ms(spans: list[dict], units: str | None = None) -> float:
    """CPU time of one unit of a window's work on its slowest worker, ms.

    Args:
        spans: the window's work spans, each with ``actor`` (a worker) and ``cpu_s`` (CPU time in
            the span, s); spans without ``cpu_s`` are left out.
        units: the span key holding how many units of work the span did (``steps``); None where
            every span is one unit (equal chunks of a loop).

    Returns:
        ``1000 max_a (sum of actor a's cpu_s / sum of its units)``; NaN where no span has CPU
        time and units. A span whose CPU time is negative or not a finite number, or whose units
        are not a finite positive number, is left out; spans without ``actor`` count as one worker.
    """
    cpu: dict[str, float] = {}
    done: dict[str, float] = {}
    for s in spans:
        c, n = _number(s.get("cpu_s")), (_number(s.get(units)) if units else 1.0)
        if not (c >= 0 and 0 < n < math.inf):  # NaN compares False: a span without either is left out
            continue
        actor = str(s.get("actor", ""))
        cpu[actor] = cpu.get(actor, 0.0) + c
        done[actor] = done.get(actor, 0.0) + n
    per_unit = [cpu[a] / done[a] for a in cpu if done[a] > 0]
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
