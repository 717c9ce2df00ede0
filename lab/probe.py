"""Delivered capacity, measured beside every round: a calibrated fixed-work loop on one CPU, on
the point's own number of CPUs and on all available CPUs at once.

Why: on a shared virtual machine the speed of a vCPU moves under the measurement (here the same
sequential loop ran at 12.2 tasks/s in one job and 17.2 in the next), and two vCPUs can deliver
anywhere between one and two cores (the host's SMT siblings, neighbours, frequency), which no
counter inside the guest shows. A speedup of 1.33x means "1.33x of what?" until the machine's
own capacity in the same minute is known. The probe measures it, with the same kind of work
for every point: a pure-Python counting loop (``while i < n: i += 1``), which needs one core's
integer pipeline and nothing else (no memory bandwidth, no vector units).

How: :class:`Probe` keeps ``N`` worker processes (``N`` = the available CPUs), started once per
job (one probe for all of a job's worker processes: :func:`share`) with ``python -I -S``
(standard library only, about 20 ms each), each pinned to a CPU of its own (:data:`PIN`: the
kernel otherwise woke two of them onto one CPU), each of which warms its loop up before it answers
(:data:`WARM_CALLS`: the interpreter's own warm-up must not read as the machine speeding up),
and calibrated so that one loop takes ``probe_ms``.
:meth:`Probe.measure` runs the loop on 1 worker, then on ``k`` workers at once for each level
``k`` (the point's parallel units, capped at ``N``, and ``N``): the workers wait for a common
start time on the shared monotonic clock, so they run together; a level's rate is
``k * n / (last end - first start)``, the rate of work split evenly over ``k`` CPUs, limited
by the slowest one as an evenly split parallel job is (:func:`level_wall`: up to 2 ms of a loop's
late start, its CPU woken late, does not count). The delivered CPUs at level ``k`` are that
rate over the one-CPU rate: ``k`` on a machine that gives whole cores,
less where they share a core or the host takes time.

Cost: one round of the probe takes ``probe_ms`` x (number of levels) of wall time, plus
:data:`START_SLACK_S` for each level above one CPU and pipe round trips, outside the measured
windows (with 2 CPUs and 5 ms loops, 12 ms a reading alone and a median of 12.4-15.3 ms in the
quick run's jobs, AVX2 EPYC VM, 2026-12-06); docs/benchmarks.md gives its noise
against ``probe_ms`` (how long a loop must run for the ratio to be repeatable) and the share of
the run it takes.

Usage::

    with Probe(ncpu=2, probe_ms=20) as probe:
        probe.measure(levels=(1, 2))   # {"capacity_1cpu_per_s": ..., "delivered_cpus": ..., ...}
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Iterable

#: Calls of the loop a worker makes before it answers anything. CPython 3.11 specialises a
#: function's bytecode (PEP 659) only after 8 calls of it (its warm-up counter counts entries,
#: not loop iterations; 3.12 counts backward jumps too), and the specialised loop runs about
#: 1.6x faster: measured here, 39 M iterations/s for a worker's first 7 loops and 63 M/s after.
#: Before this warm-up, the one-CPU worker (which runs at every level) sped up after a probe's
#: fourth reading and the others (all-CPU levels only) after its eighth: in between, the
#: all-CPU level waited for slow workers and "delivered" 1.23 of 2 CPUs on an idle machine.
WARM_CALLS = 16

#: The worker: ignores SIGINT (a Ctrl-C that reaches the job's whole process group is the job's
#: to handle: the worker ends when its input closes, without a traceback of its own), pins itself
#: to its CPU (``CPU``, -1: none; :data:`PIN`), warms its
#: loop up (:data:`WARM_CALLS`) and says ``ready``, then reads ``<iterations> <start
#: perf_counter s>`` lines, spins until the start time, runs the loop and answers ``<t0> <t1>``
#: (perf_counter s, CLOCK_MONOTONIC: one clock for all processes of the machine). Standard
#: library only.
_WORKER = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the job's to handle; the worker ends at its input's end
if CPU >= 0:
    try:
        os.sched_setaffinity(0, {CPU})
    except OSError:  # the CPU went offline or out of the job's cpuset since: the kernel places the loop
        pass
readline, write, flush, clock = sys.stdin.readline, sys.stdout.write, sys.stdout.flush, time.perf_counter
def spin(n):
    i = 0
    while i < n:
        i += 1
for _ in range(WARM_CALLS):
    spin(1000)
write("ready\n")
flush()
while True:
    line = readline()
    if not line:
        break
    n, start = line.split()
    n, start = int(n), float(start)
    while clock() < start:
        pass
    t0 = clock()
    spin(n)
    try:
        write(f"{t0!r} {clock()!r}\n")
        flush()
    except BrokenPipeError:  # the job is gone (killed): end without a traceback
        os._exit(0)
"""

