"""Start-method experiment: DataLoader epochs whose workers start with fork, spawn or forkserver.

The ``num_workers`` workers are started with ``multiprocessing_context=start_method``.

Every measured window is one epoch with a NEW DataLoader (``persistent_workers=False``), so
it pays for starting its workers and for shutting them down, as every epoch of a training
loop without persistent workers does. The dataset is in memory: a ``TensorDataset`` of
``batches`` x ``batch_size`` samples of 3 features and 1 target (the seed article's shape);
the main loop only receives the batches, so what is measured is the loader itself. The
tensors are picklable; spawn and forkserver workers receive them through shared memory.

What each start method does per epoch (Python 3.11 on Linux, where fork is the default):

* ``fork``: every worker is a copy of the main process, torch already imported: a few ms.
* ``spawn`` (the default on macOS and Windows, and needed with CUDA in workers or with
  threads in the parent): every worker is a fresh interpreter that imports torch again when
  it unpickles its arguments, every epoch (a first batch after 1.1-1.2 s with two workers on
  the 2-vCPU development VM, against fork's 30-50 ms), and exits through the interpreter's
  full shutdown (about 0.5 s there, counted in ``shutdown_ms``). Nothing of an epoch is left
  warm for the next, so a spawn runner runs no warm-up epoch (:func:`warmup_epochs`).
* ``forkserver``: a server process is started once per process (here in the runner's set-up,
  by ``multiprocessing.forkserver.ensure_running``, so every measured epoch finds it running);
  every worker is forked from it. The server is a fresh interpreter that imports only the modules
  ``multiprocessing.set_forkserver_preload`` names (none here; with ``["torch"]``, tried by
  hand, a warm epoch's first batch came as fast as fork's), so each worker still imports torch
  every epoch: its first batch comes about as late as spawn's; only the interpreter's
  start-up and its full shutdown are saved (workers leave with ``os._exit``).

Columns per window (ms, batches/s, epochs/s):

* ``first_batch_ms``: from creating the iterator (``iter(loader)``) to receiving the first
  batch: worker start-up included.
* ``steady_batches_per_s``: batches after the start-up round over their time. The first
  ``num_workers`` x ``prefetch_factor`` (2) batches are requested the moment the iterator
  starts and produced while the workers come up (a slow start-up delivers them at once
  afterwards), so the steady state is timed from the arrival of the last of them to the
  arrival of the last batch.
* ``shutdown_ms``: from the last batch to the end of iteration (the loader joins its workers).
* ``epochs_per_s`` = 1 / window wall time (the metric: higher is better; the speedup over fork
  is its median of per-round ratios).

The main process runs with ``threads`` intra-op threads (default 1).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

from lab.params import Declared, param, repeats_field, sample_hz_field
from lab.pressure import oversubscribed
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.threads import set_torch_threads
from lab.window import Meter

#: Batches each worker is asked for ahead (the DataLoader's ``prefetch_factor``, its default).
PREFETCH = 2


@dataclass(frozen=True)
class Params(Declared):
    """One configuration point of the start-method experiment (declared once: :mod:`lab.params`).

    Raises:
        ValueError: for a value outside its bounds (the message names the field), or
            ``batches`` not above ``num_workers`` x 2 (no batch left for the steady state).
    """

    start_method: Literal["fork", "spawn", "forkserver"] = param(
        "fork",
        config=["fork", "spawn", "forkserver"],
        help="multiprocessing start method of the DataLoader workers (spawn and forkserver workers import torch)",
    )
    num_workers: int = param(2, min=1, help="DataLoader worker processes")
    batch_size: int = param(32, min=1, unit="samples", help="samples per batch (the seed article's 32)")
    batches: int = param(
        100,
        min=2,
        help="batches per epoch; above num_workers x 2 (the start-up round); the rest is the steady state",
        quick=50,
    )
    threads: int = param(1, min=1, help="intra-op threads of the main process")
    warmup_epochs: int = param(
        1,
        min=0,
        help="untimed epochs first, under fork; forkserver starts its server instead, spawn keeps nothing warm",
    )
    repeats: int = repeats_field(6, help="measured epochs, each with a new DataLoader")
    sample_hz: float = sample_hz_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batches <= self.num_workers * PREFETCH:
            raise ValueError(
                f"batches={self.batches} is out of range; it must be > num_workers x {PREFETCH} ="
                f" {self.num_workers * PREFETCH} (the batches requested at start-up)"
            )

    def cpus_requested(self) -> int:
        """CPUs this point asks for at once: DataLoader workers plus the main process's intra-op threads."""
        return self.num_workers + self.threads


