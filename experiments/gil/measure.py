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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lab import interpreters
from lab.cli import cli_main
from experiments.gil import EXPERIMENT
from lab.params import check_min
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.window import Meter

#: The measured code, started by path under the point's interpreter.
PAYLOAD = Path(interpreters.__file__).with_name("pytasks.py")


@dataclass(frozen=True)
class Params:
    """One configuration point of the gil experiment.

    Raises:
        ValueError: for a count below its minimum (the message names the field).
    """

    interpreter: str = field(default="default", metadata={"help": "label of an entry of config interpreters"})
    workload: Literal["cpu", "io", "release", "shared"] = field(
        default="cpu",
        metadata={
            "help": "cpu: counting loop; io: sleep loop; release: sha256 (releases the GIL); shared: one list and dict"
        },
    )
    mode: Literal["sequential", "threads", "processes"] = "sequential"
    workers: int = field(default=2, metadata={"help": "number of tasks (and threads or processes)"})
    cpu_iterations: int = field(default=12_000_000, metadata={"help": "loop iterations per CPU-bound task"})
    io_iterations: int = field(default=100, metadata={"help": "sleeps per I/O-bound task"})
    io_sleep_s: float = field(default=0.01, metadata={"help": "seconds slept per I/O iteration"})
    release_iterations: int = field(default=400, metadata={"help": "sha256 digests per release task"})
    release_kb: int = field(default=1024, metadata={"help": "KiB hashed per digest"})
    shared_iterations: int = field(default=4_000_000, metadata={"help": "appends and dict updates per shared task"})
    chunks: int = field(default=20, metadata={"help": "spans recorded per task"})
    repeats: int = 6
    warmup: int = field(default=1, metadata={"help": "untimed runs, a tenth of a task each, before the repeats"})
    sample_hz: float = 10.0

    def cpus_requested(self) -> int:
        """CPUs this point asks for at once: ``workers`` threads or processes (1 when sequential)."""
        return 1 if self.mode == "sequential" else self.workers

    def __post_init__(self) -> None:
        for name in ("workers", "cpu_iterations", "io_iterations", "release_iterations", "release_kb"):
            check_min(name, getattr(self, name), 1)
        check_min("shared_iterations", self.shared_iterations, 1)
        check_min("io_sleep_s", self.io_sleep_s, 0)
        check_min("chunks", self.chunks, 1)
        check_min("repeats", self.repeats, 1)
        check_min("warmup", self.warmup, 0)
        check_min("sample_hz", self.sample_hz, 0.1)

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
    """One gil point made ready to measure: its interpreter started, warm-up runs done."""

    def __init__(self, params: Params, meter: Meter, entry: dict) -> None:
        self.params, self.meter = params, meter
        self.child = interpreters.Child(entry, PAYLOAD)
        self.request = {"run": params.task_spec()}
        self.child.warm_up(self.request, params.warmup)

    def once(self) -> Measured:
        """Run the point's tasks once inside a measured window."""
        p = self.params
        with self.meter.window() as win:
            reply = self.child.ask(self.request)
        spans = [{**s, "start_s": s["start_s"] - win.t0, "end_s": s["end_s"] - win.t0} for s in reply["spans"]]
        row = {"tasks_per_s": p.workers / win.wall_s, "start_method": "fork" if p.mode == "processes" else ""}
        said = self.child.hello  # what the interpreter said of itself when it started
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
        interpreter is missing or does not start is skipped with the probe's reason.
    """
    probe = interpreters.find(interpreters.known(host_files), params.interpreter)
    if not probe["ok"]:
        return RunResult.skipped(probe["reason"])
    return interleave(lambda p, meter: Runner(p, meter, probe), params, baseline, rounds=rounds)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: ``python -m experiments.gil --help``."""
    return cli_main(EXPERIMENT.name, Params, run, __doc__.splitlines()[0], argv)