#: Whether worker ``i`` runs on the ``i``-th CPU of the job's affinity alone (``sched_setaffinity``).
#: Left to the kernel, the two workers of the all-CPU level were often woken onto one CPU: each
#: took about 9 ms for a 5 ms loop, one of them starting 1-4 ms late behind the other's spin, and
#: the level "delivered" 0.9-1.2 of 2 CPUs on an idle machine; a 5 ms loop ends before the
#: scheduler's load balancing moves either. Pinned, a level measures what the host delivers to
#: that many vCPUs, not where the guest placed the loops. ``benchmarks/probe_pin.py`` (AVX2 EPYC
#: VM, 2026-12-06, 4 of the quick run's jobs twice, two runs): readings under 1.5 of 2 CPUs 29-31%
#: before, 17% pinned with a short late start forgiven (:data:`LATE_START_FORGIVEN_S`). The
#: readings still low are the host's: loops that lost 3-4 ms of their CPU while both ran on CPUs
#: of their own, or a one-CPU loop that ran 1.7x faster than the same loop on the other vCPU.
#: False (set by that benchmark) leaves the placement to the kernel.
PIN = True

#: How late a loop of a level may start, after the first one, and not count against the level (s;
#: :func:`level_wall`). Measured on the AVX2 EPYC VM (2026-12-06) with pinned loops: in a third of
#: the gil ``processes`` job's readings one loop began 1.4-1.6 ms after the 2 ms slack and then ran
#: its 5 ms at full speed, which counted made the level "deliver" 1.54-1.57 of 2 CPUs; the windows
#: the probe stands beside run 0.1-1 s, where a wake-up of a millisecond or two is under 2%. The
#: price, measured the same night: next to a busy process pinned to one of the 2 CPUs (whose loop
#: then gets half of that CPU, so work split evenly runs at about one CPU), 80 readings had a
#: median of 1.12-1.14 delivered CPUs with 2 ms forgiven and 0.94-0.95 with nothing forgiven; on
#: the quiet machine 1.94-1.99 either way. Not more than 2 ms: a loop that starts later because
#: another process holds its CPU is capacity the machine did not deliver. 0 (set by
#: ``benchmarks/probe_pin.py``) counts all of it.
LATE_START_FORGIVEN_S = 0.002

#: The one-CPU rate (iterations/s) a probe assumes before its first reading: the first reading's
#: one-CPU loop runs ``probe_ms`` at this rate, and the rate it measures sets every later loop
#: (:meth:`Probe.calibrate`), so no loop is run only to calibrate. The warmed loop ran 43-44 M
#: iterations/s on the AVX2 EPYC VM (2026-12-06) and 63 M/s where :data:`WARM_CALLS` was
#: measured: a first loop of 0.6-0.9 ``probe_ms`` there, its rate as valid as any loop's.
ASSUMED_RATE = 40e6

#: Time the workers of a level above one CPU wait for their common start (s): long enough for
#: every pipe write and wake-up. The one-CPU level starts at once (its worker times itself).
START_SLACK_S = 0.002

#: The columns a round's probe gives each metrics row of the round (:func:`row_columns`;
#: docs/csv-schema.md).
COLUMNS = ("capacity_1cpu_per_s", "capacity_all_per_s", "delivered_cpus", "cpus_asked", "cpus_delivered", "probe_s")


class ProbeError(RuntimeError):
    """A probe worker died or answered something unreadable; the message says which."""