@dataclass
class Epoch:
    """``perf_counter`` times (s) of one epoch: the iterator created, each batch received, the
    iteration ended (workers joined)."""

    t_iter: float
    marks: list[float]
    t_end: float

    def first_batch_ms(self) -> float:
        """Iterator created to first batch received (ms)."""
        return 1e3 * (self.marks[0] - self.t_iter)

    def steady_batches_per_s(self, startup: int) -> float:
        """Batches after the first ``startup`` over the time from the ``startup``-th to the last (batches/s)."""
        if len(self.marks) <= startup or self.marks[-1] <= self.marks[startup - 1]:
            return math.nan
        return (len(self.marks) - startup) / (self.marks[-1] - self.marks[startup - 1])

    def shutdown_ms(self) -> float:
        """Last batch received to the end of iteration (ms)."""
        return 1e3 * (self.t_end - self.marks[-1])


def make_dataset(params: Params):
    """The in-memory ``TensorDataset``: ``batches`` x ``batch_size`` samples, features float32[3], target float32[1]."""
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(0)
    n = params.batches * params.batch_size
    return TensorDataset(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g))


def warmup_epochs(params: Params) -> int:
    """Warm-up epochs a runner runs: ``params.warmup_epochs`` under fork, none otherwise.

    Spawn keeps nothing warm: its workers are new interpreters every epoch and the main process
    keeps no server. Measured: spawn's first epoch without a warm-up took 0.99-1.04x the later
    ones' median on an Intel Xeon VM with AMX (2026-12-04, two jobs of 6 epochs each way), and
    0.83-1.19x (median 0.95) on an Intel Xeon VM with AVX-512 earlier that day.

    Forkserver keeps its server warm, and nothing else: the runner starts the server directly
    (:meth:`Runner.__init__`) instead of running an epoch whose workers import torch. Measured
    on the AMX Xeon VM (2026-12-05, at 9defba3, before this rule, when ``python -m lab.point
    startmethod --start-method forkserver --warmup-epochs 0|1`` still chose; two jobs each way):
    without a warm-up the first epoch's first batch came 3-5% later than the later epochs'
    median (950 and 968 ms against 915 and 914: the server's start); after a warm-up epoch the
    epochs matched (the first 932 and 847 ms against a median 946 and 893). A warm-up epoch cost
    a forkserver job 3 s before its first window, its two worker processes' four DataLoader
    workers importing torch at once (docs/benchmarks.md)."""
    return params.warmup_epochs if params.start_method == "fork" else 0


class Runner:
    """The dataset and thread settings; every epoch (warm-up or measured) builds a new DataLoader.
    Its warm-up epochs: :func:`warmup_epochs`; under forkserver, the server started here."""

    def __init__(self, params: Params, meter: Meter) -> None:
        self.params, self.meter = params, meter
        self.info = set_torch_threads(params.threads)
        self.dataset = make_dataset(params)
        if params.start_method == "forkserver":
            import multiprocessing.forkserver

            multiprocessing.forkserver.ensure_running()
        for _ in range(warmup_epochs(params)):
            self.epoch()

    def epoch(self) -> Epoch:
        """One epoch with a new DataLoader; its times."""
        from torch.utils.data import DataLoader

        p = self.params
        loader = DataLoader(
            self.dataset,
            batch_size=p.batch_size,
            num_workers=p.num_workers,
            persistent_workers=False,
            prefetch_factor=PREFETCH,
            multiprocessing_context=p.start_method,
        )
        t_iter = time.perf_counter()
        marks = []
        for _batch in loader:  # the last next() joins the workers
            marks.append(time.perf_counter())
        return Epoch(t_iter, marks, time.perf_counter())

    def once(self) -> Measured:
        """One measured epoch (a new DataLoader: worker start-up and shutdown included)."""
        p = self.params
        self.info = set_torch_threads(p.threads)
        with self.meter.window() as win:
            epoch = self.epoch()
        row = {
            "epochs_per_s": 1.0 / win.wall_s,
            "batches_per_s": len(epoch.marks) / win.wall_s,
            "first_batch_ms": epoch.first_batch_ms(),
            "steady_batches_per_s": epoch.steady_batches_per_s(p.num_workers * PREFETCH),
            "shutdown_ms": epoch.shutdown_ms(),
            "oversubscribed": oversubscribed(p.cpus_requested(), self.meter.ncpu, win.cpu_wait_pct),
            **self.info,
        }
        return Measured(win, row)

    def close(self) -> None:
        pass  # each epoch's workers have exited; forkserver's server ends with the process


def run(params: Params, baseline: Params | None = None, rounds: Rounds | None = None) -> RunResult:
    """Measure ``params.repeats`` epochs, interleaved with ``baseline``'s (fork) if given.

    Returns:
        A :class:`~lab.results.RunResult` with one row per epoch and role: ``wall_s`` (s),
        ``epochs_per_s`` (epochs/s), ``batches_per_s`` (all batches over the window, batches/s),
        ``first_batch_ms`` (ms), ``steady_batches_per_s`` (batches/s), ``shutdown_ms`` (ms),
        ``cpu_util_pct`` (0-100, workers included), ``oversubscribed`` (workers + main threads >
        available CPUs), ``torch_threads``/``interop_threads`` as torch reported them.
    """
    return interleave(Runner, params, baseline, rounds=rounds)
