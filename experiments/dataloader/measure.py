"""DataLoader experiment: training throughput against ``num_workers`` for three kinds of data.

Datasets (``dataset``):

* ``tensor``: the seed article's in-memory ``TensorDataset(randn(items, 3), randn(items, 1))``;
  ``__getitem__`` is almost free, so worker processes only add inter-process transfer cost.
* ``cpu``: every ``__getitem__`` does a fixed amount of single-threaded numpy work
  (``np.sort(np.sin(...))`` over ``cpu_work_size`` floats; about 200 us at 4096 on a 2.5 GHz
  Xeon), the stand-in for decoding and augmentation.
* ``io``: every ``__getitem__`` sleeps ``io_latency_s``, the stand-in for reading from disk or
  network; sleeping releases the GIL and uses no CPU.

The main loop runs one SGD step of a ``Linear(3, 1)`` regression per batch. One measured
repeat is one whole epoch; ``samples_per_s`` = items / epoch wall time. Workers are persistent
(``persistent_workers=True``) and ``warmup_epochs`` untimed epochs start them first, so the
metric is the steady state; the first warm-up epoch's duration (worker start-up included) is
kept in ``first_epoch_s``. A warm-up epoch is short (:class:`WarmupSampler`): the first
:func:`warmup_batches` batches of its order, two for each worker (each worker then has started,
imported what its ``__getitem__`` needs and sent batches back) and two without workers. It ends
as a whole epoch does (the sampler runs out), so the loader is left as after one: a whole epoch
of the ``io`` data took 13 s of the default run outside its windows, for nothing a measured
epoch reads.

In the main process every batch gives two spans: ``wait`` (inside ``next(iterator)``: the
training loop is stalled on data) and ``step`` (the training step). ``data_stall_pct`` is the
share of the epoch spent waiting. Every batch also gives a ``fetch`` span measured where the
batch was made: in worker ``i`` (actor ``worker-<i>``) or, with ``num_workers = 0``, in the
main process inside its ``wait``. It starts before the first ``__getitem__`` of the batch and
ends after collation (:mod:`lab.fetch`); ``time.perf_counter`` is
CLOCK_MONOTONIC, so worker and main-process times share one axis.

Asking for more workers than PyTorch suggests for the machine makes it warn ("suggested max
number of worker"); the warning is captured into ``worker_warning``, never fatal.
Start method: ``fork`` (the Linux default). The main process runs with ``threads``
intra-op threads (default 1), so no OpenMP pool is active when workers are forked.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Literal

from lab.fetch import TimedFetch, loop_spans, timed_collate
from lab.params import Declared, param, repeats_field, sample_hz_field
from lab.pressure import oversubscribed
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.threads import set_torch_threads
from lab.window import Meter


@dataclass(frozen=True)
class Params(Declared):
    """One configuration point of the dataloader experiment (declared once: :mod:`lab.params`).

    Raises:
        ValueError: for a value outside its bounds (the message names the field).
    """

    dataset: Literal["tensor", "cpu", "io"] = param(
        "tensor",
        config=["tensor", "cpu", "io"],
        help="tensor: in-memory TensorDataset; cpu: numpy work per item; io: a sleep per item",
    )
    num_workers: int = param(0, min=0, config=[0, 1, 2, 4], help="DataLoader worker processes", quick=[0, 2])
    batch_size: int = param(32, min=1, unit="samples", help="samples per batch (the seed article's 32)")
    items: int = param(
        10_000,
        min=1,
        per_key=True,
        config={"tensor": 20000, "cpu": 3000, "io": 500},
        unit="samples",
        help="samples per epoch, per dataset",
        quick={"tensor": 8000, "cpu": 1200, "io": 200},
    )
    cpu_work_size: int = param(4096, min=1, unit="floats", help="numpy work per item of dataset cpu (about 200 us)")
    io_latency_s: float = param(0.002, min=0, unit="s", help="sleep per item of dataset io (simulated I/O)")
    threads: int = param(1, min=1, help="intra-op threads of the main (training) process")
    warmup_epochs: int = param(
        1, min=0, help="untimed epochs first, of 2 batches per worker (they start the persistent workers)"
    )
    repeats: int = repeats_field(6, help="measured epochs")
    sample_hz: float = sample_hz_field()
    start_method: Literal["fork", "forkserver", "spawn"] = param(
        "fork",
        in_config=False,
        help="multiprocessing start method of the workers (the startmethod experiment sweeps it)",
    )

    def cpus_requested(self) -> int:
        """CPUs this point asks for at once: DataLoader workers plus the main process's intra-op threads."""
        return self.num_workers + self.threads