class Probe:
    """The capacity probe of one job (see the module docstring).

    Args:
        ncpu: available CPUs (the all-CPU level; >= 1).
        probe_ms: wall time of one loop (ms, > 0), after calibration.
        wait: wait for the workers' start here (:meth:`wait_ready`).

    Raises:
        ValueError: for ``ncpu < 1``, or ``probe_ms`` not above 0 or not finite.
        ProbeError: for a worker that did not start (the others are ended).
    """

    def __init__(self, ncpu: int, probe_ms: float, wait: bool = True) -> None:
        if ncpu < 1:
            raise ValueError(f"ncpu must be >= 1, got {ncpu}")
        if not 0 < probe_ms < math.inf:  # before any worker starts: nothing is left to end
            raise ValueError(f"probe_ms must be > 0 and finite, got {probe_ms}")
        self.ncpu, self.probe_ms = ncpu, probe_ms
        cpus = sorted(os.sched_getaffinity(0)) if PIN and hasattr(os, "sched_setaffinity") else []
        self._procs = [
            subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", f"WARM_CALLS = {WARM_CALLS}\nCPU = {cpu}\n{_WORKER}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            for cpu in (cpus[i] if i < len(cpus) else -1 for i in range(ncpu))
        ]
        self._fastest = 0.0  # the fastest one-CPU rate seen (iterations/s)
        self.calibrate(float("nan"))  # self.iterations: ASSUMED_RATE's loop until the first reading
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait until every worker has started and warmed up (its ``ready``): none is still on a
        CPU once the job measures. :meth:`__init__` calls it unless told not to (``wait=False``:
        the workers then start while the caller does other work, and the process that made the
        probe calls it once, before any reading in whatever process).

        Raises:
            ProbeError: for a worker that did not start (the others are ended).
        """
        for p in self._procs:
            said = p.stdout.readline()
            if said != "ready\n":
                self.close()
                raise ProbeError(f"probe worker {p.pid} answered {said!r} at its start (exit code {p.poll()})")

    def calibrate(self, rate: float) -> None:
        """Set the loop's iterations so that one loop on one CPU takes ``probe_ms`` at the
        fastest one-CPU rate seen so far, ``rate`` (iterations/s) included (:data:`ASSUMED_RATE`
        while none is known). :meth:`measure` calls it after each reading's one-CPU loop, so
        that a loop the host slowed down does not leave every later loop short (measured: 5 ms
        loops that took 1.5 ms)."""
        if rate == rate:  # not NaN
            self._fastest = max(self._fastest, rate)
        self.iterations = max(1000, int((self._fastest or ASSUMED_RATE) * self.probe_ms / 1000))

    @property
    def pids(self) -> list[int]:
        """The worker processes' pids (empty once closed)."""
        return [p.pid for p in self._procs]

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _rate(self, k: int) -> tuple[float, float]:
        """``(iterations per second over k CPUs, wall s)``: the loop on workers 0..k-1 at once."""
        procs = self._procs[:k]
        start = time.perf_counter() + (START_SLACK_S if k > 1 else 0.0)  # one worker waits for no other
        line = f"{self.iterations} {start!r}\n"
        for p in procs:
            try:
                p.stdin.write(line)
                p.stdin.flush()
            except OSError as exc:  # BrokenPipeError: the worker is gone
                raise ProbeError(f"probe worker {p.pid} is gone ({exc}; exit code {p.poll()})") from None
        spans = []
        for p in procs:
            reply = p.stdout.readline()
            try:
                t0, t1 = (float(x) for x in reply.split())
            except ValueError:
                raise ProbeError(f"probe worker {p.pid} answered {reply!r} (exit code {p.poll()})") from None
            spans.append((t0, t1))
        wall = level_wall(spans)
        return (k * self.iterations / wall if wall > 0 else float("nan")), time.perf_counter() - start

    def measure(self, levels: Iterable[int] = ()) -> dict:
        """One probe: the loop on one CPU, then on ``k`` CPUs at once for each of ``levels``
        (capped at ``ncpu``) and for ``ncpu``.

        Returns:
            ``capacity_1cpu_per_s`` (loop iterations per second on one CPU),
            ``capacity_all_per_s`` (on all available CPUs at once), ``delivered_cpus``
            (their ratio: CPUs the machine delivered with all of them busy),
            ``delivered_cpus_at`` (``{k: delivered CPUs with k busy}``, 1 for ``k`` = 1) and
            ``probe_s`` (wall time the probe took, s).
        """
        t = time.perf_counter()
        one, _ = self._rate(1)
        self.calibrate(one)  # the loop of this reading's other levels and of the next reading
        ks = sorted(({min(max(1, int(k)), self.ncpu) for k in levels} | {self.ncpu}) - {1})
        at = {1: 1.0}
        for k in ks:
            at[k] = self._rate(k)[0] / one
        return {
            "capacity_1cpu_per_s": one,
            "capacity_all_per_s": one * at[self.ncpu],
            "delivered_cpus": at[self.ncpu],
            "delivered_cpus_at": at,
            "probe_s": time.perf_counter() - t,
        }

    def close(self) -> None:
        """End the workers (they exit at the end of their input)."""
        for p in self._procs:
            if p.poll() is None:
                try:
                    p.stdin.close()
                except (BrokenPipeError, OSError):
                    pass
        for p in self._procs:
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                p.kill()
        self._procs = []


