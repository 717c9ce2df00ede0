"""Intra-op threads experiment: throughput against ``torch.set_num_threads``.

Workloads (``workload``):

* ``matmul``: ``a @ b`` with two ``matmul_size`` x ``matmul_size`` float32 matrices;
  metric ``gflop_per_s`` = 2 n^3 x calls / wall time / 1e9 (the standard 2n^3 flop count
  of a dense square matrix product).
* ``matmul_bf16``: the same product in bfloat16, the CPU training and inference dtype of
  Intel's AMX and AVX512_BF16 and of ``torch.autocast("cpu")``. Only CPUs with native bf16
  instructions (avx512_bf16 or AMX, as torch detects them) gain from it; elsewhere torch
  converts to float32 and back. With ``bf16="native"`` (the default) such a point is written
  with status ``skipped`` and the reason; ``bf16="any"`` measures it anyway.
* ``mlp``: one SGD training step of an MLP (64 -> 256 -> 256 -> 10) on a batch of
  ``batch_size``; metric ``samples_per_s``.
* ``tiny``: a training step of ``Linear(100, 100)`` on a batch of 4, the case from the field
  where one thread is fastest: per-op work is too small to amortise waking a thread pool.

The intra-op thread count is set explicitly with ``torch.set_num_threads`` (and read back);
inter-op threads are set to 1. Before every measured window the thread count is set again
(an interleaved baseline may use another) and ``warmup`` untimed iterations run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

from lab.capabilities import native_bf16
from lab.params import Declared, param, repeats_field, sample_hz_field
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.threads import set_torch_threads
from lab.window import Meter


@dataclass(frozen=True)
class Params(Declared):
    """One configuration point of the intraop experiment (declared once: :mod:`lab.params`).

    Raises:
        ValueError: for a value outside its bounds (the message names the field).
    """

    workload: Literal["matmul", "matmul_bf16", "mlp", "tiny"] = param(
        "matmul",
        config=["matmul", "matmul_bf16", "mlp", "tiny"],
        help="matmul, matmul_bf16: a square matrix product; mlp: an MLP training step; "
        "tiny: a step too small for threads",
        quick=["matmul", "matmul_bf16", "tiny"],
        quick_why="matmul_bf16 is skipped on CPUs without native bf16",
    )
    threads: int = param(
        1,
        min=1,
        config="auto",
        symbols=("auto",),
        help=(
            "intra-op threads (torch.set_num_threads); auto: 1, 2, 4, ... up to the available CPUs"
            " and their number, plus 2 x available CPUs"
        ),
    )
    matmul_size: int = param(1024, min=1, help="side of the square matrices of the matmul workloads")
    batch_size: int = param(256, min=1, unit="samples", help="batch of the mlp workload")
    iterations: int = param(
        20,
        min=1,
        per_key=True,
        config={"matmul": 20, "matmul_bf16": 20, "mlp": 50, "tiny": 2000},
        help="timed calls per repeat, per workload, at least (more where they take under min_window_s)",
        quick={"matmul": 8, "matmul_bf16": 8, "mlp": 20, "tiny": 200},
    )
    # Two untimed calls after the thread count changes. On an AMD EPYC VM the first call after a
    # switch to 2 threads ran 5-16% slower than settled calls and the second within 4%. On an
    # Intel Xeon VM the second ran 27% (matmul) and 12% (mlp) slow in one of two readings (3% and
    # 5% in the other), the third within 6% in both (benchmarks/warmup.py, docs/benchmarks.md);
    # in the same minutes, with one untimed call, the lab's 2-thread matmul read 1.67x over one
    # thread, against 1.75x and 1.76x with two or three. The extra call costs about 0.4 s of the
    # quick run's 66 intraop windows.
    warmup: int = param(
        2,
        min=0,
        help=(
            "untimed iterations before every window of 2 or more threads (and every matmul_bf16 window),"
            " after its thread count is set"
        ),
    )
    # On an AMX Xeon a 1024^2 bfloat16 matmul takes 2 ms: 8 calls were 16 ms windows, shorter than
    # one interval of the CPU sampler at 40 Hz, and 43% of a quick run's windows under 0.1 s read
    # as contended on an idle machine (the kernel's 10 ms CPU-time ticks; docs/benchmarks.md).
    # 0.2 s, not 0.1: a round's fixed cost (the probe, the sampler's edges, the two warm-up
    # calls) is 30-45 ms, a quarter of a round of two 0.1 s windows; the spread of one round's
    # ratio was no larger at 0.25 s than at 0.07 s (benchmarks/window_length.py).
    min_window_s: float = param(
        0.2,
        min=0,
        unit="s",
        help="shortest window: where `iterations` calls take less (a fast CPU), a window runs more (`calls`)",
    )
    repeats: int = repeats_field(6)
    sample_hz: float = sample_hz_field()
    bf16: Literal["native", "any"] = param(
        "native",
        help=(
            "matmul_bf16 points: measured only where the CPU has native bf16 (native; elsewhere"
            " skipped with the reason) or always (any)"
        ),
    )

    def cpus_requested(self) -> int:
        """CPUs this point asks for at once: the intra-op threads."""
        return self.threads


#: Workloads whose first call at one thread after a switch from more runs slow: the bfloat16
#: matmul ran its first 1-thread call 37% slow on an AMX Xeon VM. The float32 workloads' first
#: 1-thread calls ran at 0.97-1.03x their settled calls on three VMs (AMD EPYC 2026-12-03 and
#: 2026-12-06, Intel Xeon, AMX Xeon: benchmarks/warmup.py, docs/benchmarks.md), so their
#: 1-thread windows skip the warm-up: one thread wakes no pool.
COLD_AT_ONE_THREAD = frozenset({"matmul_bf16"})


def make_workload(params: Params):
    """Return ``(fn, samples_per_call, flop_per_call)`` for ``params.workload``."""
    import torch

    from lab.models import classification_batch, mlp, train_step_fn

    torch.manual_seed(0)
    if params.workload in ("matmul", "matmul_bf16"):
        n = params.matmul_size
        dtype = torch.bfloat16 if params.workload == "matmul_bf16" else torch.float32
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        return (lambda: a @ b), 0, 2.0 * n**3
    if params.workload == "mlp":
        model = mlp(64, 256)
        x, y = classification_batch(params.batch_size, 64)
        step = train_step_fn(model)
        return (lambda: step(x, y)), params.batch_size, 0.0
    model = torch.nn.Sequential(torch.nn.Linear(100, 100))
    x, y = classification_batch(4, 100, classes=100)
    step = train_step_fn(model)
    return (lambda: step(x, y)), 4, 0.0


def calls_per_window(fn, params: Params) -> int:
    """Calls of ``fn`` per window: ``params.iterations``, or as many as fill
    ``params.min_window_s`` where those take less, from the fastest of calls timed one by one
    now (at least 2 calls and 20 ms; untimed by the windows). The fastest call is what a call
    costs with the CPUs to itself; a mean over calls the machine slowed would give short
    windows. Threads must be set and the workload warmed up first."""
    n, fastest, spent = 0, math.inf, 0.0
    while n < 2 or spent < 0.02:
        t0 = time.perf_counter()
        fn()
        took = time.perf_counter() - t0
        n, fastest, spent = n + 1, min(fastest, took), spent + took
    return max(params.iterations, math.ceil(params.min_window_s / fastest)) if fastest > 0 else params.iterations


class Runner:
    """A workload built once; every window first sets its thread count and warms up. The
    window's calls are counted in the worker's turn, before its first window (:mod:`lab.turns`):
    in the set-up, which a job's worker processes make together, the other workers' set-up
    slowed the calls timed and left the 2-thread windows of a 3-worker job at 0.1 s, half
    ``min_window_s`` (measured: 8 calls of a 1024^2 matmul, against 14-16 in 1 worker). A
    window that ran faster than the count assumed raises the count of the windows after it
    (never lowers it), so a count taken while the host was slow does not shorten them all."""

    def __init__(self, params: Params, meter: Meter) -> None:
        self.params, self.meter = params, meter
        set_torch_threads(params.threads, inter_op=1)
        self.fn, self.samples, self.flop = make_workload(params)
        for _ in range(params.warmup):  # the set-up's warm-up: first calls allocate and page in
            self.fn()
        self.calls = 0  # counted before the first window (calls_per_window)

    def once(self) -> Measured:
        """Set the threads (interleaved points use other counts), warm up, time ``self.calls`` calls."""
        p = self.params
        info = set_torch_threads(p.threads, inter_op=1)
        if p.threads > 1 or p.workload in COLD_AT_ONE_THREAD:
            for _ in range(p.warmup):  # untimed: lets a resized thread pool settle
                self.fn()
        if not self.calls:
            self.calls = calls_per_window(self.fn, p)
        with self.meter.window() as win:
            for _ in range(self.calls):
                self.fn()
        calls = self.calls
        if win.wall_s > 0:  # a faster window than the count assumed: the next ones run longer
            self.calls = max(calls, math.ceil(p.min_window_s * calls / win.wall_s))
        row = {
            "gflop_per_s": self.flop * calls / win.wall_s / 1e9 if self.flop else float("nan"),
            "samples_per_s": self.samples * calls / win.wall_s if self.samples else float("nan"),
            "calls": calls,
            "oversubscribed": p.cpus_requested() > self.meter.ncpu,
            "dtype": "bfloat16" if p.workload == "matmul_bf16" else "float32",
            **info,
        }
        return Measured(win, row)

    def close(self) -> None:
        pass


def run(params: Params, baseline: Params | None = None, rounds: Rounds | None = None) -> RunResult:
    """Measure ``params.repeats`` repeats of ``params.iterations`` calls each (more where they
    take less than ``params.min_window_s``: :func:`calls_per_window`), interleaved with
    ``baseline`` (typically 1 thread) if given.

    Returns:
        A :class:`~lab.results.RunResult` with one row per repeat and role: ``wall_s``
        (s), ``gflop_per_s`` (matmul) or ``samples_per_s`` (mlp, tiny), ``calls`` (per
        window), ``cpu_util_pct``,
        ``torch_threads``/``interop_threads`` as torch reported them, ``omp_num_threads_env``,
        ``oversubscribed`` (threads > available CPUs) and ``dtype``; or, for ``matmul_bf16``
        on a CPU without native bf16 and ``bf16="native"``, one row with status ``skipped``
        and the reason.

    Raises:
        RuntimeError: if torch does not report the requested thread counts.
    """
    if params.workload == "matmul_bf16" and params.bf16 == "native":
        supported, what = native_bf16()
        if not supported:
            reason = (
                f"no native bfloat16 on this CPU ({what}): torch would convert to float32 and back; "
                "set intraop.bf16: any to measure it anyway"
            )
            info = set_torch_threads(params.threads, inter_op=1)
            return RunResult.skipped(reason, **info)
    return interleave(Runner, params, baseline, rounds=rounds)