class CpuDataset:
    """Items that cost a fixed amount of numpy CPU work: ``(x: float32[3], y: float32[1])``."""

    def __init__(self, items: int, work_size: int) -> None:
        import numpy as np

        self.items = items
        self.base = np.arange(work_size, dtype=np.float64)

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        v = np.sort(np.sin(self.base + i))
        x = torch.tensor([v[0], v[len(v) // 2], v[-1]], dtype=torch.float32)
        return x, x.sum(0, keepdim=True)


class SleepDataset:
    """Items that cost ``latency_s`` of sleeping (simulated I/O), no CPU: ``(x[3], y[1])``."""

    def __init__(self, items: int, latency_s: float) -> None:
        import torch

        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(items, 3, generator=g)
        self.latency_s = latency_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        time.sleep(self.latency_s)
        x = self.x[i]
        return x, x.sum(0, keepdim=True)


def make_dataset(params: Params):
    """Build the dataset named by ``params.dataset`` (see the module docstring)."""
    import torch
    from torch.utils.data import TensorDataset

    if params.dataset == "tensor":
        g = torch.Generator().manual_seed(0)
        return TensorDataset(torch.randn(params.items, 3, generator=g), torch.randn(params.items, 1, generator=g))
    if params.dataset == "cpu":
        return CpuDataset(params.items, params.cpu_work_size)
    return SleepDataset(params.items, params.io_latency_s)


def warmup_batches(params: Params) -> int:
    """Batches of one warm-up epoch: two per DataLoader worker, two without workers."""
    return 2 * max(1, params.num_workers)


class WarmupSampler:
    """A random order of ``n`` indices per epoch, drawn as ``RandomSampler(generator=...)``
    draws it (``torch.randperm``), cut after ``limit`` indices while ``limit`` is set (the
    warm-up epochs) and whole after. The DataLoader asks its sampler for a new order every epoch
    (persistent workers too), so setting ``limit`` changes the epochs that follow."""

    def __init__(self, n: int, generator) -> None:
        self.n, self.generator, self.limit = n, generator, None

    def __len__(self) -> int:
        return self.n if self.limit is None else min(self.n, self.limit)

    def __iter__(self):
        import torch

        yield from torch.randperm(self.n, generator=self.generator).tolist()[: len(self)]


class Runner:
    """A DataLoader (persistent workers started by the warm-up epochs), a model and an optimiser."""

    def __init__(self, params: Params, meter: Meter) -> None:
        import torch
        from torch.utils.data import DataLoader

        self.params, self.meter = params, meter
        self.info = set_torch_threads(params.threads)
        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.loss_fn = torch.nn.MSELoss()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.sampler = WarmupSampler(params.items, torch.Generator().manual_seed(0))
            self.sampler.limit = warmup_batches(params) * params.batch_size
            self.loader = DataLoader(
                TimedFetch(make_dataset(params)),
                batch_size=params.batch_size,
                collate_fn=timed_collate,
                sampler=self.sampler,
                num_workers=params.num_workers,
                persistent_workers=params.num_workers > 0,
                multiprocessing_context=params.start_method if params.num_workers > 0 else None,
            )
            self.first_epoch_s = float("nan")
            for e in range(params.warmup_epochs):
                t = time.perf_counter()
                for _batch in self.loader:
                    pass
                if e == 0:
                    self.first_epoch_s = time.perf_counter() - t
            self.sampler.limit = None  # the measured epochs are whole
        self.worker_warning = " | ".join(str(w.message) for w in caught if "worker" in str(w.message))

    def once(self) -> Measured:
        """One measured epoch: fetch every batch and run a training step on it."""
        p = self.params
        self.info = set_torch_threads(p.threads)
        stall = 0.0
        marks = []
        with self.meter.window() as win:
            it = iter(self.loader)
            while True:
                t0 = time.perf_counter()
                try:
                    (x, y), fetched = next(it)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                self.opt.zero_grad(set_to_none=True)
                self.loss_fn(self.model(x), y).backward()
                self.opt.step()
                t2 = time.perf_counter()
                stall += t1 - t0
                marks.append((t0, t1, t2, fetched))
        spans = loop_spans(marks, win.t0)
        row = {
            "samples_per_s": p.items / win.wall_s,
            "batches_per_s": len(marks) / win.wall_s,
            "data_stall_pct": 100.0 * stall / win.wall_s,
            "first_epoch_s": self.first_epoch_s,
            "worker_warning": self.worker_warning,
            "oversubscribed": oversubscribed(p.cpus_requested(), self.meter.ncpu, win.cpu_wait_pct),
            **self.info,
        }
        return Measured(win, row, spans)

    def close(self) -> None:
        del self.loader  # shuts persistent workers down


def run(params: Params, baseline: Params | None = None, rounds: Rounds | None = None) -> RunResult:
    """Measure ``params.repeats`` epochs, interleaved with ``baseline``'s epochs if given.

    Returns:
        A :class:`~lab.results.RunResult` with one row per epoch and role: ``wall_s``
        (s), ``samples_per_s``, ``batches_per_s``, ``data_stall_pct`` (0-100), ``cpu_util_pct``
        (0-100, workers included), ``first_epoch_s`` (the first warm-up epoch, of
        :func:`warmup_batches` batches, worker start-up included), ``worker_warning``,
        ``oversubscribed`` (workers + main threads > available CPUs),
        ``torch_threads``/``interop_threads`` as torch reported them;
        spans ``wait`` and ``step`` per batch in the main process and ``fetch`` per batch
        where it was made (``worker-<i>``, or ``main`` with ``num_workers = 0``).
    """
    return interleave(Runner, params, baseline, rounds=rounds)