def level_wall(spans: list[tuple[float, float]]) -> float:
    """The wall time of one level's loops, from their ``(t0, t1)`` spans (s): the span from the
    first start to the last end, as for work split evenly over ``k`` CPUs, less up to
    :data:`LATE_START_FORGIVEN_S` of a late start (a CPU woken late), but never less than the
    slowest loop's own time. A loop that shared its CPU takes longer either way; loops that
    never ran at once (one began after another ended) count their whole span.

    Raises:
        ValueError: for no spans.
    """
    if not spans:
        raise ValueError("level_wall needs the spans of at least one loop")
    first_end, last_start = min(t1 for _, t1 in spans), max(t0 for t0, _ in spans)
    span = max(t1 for _, t1 in spans) - min(t0 for t0, _ in spans)
    if last_start >= first_end:
        return span
    return max(max(t1 - t0 for t0, t1 in spans), span - LATE_START_FORGIVEN_S)


#: The probe a job's worker processes share (:func:`shared`); None elsewhere.
_shared: Probe | None = None


def share(probe: Probe | None) -> None:
    """Make ``probe`` the one :func:`shared` returns (None: no shared probe). :mod:`lab.workers`
    makes a job's probe before it forks the worker processes, which measure one at a time
    (:mod:`lab.turns`): each uses the probe's processes in its turn, through its own copy of
    the pipes, so a job of 3 workers starts 2 probe processes on 2 CPUs instead of 6 (the
    job's process ends them once every worker has ended)."""
    global _shared
    _shared = probe


def shared() -> Probe | None:
    """The job's shared probe (:func:`share`), inherited by its worker processes; None where
    there is none (one worker, a job run by hand, a test): the caller makes its own then."""
    return _shared


def delivered_at(at: dict, k: int) -> float:
    """Delivered CPUs with ``k`` CPUs busy from a probe's ``delivered_cpus_at``: its value at the
    largest level measured not above ``k`` (``k`` above the available CPUs gets the all-CPU
    value); 1 for ``k <= 1``."""
    below = [x for x in at if x <= k]
    return float(at[max(below)]) if k > 1 and below else 1.0


def row_columns(reading: dict, asked: int, ncpu: int) -> dict:
    """The metrics columns of :data:`COLUMNS` for a window whose work asks for ``asked`` CPUs at
    once (its Params' ``cpus_requested()``), from the round's ``reading`` (:meth:`Probe.measure`):
    the probe's rates and ``delivered_cpus`` as they are, ``cpus_asked`` (``asked`` capped at
    the ``ncpu`` available) and ``cpus_delivered`` (delivered CPUs with that many busy)."""
    k = min(max(1, int(asked)), ncpu)
    out = {c: reading[c] for c in ("capacity_1cpu_per_s", "capacity_all_per_s", "delivered_cpus", "probe_s")}
    return out | {"cpus_asked": k, "cpus_delivered": delivered_at(reading["delivered_cpus_at"], k)}


if __name__ == "__main__":  # python -m lab.probe [probe_ms]: one reading, for a look by hand
    ms = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    with Probe(len(os.sched_getaffinity(0)), ms) as pr:
        for _ in range(5):
            r = pr.measure()
            print({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()})
