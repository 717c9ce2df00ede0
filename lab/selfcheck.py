"""Self-check of the measurement machinery: does the CPU sampler report a known load right?

Two windows per repeat, on a target whose CPU use is known:

* ``busy``: the main thread busy-loops for ``duration_s``: the process tree uses at most one
  CPU. The sampler's ``tree`` series must average what the kernel accounts to the process
  over the same window (``process_cpu_pct``, from ``time.process_time``, i.e.
  CLOCK_PROCESS_CPUTIME_ID). On a machine that delivers a whole CPU that is
  ``100 / available CPUs`` %; on a VM whose vCPU is shared (steal time) or under other load it
  is less, and the sampler must read the lower value, not the ideal one;
* ``idle``: for ``duration_s`` the main thread wakes ``sample_hz`` times a second and reads
  ``/proc/stat`` and ``/proc/self/stat`` once each time, the least a sampler can do per sample,
  and otherwise sleeps: the tree uses about nothing, and the sampler's own CPU time
  (``sampler_cpu_pct``, % of one CPU) is its cost at ``sample_hz``. The main thread's CPU time
  per wake-up (``wake_read_ms``) is what this machine charges for that least, measured beside
  the sampler in the same window: on a VM, waking an idle vCPU costs far more than the work
  (0.08 ms for a whole sample in a hot loop, 1.0-1.6 ms woken 40 times a second and 2.5-4.2 ms
  woken 10 times, on the 2-vCPU Xeon VM), and it moves with the host, so the sampler's cost is
  judged against it (:mod:`analysis.fidelity`).

The report's "Can these numbers be trusted?" section compares both with expectations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from lab.cli import measure_point
from lab.declare import Col, Section
from lab.params import Declared, param, repeats_field, sample_hz_field
from lab.results import Measured, RunResult, interleave
from lab.window import Meter

EXPERIMENT = "selfcheck"

#: The columns its rows hold besides the parameters and the lab's own (docs/csv-schema.md).
COLUMNS = {
    "sampler_tree_pct": Col(
        "float",
        "mean of the window's `tree` samples (docs/csv-schema.md, section 2.2); `nan` if none",
        "% (0-100) of the available CPUs",
    ),
    "expected_tree_pct": Col(
        "float",
        "the ideal: `100 / available_cpus` for `busy` (one busy-looping thread on a whole CPU), 0.0 for `idle`",
        "% (0-100)",
    ),
    "process_cpu_pct": Col(
        "float",
        "CPU time the kernel accounted to the process over the window (`time.process_time`, CLOCK_PROCESS_CPUTIME_ID)"
        " / (`wall_s` x `available_cpus`); what the sampler must read. Below `expected_tree_pct` when the host did "
        "not give the loop a whole CPU",
        "% (0-100) of the available CPUs",
    ),
    "samples": Col("int", "number of `tree` samples in the window", "samples"),
    "wake_read_ms": Col(
        "float",
        "`idle` only (`nan` for `busy`): the main thread's CPU time per wake-up, waking `sample_hz` times a second"
        " and reading /proc/stat and /proc/self/stat once each time: this machine's cost of the least a sampler"
        " can do per sample",
        "ms",
    ),
}


@dataclass(frozen=True)
class Params(Declared):
    """Parameters of the self-check, declared once (:mod:`lab.params`): its config section
    ``selfcheck``'s schema, its command line and its table in docs/parameters.md come from here
    (:data:`SECTION`).

    Raises:
        ValueError: for a value outside its declared bounds (the message names the field).
    """

    load: Literal["busy", "idle"] = param(
        "busy",
        help="busy: the main thread loops; idle: it sleeps but for two /proc reads at the sample rate"
        " (the job measures both)",
        in_config=False,
    )
    duration_s: float = param(1.0, min=0.2, unit="s", help="length of each window", quick=0.5)
    repeats: int = repeats_field(3, help="windows of each load")
    sample_hz: float = sample_hz_field()


#: Its config section, ``selfcheck:``, whose JSON Schema is generated from :class:`Params` like an
#: experiment's (:mod:`lab.schema`).
SECTION = Section("selfcheck", "self-check of the CPU sampler (busy and idle windows)", Params, __file__, COLUMNS)


#: What the least of samplers reads per sample: the machine's CPU times and its target's.
READS = ("/proc/stat", "/proc/self/stat")


def wake_and_read(duration_s: float, hz: float) -> float:
    """Sleep for ``duration_s`` (s) but wake ``hz`` times a second to read :data:`READS` once.

    Returns:
        The CPU time of this process per wake-up (ms; ``time.process_time`` over the
        ``int(duration_s * hz)`` wake-ups), NaN where ``duration_s`` holds none (``hz`` below
        ``1 / duration_s``). The call lasts ``duration_s`` either way.
    """
    n = int(duration_s * hz)
    start, cpu0 = time.monotonic(), time.process_time()
    for i in range(1, n + 1):
        time.sleep(max(0.0, start + i / hz - time.monotonic()))
        for path in READS:
            with open(path, "rb") as fh:
                fh.read()
    per_wake_ms = 1e3 * (time.process_time() - cpu0) / n if n else float("nan")
    time.sleep(max(0.0, start + duration_s - time.monotonic()))
    return per_wake_ms


class Runner:
    """Busy-loops, or sleeps but for a read at the sample rate, for one window."""

    def __init__(self, params: Params, meter: Meter) -> None:
        self.params, self.meter = params, meter

    def once(self) -> Measured:
        p = self.params
        with self.meter.window() as win:
            cpu0, wake_read_ms = time.process_time(), float("nan")
            if p.load == "busy":
                end = time.perf_counter() + p.duration_s
                while time.perf_counter() < end:
                    pass
            else:
                wake_read_ms = wake_and_read(p.duration_s, p.sample_hz)
            cpu_s = time.process_time() - cpu0
        ncpu = self.meter.ncpu
        tree = [v for _, s, v in win.samples if s == "tree"]
        row = {
            "sampler_tree_pct": sum(tree) / len(tree) if tree else float("nan"),
            "expected_tree_pct": 100.0 / ncpu if p.load == "busy" else 0.0,
            "process_cpu_pct": 100.0 * cpu_s / (win.wall_s * ncpu) if win.wall_s > 0 else float("nan"),
            "samples": len(tree),
            "wake_read_ms": wake_read_ms,
        }
        return Measured(win, row)

    def close(self) -> None:
        pass


def run(params: Params, baseline: Params | None = None) -> RunResult:
    """Measure ``params.repeats`` windows (interleaved with ``baseline``'s load if given).

    Returns:
        Rows with ``sampler_tree_pct`` (mean of the sampler's tree series, 0-100),
        ``expected_tree_pct`` (the ideal: one whole CPU when busy), ``process_cpu_pct`` (the
        process's own CPU time over the window, % of the available CPUs), ``samples`` (tree
        samples in the window), ``wake_read_ms`` (idle: the machine's cost per wake-up of the least a
        sampler does, ms), ``sampler_cpu_pct`` (the sampler's own CPU, % of one CPU),
        ``cpu_util_pct`` and ``interference_pct``.
    """
    return interleave(Runner, params, baseline)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: ``python -m lab.selfcheck --help``."""
    return measure_point(
        EXPERIMENT,
        Params,
        run,
        __doc__.splitlines()[0],
        argv=argv,
        prog="python -m lab.selfcheck",
        columns=COLUMNS,
        columns_at=f"COLUMNS ({__file__})",
    )


if __name__ == "__main__":
    raise SystemExit(main())
