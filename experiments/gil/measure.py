"""GIL experiment, measurement: do threads speed up CPU-bound Python? I/O-bound Python? Processes?
C code that releases the GIL? Under which interpreter?

Reproduces the seed article's experiment (A: two pure-Python counting loops; B: loops that
``time.sleep(0.01)`` every iteration), adds C code that releases the GIL (``hashlib.sha256``) and
threads contending on one shared list and dict, and runs each as ``workers`` tasks

* ``sequential``: one after another in the main thread;
* ``threads``: one ``threading.Thread`` per task;
* ``processes``: one ``multiprocessing.Process`` per task (start method ``fork``).

The tasks run in a child process under the point's interpreter (config ``interpreters``, see
:mod:`lab.interpreters`): :mod:`lab.pytasks`, standard library only, started
once per point and role and kept for all its rounds. The measured window, the CPU sampler and
the CSV writing stay here, in the pipeline's Python; the window opens before the request is sent
and closes after the child's answer arrives (a pipe round trip, about 0.1 ms, against windows of
0.1 s and more).

The clock starts before the first worker is created and stops after *all* workers are joined
(the article's thread version joined only one). Creating the threads or processes is part of the
measured cost, as it is for a user. Each task is cut into ``chunks`` pieces; for every piece the
worker records a span: its wall start and end (``time.perf_counter``, CLOCK_MONOTONIC,
comparable across processes) and the thread CPU time spent inside (``time.thread_time``), so
``cpu_s / (end_s - start_s)`` is the share of the span the worker was actually on a CPU.

Expected: with the GIL, CPU-bound threads about 1x, sleeping threads and threads in C code that
releases the GIL about ``min(workers, CPUs)``x (sleepers ``workers``x), processes about
``min(workers, CPUs)``x on CPU-bound work; on a free-threaded build with the GIL off,
CPU-bound threads scale like processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lab import interpreters
from lab.params import Declared, param, repeats_field, sample_hz_field
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.window import Meter
from lab.workspeed import CLOCK_COLUMN, UNIT_COLUMN, clock_of, unit_ms

#: The measured code, started by path under the point's interpreter.
PAYLOAD = Path(interpreters.__file__).with_name("pytasks.py")


@dataclass(frozen=True)
class Params(Declared):
    """One configuration point of the gil experiment (declared once: :mod:`lab.params`).

    Raises:
        ValueError: for a value outside its bounds (the message names the field).
    """

    interpreter: str = param("default", in_config=False, help="label of an entry of config interpreters")
    workload: Literal["cpu", "io", "release", "shared"] = param(
        "cpu",
        config=["cpu", "io", "release", "shared"],
        help="cpu: pure-Python counting loop; io: loop with time.sleep; release: hashlib.sha256 "
        "(C code that releases the GIL); shared: threads on one shared list and dict",
    )
    mode: Literal["sequential", "threads", "processes"] = param(
        "sequential",
        config=["sequential", "threads", "processes"],
        help="sequential: tasks one after another; threads: a thread per task; processes: a process per task",
    )
    workers: int = param(2, min=1, config=[2, 4], help="tasks per run (and threads or processes)", quick=[2])
    cpu_iterations: int = param(
        12_000_000,
        min=1,
        config=3_000_000,
        help="loop iterations per CPU-bound task",
        quick=4_000_000,
        quick_why="0.1-0.3 s per task, by the machine",
    )
    io_iterations: int = param(100, min=1, config=25, help="sleeps per I/O-bound task", quick=15)
    io_sleep_s: float = param(0.01, min=0, unit="s", help="sleep per I/O iteration")
    release_iterations: int = param(400, min=1, config=100, help="sha256 digests per release task")
    release_kb: int = param(1024, min=1, unit="KiB", help="data hashed per digest")
    shared_iterations: int = param(
        4_000_000,
        min=1,
        config=1_000_000,
        help="append, pop and dict update rounds per shared task",
        quick=1_200_000,
    )
    chunks: int = param(20, min=1, help="spans recorded per task")
    repeats: int = repeats_field(6)
    warmup: int = param(1, min=0, help="untimed runs, a tenth of a task each, before the repeats")
    sample_hz: float = sample_hz_field()

    def cpus_requested(self) -> int:
        """CPUs this point asks for at once: ``workers`` threads or processes (1 when sequential)."""
        return 1 if self.mode == "sequential" else self.workers

    @property
    def iterations(self) -> int:
        """Iterations of one task of this point's workload."""
        return {
            "cpu": self.cpu_iterations,
            "io": self.io_iterations,
            "release": self.release_iterations,
            "shared": self.shared_iterations,
        }[self.workload]

    def task_spec(self) -> dict:
        """The request :mod:`lab.pytasks` runs (``{"run": spec}``)."""
        keys = ("mode", "workers", "io_sleep_s", "release_kb", "chunks")
        return {**{k: getattr(self, k) for k in keys}, "load": self.workload, "iterations": self.iterations}


