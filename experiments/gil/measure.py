"""GIL experiment, measurement: do threads speed up CPU-bound Python? I/O-bound Python? Processes?

Reproduces the seed article's experiment (A: two pure-Python counting loops; B: loops that
``time.sleep(0.01)`` every iteration) and extends it to ``workers`` tasks run

* ``sequential``: one after another in the main thread;
* ``threads``: one ``threading.Thread`` per task;
* ``processes``: one ``multiprocessing.Process`` per task (start method ``fork``).

The clock starts before the first worker is created and stops after *all* workers are
joined (the article's thread version joined only one). Creating the threads or processes is
part of the measured cost, as it is for a user.

Each task is cut into ``chunks`` pieces; for every piece the worker records a span: its wall
start and end (``time.perf_counter``, CLOCK_MONOTONIC, comparable across processes) and the
thread CPU time spent inside (``time.thread_time``), so ``cpu_s / (end_s - start_s)`` is the
share of the span the worker was actually on a CPU. With two CPU-bound threads each is on
CPU about half of its wall time: the GIL hands the interpreter back and forth.

Expected (CPython with the GIL): CPU-bound threads give about 1x, sleeping threads about
``workers``x, processes about ``min(workers, available CPUs)``x on CPU-bound work.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

from experiments.cli import cli_main
from experiments.gil import EXPERIMENT
from experiments.host import die_with_parent
from experiments.params import check_min
from experiments.results import Measured, RunResult, interleave
from experiments.window import Meter


@dataclass(frozen=True)
class Params:
    """One configuration point of the gil experiment.

    Raises:
        ValueError: for a count below its minimum (the message names the field).
    """

    workload: Literal["cpu", "io"] = field(default="cpu", metadata={"help": "cpu: counting loop; io: sleep loop"})
    mode: Literal["sequential", "threads", "processes"] = "sequential"
    workers: int = field(default=2, metadata={"help": "number of tasks (and threads or processes)"})
    cpu_iterations: int = field(default=12_000_000, metadata={"help": "loop iterations per CPU-bound task"})
    io_iterations: int = field(default=100, metadata={"help": "sleeps per I/O-bound task"})
    io_sleep_s: float = field(default=0.01, metadata={"help": "seconds slept per I/O iteration"})
    chunks: int = field(default=20, metadata={"help": "spans recorded per task"})
    repeats: int = 3
    warmup: int = field(default=1, metadata={"help": "untimed runs before the repeats"})
    sample_hz: float = 10.0

    def cpus_requested(self) -> int:
        """CPUs this point asks for at once: ``workers`` threads or processes (1 when sequential)."""
        return 1 if self.mode == "sequential" else self.workers

    def __post_init__(self) -> None:
        check_min("workers", self.workers, 1)
        check_min("cpu_iterations", self.cpu_iterations, 1)
        check_min("io_iterations", self.io_iterations, 1)
        check_min("io_sleep_s", self.io_sleep_s, 0)
        check_min("chunks", self.chunks, 1)
        check_min("repeats", self.repeats, 1)
        check_min("warmup", self.warmup, 0)
        check_min("sample_hz", self.sample_hz, 0.1)

    @property
    def chunk_sizes(self) -> list[int]:
        """Iterations per chunk; they add up to the task's iterations."""
        total = self.cpu_iterations if self.workload == "cpu" else self.io_iterations
        n = min(self.chunks, total)
        base, extra = divmod(total, n)
        return [base + (1 if i < extra else 0) for i in range(n)]


def count(n: int) -> None:
    """The seed's CPU-bound loop: ``for i in range(n): i = i + 1`` (pure bytecode)."""
    for i in range(n):
        i = i + 1  # noqa: PLW2901 - the seed's loop, kept verbatim


def sleep_loop(n: int, sleep_s: float) -> None:
    """The seed's I/O-bound loop: ``n`` iterations of a count step and ``time.sleep``."""
    for i in range(n):
        i = i + 1  # noqa: PLW2901
        time.sleep(sleep_s)


def task(params: Params, actor: str, t0: float) -> list[dict]:
    """Run one task in the calling thread and return its spans (seconds from ``t0``)."""
    spans = []
    for k, size in enumerate(params.chunk_sizes):
        w0, c0 = time.perf_counter(), time.thread_time()
        if params.workload == "cpu":
            count(size)
        else:
            sleep_loop(size, params.io_sleep_s)
        w1, c1 = time.perf_counter(), time.thread_time()
        spans.append(
            {
                "actor": actor,
                "kind": params.workload,
                "start_s": w0 - t0,
                "end_s": w1 - t0,
                "cpu_s": c1 - c0,
                "chunk": k,
            }
        )
    return spans


def _process_target(params: Params, actor: str, t0: float, queue) -> None:
    die_with_parent()
    queue.put(task(params, actor, t0))


def run_once(params: Params, t0: float) -> list[dict]:
    """Run ``params.workers`` tasks in the configured mode; return all spans."""
    spans: list[dict] = []
    if params.mode == "sequential":
        for i in range(params.workers):
            for s in task(params, "main", t0):
                spans.append({**s, "task": i})
    elif params.mode == "threads":
        results: list[list[dict]] = [[] for _ in range(params.workers)]

        def target(i: int) -> None:
            results[i] = task(params, f"thread-{i}", t0)

        threads = [threading.Thread(target=target, args=(i,)) for i in range(params.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, r in enumerate(results):
            spans.extend({**s, "task": i} for s in r)
    else:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.SimpleQueue()
        procs = [
            ctx.Process(target=_process_target, args=(params, f"process-{i}", t0, queue)) for i in range(params.workers)
        ]
        for p in procs:
            p.start()
        collected = [queue.get() for _ in procs]  # drain before join: a full pipe blocks
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise RuntimeError(f"worker process exited with code {p.exitcode}")
        for r in collected:
            i = int(r[0]["actor"].split("-")[1])
            spans.extend({**s, "task": i} for s in r)
    return spans


class Runner:
    """One gil point made ready to measure (warm-up runs done on creation)."""

    def __init__(self, params: Params, meter: Meter) -> None:
        self.params, self.meter = params, meter
        for _ in range(params.warmup):
            run_once(params, time.perf_counter())

    def once(self) -> Measured:
        """Run the point's tasks once inside a measured window."""
        p = self.params
        with self.meter.window() as win:
            spans = run_once(p, win.t0)
        row = {"tasks_per_s": p.workers / win.wall_s, "start_method": "fork" if p.mode == "processes" else ""}
        return Measured(win, row, spans)

    def close(self) -> None:
        pass


def run(params: Params, baseline: Params | None = None) -> RunResult:
    """Measure ``params.repeats`` rounds of a point, interleaved with ``baseline`` if given.

    Returns:
        A :class:`~experiments.results.RunResult` with one row per repeat and role: ``wall_s``
        (s), ``tasks_per_s`` (tasks/s), ``cpu_util_pct`` (0-100), ``start_method``; spans as
        described in the module docstring, with ``cpu_s`` (s of thread CPU time).
    """
    return interleave(Runner, params, baseline)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: ``python -m experiments.gil --help``."""
    return cli_main(EXPERIMENT.name, Params, run, __doc__.splitlines()[0], argv)
