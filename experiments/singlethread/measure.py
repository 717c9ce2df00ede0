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
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lab import interpreters
from lab.params import Declared, param, sample_hz_field
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.window import Meter

#: The measured code, started by path under the point's interpreter.
TASKS = Path(interpreters.__file__).with_name("pytasks.py")


@dataclass(frozen=True)
class Params(Declared):
    """One configuration point of the singlethread experiment (declared once: :mod:`lab.params`).

    Raises:
        ValueError: for a value outside its bounds (the message names the field).
    """

    interpreter: str = param("default", in_config=False, help="label of an entry of config interpreters")
    workload: Literal["cpu", "release", "shared"] = param(
        "cpu",
        config=["cpu", "shared"],
        help="cpu: pure-Python counting loop; release: hashlib.sha256 (C code); "
        "shared: list appends, pops and dict updates",
    )
    cpu_iterations: int = param(12_000_000, min=1, help="loop iterations of the cpu task", quick=2_000_000)
    release_iterations: int = param(400, min=1, help="sha256 digests of the release task")
    release_kb: int = param(1024, min=1, unit="KiB", help="data hashed per digest")
    shared_iterations: int = param(
        4_000_000, min=1, help="append, pop and dict update rounds of the shared task", quick=600_000
    )
    # repeats_field cannot take a config default: the section measures 7 rounds, a point 6
    repeats: int = param(
        6, min=1, config=7, help="interleaved rounds a point measures at least (95% intervals need 6)", quick=6
    )
    warmup: int = param(1, min=0, help="untimed runs, a tenth of a task each, before the repeats")
    sample_hz: float = sample_hz_field()

    def cpus_requested(self) -> int:
        """One thread at a time."""
        return 1

    def task_spec(self) -> dict:
        """The request :mod:`lab.pytasks` runs: one sequential task, one span."""
        iterations = getattr(self, f"{self.workload}_iterations")
        spec = {"load": self.workload, "mode": "sequential", "workers": 1, "chunks": 1}
        return spec | {"iterations": iterations, "io_sleep_s": 0.0, "release_kb": self.release_kb}


class Runner:
    """One interpreter made ready to measure: started when created, warmed up by :meth:`warm_up`."""

    def __init__(self, params: Params, meter: Meter, entry: dict) -> None:
        self.meter, self.entry, self.warmup = meter, entry, params.warmup
        self.child = interpreters.Child(entry, TASKS)
        self.request = {"run": params.task_spec()}

    def warm_up(self) -> None:
        """Wait for the interpreter, then run the untimed warm-up (:meth:`lab.interpreters.Child.warm_up`)."""
        self.child.warm_up(self.request, self.warmup)

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