class Runner:
    """One gil point made ready to measure: its interpreter started when created, warmed up by :meth:`warm_up`."""

    def __init__(self, params: Params, meter: Meter, entry: dict) -> None:
        self.params, self.meter = params, meter
        self.child = interpreters.Child(entry, PAYLOAD)
        self.request = {"run": params.task_spec()}
        # the work's own speed (lab.workspeed): processes, or tasks one after another, of work that
        # is not sleeping, on no more processes than CPUs (threads slow each other down by design)
        self.shares_nothing = (
            params.mode != "threads" and params.workload != "io" and params.cpus_requested() <= meter.ncpu
        )

    def warm_up(self) -> None:
        """Wait for the interpreter, then run the untimed warm-up (:meth:`lab.interpreters.Child.warm_up`)."""
        self.child.warm_up(self.request, self.params.warmup)

    def once(self) -> Measured:
        """Run the point's tasks once inside a measured window."""
        p = self.params
        with self.meter.window() as win:
            reply = self.child.ask(self.request)
        spans = [{**s, "start_s": s["start_s"] - win.t0, "end_s": s["end_s"] - win.t0} for s in reply["spans"]]
        row = {"tasks_per_s": p.workers / win.wall_s, "start_method": "fork" if p.mode == "processes" else ""}
        said = self.child.hello  # what the interpreter said of itself when it started
        # threads of the CPU-bound loop under the GIL: one runs at a time, so each unit by its CPU time
        gil_bound = p.mode == "threads" and p.workload == "cpu" and p.workers > 1 and said["gil_enabled"]
        row[UNIT_COLUMN] = unit_ms(reply["spans"], cpu=gil_bound) if self.shares_nothing or gil_bound else float("nan")
        row[CLOCK_COLUMN] = clock_of(row[UNIT_COLUMN], gil_bound)
        row |= {"python_version": said["version"], "free_threaded": said["free_threaded"]}
        row["gil_enabled"] = said["gil_enabled"]
        return Measured(win, row, spans)

    def close(self) -> None:
        self.child.close()


def run(
    params: Params, baseline: Params | None = None, host_files: dict | None = None, rounds: Rounds | None = None
) -> RunResult:
    """Measure ``params.repeats`` rounds of a point, interleaved with ``baseline`` if given,
    under the point's interpreter (its entry in ``host_files["interpreters.json"]``).

    Returns:
        A :class:`~lab.results.RunResult` with one row per repeat and role: ``wall_s``
        (s), ``tasks_per_s`` (tasks/s), ``cpu_util_pct`` (0-100), ``start_method``, and what
        the interpreter said of itself: ``python_version``, ``free_threaded`` (its build) and
        ``gil_enabled`` (``sys._is_gil_enabled()`` in the measured process); spans as
        described in the module docstring, with ``cpu_s`` (s of thread CPU time). A point whose
        interpreter (or its baseline's: each runs under its own ``interpreter``) is missing or
        does not start is skipped with the reason.

    Raises:
        lab.results.PointError: an interpreter label that is not in ``interpreters.json``.
    """
    known = interpreters.known(host_files)
    entries = {}
    for p in (params, baseline) if baseline is not None else (params,):
        entries[p.interpreter] = interpreters.find(known, p.interpreter)
        if not entries[p.interpreter]["ok"]:
            return RunResult.skipped(entries[p.interpreter]["reason"])
    return interleave(lambda p, meter: Runner(p, meter, entries[p.interpreter]), params, baseline, rounds=rounds)
