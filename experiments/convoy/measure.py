"""Convoy effect, measurement: one thread that sleeps ``io_sleep_s`` per iteration next to one
CPU-bound thread, under the point's interpreter and ``sys.setswitchinterval``; interleaved in
the same job (A B B A), the sleeping thread alone (role ``baseline``).

With the GIL, a thread that wakes from ``time.sleep`` must get the GIL back from the counting
thread, which holds it until the switch interval has passed since the waiter asked
(python/cpython#90204, the convoy effect): each iteration takes the sleep plus up to one switch
interval. Without the GIL (a free-threaded build, ``PYTHON_GIL=0``) it wakes on time when a CPU
is free. Each window records every sleep iteration as a span with its ``latency_ms`` (how much
longer than the sleep it took) and the window's median and 99th percentile of those (the
distribution itself is in spans.csv); the counting thread's chunks are spans too, with the
thread CPU time inside them (who held the CPU).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path

from lab import interpreters
from lab.params import Declared, param, repeats_field, sample_hz_field
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.window import Meter

TASKS = Path(interpreters.__file__).with_name("pytasks.py")
#: The convoy's own threads, loaded by path in the child (:func:`lab.pytasks.load_requests`).
CONVOY_TASKS = Path(__file__).with_name("tasks.py")


@dataclass(frozen=True)
class Params(Declared):
    """One configuration point of the convoy experiment (declared once: :mod:`lab.params`).

    Raises:
        ValueError: for a value outside its bounds (the message names the field).
    """

    interpreter: str = param("default", in_config=False, help="label of an entry of config interpreters")
    switch_interval_ms: float = param(
        5.0, above=0, config=[0.5, 5, 50], unit="ms", help="sys.setswitchinterval (CPython's default: 5)"
    )
    io_iterations: int = param(50, min=1, config=25, help="sleeps per window", quick=20)
    io_sleep_s: float = param(0.01, above=0, unit="s", help="sleep per iteration")
    cpu_chunk: int = param(200_000, min=1, help="loop iterations per counting span")
    neighbour: bool = param(True, in_config=False, help="run the CPU-bound thread (False: the sleeper alone)")
    repeats: int = repeats_field(6)
    warmup: int = param(1, min=0, help="untimed runs, a tenth of a window each, before the repeats")
    sample_hz: float = sample_hz_field()

    def cpus_requested(self) -> int:
        """Two threads, one of them asleep most of the time: one CPU."""
        return 1

    def request(self) -> dict:
        """The request :func:`experiments.convoy.tasks.convoy` runs."""
        keys = ("io_iterations", "io_sleep_s", "cpu_chunk", "neighbour")
        return {"convoy": {**{k: getattr(self, k) for k in keys}, "switch_interval_s": self.switch_interval_ms / 1000}}


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear interpolation between order
    statistics (``statistics.quantiles`` with ``method="inclusive"``, numpy's default)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if q < 100 else max(values)


class Runner:
    """One side of a convoy point (with or without the CPU-bound thread): its interpreter started
    when created, warmed up by :meth:`warm_up`."""

    def __init__(self, params: Params, meter: Meter, entry: dict) -> None:
        self.params, self.meter = params, meter
        self.child = interpreters.Child(entry, TASKS, extra=(CONVOY_TASKS,))

    def warm_up(self) -> None:
        """Wait for the interpreter, then run the untimed warm-up (:meth:`lab.interpreters.Child.warm_up`)."""
        self.child.warm_up(self.params.request(), self.params.warmup)

    def once(self) -> Measured:
        """One window: the sleeper's iterations (and the neighbour's chunks)."""
        p = self.params
        with self.meter.window() as win:
            reply = self.child.ask(p.request())
        spans = [{**s, "start_s": s["start_s"] - win.t0, "end_s": s["end_s"] - win.t0} for s in reply["spans"]]
        late = [s["latency_ms"] for s in spans if s["kind"] == "io"]
        said = self.child.hello
        row = {"io_iterations_per_s": p.io_iterations / win.wall_s, "python_version": said["version"]}
        row |= {"gil_enabled": said["gil_enabled"], "latency_p50_ms": statistics.median(late)}
        row["latency_p99_ms"] = percentile(late, 99)
        return Measured(win, row, spans)

    def close(self) -> None:
        self.child.close()


def run(
    params: Params, baseline: Params | None = None, host_files: dict | None = None, rounds: Rounds | None = None
) -> RunResult:
    """Measure ``params.repeats`` rounds of the sleeping thread next to the CPU-bound one
    (``point``) and alone (``baseline``), interleaved, under the point's interpreter.

    Returns:
        A :class:`~lab.results.RunResult`: rows with ``wall_s`` (s),
        ``io_iterations_per_s`` (iterations/s of the sleeper), ``latency_p50_ms`` and
        ``latency_p99_ms`` (ms late per iteration, over the window's iterations),
        ``python_version``, ``gil_enabled``, ``neighbour``; spans of kind ``io`` (each sleep
        iteration, with ``latency_ms``) and ``cpu`` (counting chunks, with ``cpu_s``). Skipped
        when the interpreter did not start, with the reason.
    """
    known = interpreters.known(host_files)
    entry = interpreters.find(known, params.interpreter)
    if not entry["ok"]:
        return RunResult.skipped(entry["reason"])
    alone = dataclasses.replace(params, neighbour=False)
    return interleave(
        lambda p, meter: Runner(p, meter, entry), dataclasses.replace(params, neighbour=True), alone, rounds=rounds
    )
