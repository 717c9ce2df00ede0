"""Self-check of the measurement machinery: does the CPU sampler report a known load right?

Two windows per repeat, on a target whose CPU use is known:

* ``busy``: the main thread busy-loops for ``duration_s``: the process tree uses at most one
  CPU. The sampler's ``tree`` series must average what the kernel accounts to the process
  over the same window (``process_cpu_pct``, from ``time.process_time``, i.e.
  CLOCK_PROCESS_CPUTIME_ID). On a machine that delivers a whole CPU that is
  ``100 / available CPUs`` %; on a VM whose vCPU is shared (steal time) or under other load it
  is less, and the sampler must read the lower value, not the ideal one;
* ``idle``: the main thread sleeps for ``duration_s``: the tree uses about nothing, and the
  sampler's own CPU time (``sampler_cpu_pct``, % of one CPU) is its cost at ``sample_hz``.

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
        "busy", help="busy: the main thread loops; idle: it sleeps (the job measures both)", in_config=False
    )
    duration_s: float = param(1.0, min=0.2, unit="s", help="length of each window", quick=0.5)
    repeats: int = repeats_field(3, help="windows of each load")
    sample_hz: float = sample_hz_field()


#: Its config section, ``selfcheck:``, whose JSON Schema is generated from :class:`Params` like an
#: experiment's (:mod:`lab.schema`).
SECTION = Section("selfcheck", "self-check of the CPU sampler (busy and idle windows)", Params, __file__, COLUMNS)


class Runner:
    """Busy-loops or sleeps for one window."""

    def __init__(self, params: Params, meter: Meter) -> None:
        self.params, self.meter = params, meter

    def once(self) -> Measured:
        p = self.params
        with self.meter.window() as win:
            cpu0 = time.process_time()
            if p.load == "busy":
                end = time.perf_counter() + p.duration_s
                while time.perf_counter() < end:
                    pass
            else:
                time.sleep(p.duration_s)
            cpu_s = time.process_time() - cpu0
        ncpu = self.meter.ncpu
        tree = [v for _, s, v in win.samples if s == "tree"]
        row = {
            "sampler_tree_pct": sum(tree) / len(tree) if tree else float("nan"),
            "expected_tree_pct": 100.0 / ncpu if p.load == "busy" else 0.0,
            "process_cpu_pct": 100.0 * cpu_s / (win.wall_s * ncpu) if win.wall_s > 0 else float("nan"),
            "samples": len(tree),
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
        samples in the window), ``sampler_cpu_pct`` (the sampler's own CPU, % of one CPU),
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
