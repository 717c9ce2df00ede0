"""Single-thread cost, measurement: one task of pure Python under the point's interpreter,
interleaved in the same job with the same task under the reference interpreter.

The reference is the first entry of config ``interpreters`` (by default the pipeline's own
Python; put a GIL build first). Both run :mod:`lab.pytasks` sequentially (one task, in
the child's main thread), each in its own child process started once and kept for every round;
rounds alternate A B B A (:func:`lab.results.interleave`), so the ratio of their
throughputs, which the analysis reports as the speedup over the reference, is measured under the
same machine load. A point of the reference itself is skipped (its ratio is 1 by definition).

Expected (the issue's reference figures, CPython's own benchmarks): a free-threaded build runs
one thread about 5-10% slower on 3.14t and up to 40% slower on 3.13t than a GIL build; the same
free-threaded binary with ``PYTHON_GIL=1`` keeps most of that cost (it still has per-object
locking compiled in).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lab import interpreters
from lab.cli import cli_main
from lab.params import check_min
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from experiments.singlethread import EXPERIMENT
from lab.window import Meter

#: The measured code, started by path under the point's interpreter.
TASKS = Path(interpreters.__file__).with_name("pytasks.py")


@dataclass(frozen=True)
class Params:
    """One configuration point of the singlethread experiment.

    Raises:
        ValueError: for a count below its minimum (the message names the field).
    """

    interpreter: str = field(default="default", metadata={"help": "label of an entry of config interpreters"})
    workload: Literal["cpu", "release", "shared"] = "cpu"
    cpu_iterations: int = field(default=12_000_000, metadata={"help": "loop iterations of the cpu task"})
    release_iterations: int = field(default=400, metadata={"help": "sha256 digests of the release task"})
    release_kb: int = field(default=1024, metadata={"help": "KiB hashed per digest"})
    shared_iterations: int = field(default=4_000_000, metadata={"help": "append, pop and dict update rounds"})
    repeats: int = 6
    warmup: int = field(default=1, metadata={"help": "untimed runs, a tenth of a task each, before the repeats"})
    sample_hz: float = 10.0

    def cpus_requested(self) -> int:
        """One thread at a time."""
        return 1

    def __post_init__(self) -> None:
        for name in ("cpu_iterations", "release_iterations", "release_kb", "shared_iterations", "repeats"):
            check_min(name, getattr(self, name), 1)
        check_min("warmup", self.warmup, 0)
        check_min("sample_hz", self.sample_hz, 0.1)

    def task_spec(self) -> dict:
        """The request :mod:`lab.pytasks` runs: one sequential task, one span."""
        iterations = getattr(self, f"{self.workload}_iterations")
        spec = {"load": self.workload, "mode": "sequential", "workers": 1, "chunks": 1}
        return spec | {"iterations": iterations, "io_sleep_s": 0.0, "release_kb": self.release_kb}


class Runner:
    """One interpreter made ready to measure: started, warm-up runs done."""

    def __init__(self, params: Params, meter: Meter, entry: dict) -> None:
        self.meter, self.entry = meter, entry
        self.child = interpreters.Child(entry, TASKS)
        self.request = {"run": params.task_spec()}
        self.child.warm_up(self.request, params.warmup)

    def once(self) -> Measured:
        """Run the task once inside a measured window."""
        with self.meter.window() as win:
            self.child.ask(self.request)
        said = self.child.hello
        row = {"tasks_per_s": 1.0 / win.wall_s, "python_version": said["version"]}
        row |= {"free_threaded": said["free_threaded"], "gil_enabled": said["gil_enabled"]}
        return Measured(win, row)

    def close(self) -> None:
        self.child.close()


def run(
    params: Params, baseline: Params | None = None, host_files: dict | None = None, rounds: Rounds | None = None
) -> RunResult:
    """Measure ``params.repeats`` rounds of the point's interpreter against the reference (the
    first entry of ``interpreters.json``), interleaved.

    Returns:
        A :class:`~lab.results.RunResult`: per round a ``point`` row (this interpreter)
        and a ``baseline`` row (the reference, its ``interpreter`` column naming it), with
        ``wall_s`` (s), ``tasks_per_s`` (tasks/s), ``python_version``, ``free_threaded`` and
        ``gil_enabled``. Skipped: the reference itself, or an interpreter (either) that did not
        start, with the reason.
    """
    known = interpreters.known(host_files)
    entries = {e["label"]: e for e in known["interpreters"]}
    reference = known["interpreters"][0]
    if params.interpreter == reference["label"]:
        return RunResult.skipped(
            f"{params.interpreter} is the reference interpreter (the first of config interpreters)"
        )
    mine = interpreters.find(known, params.interpreter)
    for entry in (mine, reference):
        if not entry["ok"]:
            return RunResult.skipped(entry["reason"])
    ref = dataclasses.replace(params, interpreter=reference["label"])
    return interleave(lambda p, meter: Runner(p, meter, entries[p.interpreter]), params, ref, rounds=rounds)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: ``python -m experiments.singlethread --help``."""
    return cli_main(EXPERIMENT.name, Params, run, __doc__.splitlines()[0], argv)
