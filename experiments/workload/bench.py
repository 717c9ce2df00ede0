"""The workload's measured windows: a configuration made ready where it runs (this process, or
a pool of replicas for ``processes > 1``), one window measured, its metrics row built.

Every window is timed by the job's :class:`~lab.window.Meter` (wall time, the process
tree's CPU time, CPU samples) around the steps themselves; the throughput counts every
replica's samples. Memory is read outside the window, after it and, before a configuration's
first steps window and every epoch window, before it (a later steps window starts from its
configuration's last read: each read is a walk of ``/proc/<pid>/smaps_rollup``, 12.8 ms a
window's two reads in the quick search on the EPYC VM, a quarter of the time between windows);
in an epoch window also after its first and its last step (:meth:`Session.run`, inside the window: workers
that are not persistent exist only then; about 7 ms each here, drawn in the timeline): USS and
PSS of the training process(es) and of each DataLoader worker (:meth:`Session.memory`), whose
sums give the point's ``peak_*`` (the largest read), and each worker's USS growth, across the
epoch where there is one, else over the window, which flags copy-on-read growth of forked
workers (pytorch/pytorch#13246).
"""

from __future__ import annotations

import psutil

from experiments.workload import KNOBS
from experiments.workload.replicas import Replicas
from experiments.workload.session import Session, label
from lab.fetch import loop_spans

#: A worker whose USS grows by more than this share and this many MB is flagged. Measured here
#: over one epoch of a worker reading 1M floats: 31 MB from a list of Python floats, 0.7-0.9 MB
#: (its own allocations) from a numpy array (tests/test_workload.py).
GROWTH_PCT, GROWTH_MB = 5.0, 5.0


def key(cfg: dict) -> str:
    """A configuration's identity (its label)."""
    return label({k: cfg[k] for k in KNOBS})


def in_flight(cfg: dict) -> int:
    """Batches ``cfg``'s DataLoader workers hold ready when a steps window starts: while the
    other configuration of a round is measured, its ``num_workers`` workers fetch up to
    ``prefetch_factor`` batches each (torch's DataLoader). A window that started on them would
    count data fetched before it: in ``benchmarks/warmup.py --search`` the first 4 steps after a
    switch to 2 workers took 0.86-0.90x a settled step (docs/benchmarks.md). Returns
    ``num_workers x prefetch_factor``, 0 without workers."""
    return cfg["num_workers"] * cfg["prefetch_factor"] if cfg["num_workers"] else 0


def _memory_columns(reads: list[list[dict]], growth_from: tuple[list[dict], list[dict]]) -> dict:
    """Peak USS/PSS (MB) of the processes and their workers over ``reads`` (each a list of one
    read per process), the PSS of the last read, and the largest worker USS growth between
    the two reads of ``growth_from`` (a worker in both)."""
    totals = []
    for r in reads:
        uss = sum(p["main_uss_mb"] + sum(u for u, _ in p["workers"].values()) for p in r)
        pss = sum(p["main_pss_mb"] + sum(s for _, s in p["workers"].values()) for p in r)
        totals.append((uss, pss))
    growth, grows = 0.0, False
    for b, a in zip(*growth_from):
        for pid, (uss1, _) in a["workers"].items():
            if pid in b["workers"]:
                uss0 = b["workers"][pid][0]
                growth = max(growth, uss1 - uss0)
                grows |= uss1 - uss0 > max(GROWTH_MB, uss0 * GROWTH_PCT / 100)
    last = reads[-1]
    return {
        "peak_uss_mb": max(t[0] for t in totals),
        "peak_pss_mb": max(t[1] for t in totals),
        "main_pss_mb": sum(p["main_pss_mb"] for p in last),
        "workers_pss_mb": sum(s for p in last for _, s in p["workers"].values()),
        "worker_uss_growth_mb": growth,
        "memory_grows": grows,
    }


def _epoch_reads(out: dict, pool) -> tuple[list[dict], list[dict]] | None:
    """The epoch window's first and last memory reads, one per process, if it had both."""
    per_rank = out.get("epoch_memory")
    if per_rank is None:
        return None
    per_rank = per_rank if pool is not None else [per_rank]
    if any(m is None or m[1] is None for m in per_rank):
        return None
    return [m[0] for m in per_rank], [m[1] for m in per_rank]


class Bench:
    """Configurations of one workload, ready to measure (see the module docstring).

    Args:
        workload: the loaded workload (this process's copy).
        job: ``{"entry", "task", "batch_size"}`` (replicas load their own copy from it).
        meter: the job's meter.
        steps: steps (or inference calls) per window; ``epoch`` windows ignore it. None until
            the diagnosis sets it from the step time (:mod:`experiments.workload.diagnose`).
        warmup: untimed steps before every window (threads set, workers awake), after the
            batches the workers fetched while the other configuration ran are dropped
            (:func:`in_flight`); one more where the window's intra-op thread count differs from
            the last window's in the same process(es) (:meth:`warmup_for`).
    """

    def __init__(self, workload, job: dict, meter, steps: int | None, warmup: int) -> None:
        self.job, self.meter, self.steps, self.warmup = job, meter, steps, warmup
        self.last_threads: dict[int, int] = {}  # processes -> threads of the last window there
        self.local = Session(workload, job["task"], job["batch_size"])
        self.pools: dict[int, Replicas] = {}
        self.setups: dict[str, tuple] = {}  # key -> (where, setup or key)
        self.last_memory: dict[str, list[dict]] = {}  # key -> the read after its last steps window

    def _ready(self, cfg: dict):
        k = key(cfg)
        if k not in self.setups:
            p = cfg["processes"]
            if p == 1:
                setup = self.local.prepare(cfg)
                self.setups[k] = (None, setup, {"setup_s": setup.setup_s, "first_call_s": setup.first_call_s})
            else:
                if p not in self.pools:
                    self.pools[p] = Replicas(p, self.job)
                info = self.pools[p].prepare(k, cfg)
                self.setups[k] = (self.pools[p], k, info)
        return self.setups[k]

    def _memory(self, pool, setup) -> list[dict]:
        return pool.memory(setup) if pool is not None else [self.local.memory(setup)]

    def _run(self, pool, setup, steps, epoch: bool, drain: int = 0) -> dict:
        if pool is not None:
            return pool.run(setup, steps, epoch, drain)
        return self.local.run(setup, steps=steps, epoch=epoch, drain=drain)

    def warmup_for(self, cfg: dict) -> int:
        """Untimed steps before ``cfg``'s next window: ``warmup``, plus one where its intra-op
        thread count is not that of the last window in the same process(es) (``warmup`` 0: none).
        After a switch only the first step is slow (2 DataLoader workers 1.64-1.81x, bfloat16 with
        channels_last 1.10x) and the second within 0.98-1.04x of settled steps, except after a
        switch back to 2 threads from 1: its second step ran 1.043-1.050x on the AMX Xeon VM (the
        thread pool's wake-up), 0.996x on the EPYC VM (``benchmarks/warmup.py --search``,
        docs/benchmarks.md)."""
        last = self.last_threads.get(cfg["processes"])
        self.last_threads[cfg["processes"]] = cfg["threads"]
        return self.warmup + (1 if self.warmup and last not in (None, cfg["threads"]) else 0)

    def check(self, cfg: dict) -> None:
        """Make ``cfg`` ready and run one untimed step of it (the start, before the search).

        Raises:
            CandidateError: if ``cfg`` cannot be made ready; whatever the step raises.
        """
        pool, setup, _ = self._ready(cfg)
        self._run(pool, setup, 1, False)

    def measure(self, cfg: dict, epoch: bool = False, epoch_steps_max: int = 0):
        """One window of ``cfg``; returns ``(window, row, spans)``: ``row`` has the knobs and
        ``samples_per_s``, ``data_stall_pct``, ``loop_cpu_s`` and ``workers_cpu_s`` (CPU seconds of
        the training process itself and of the rest of its tree, its DataLoader workers, over the
        window; NaN with replicas), ``batches``, the memory columns, ``setup_s``,
        ``first_call_s``, ``worker_warning``, ``oversubscribed``, ``start_method``; spans are
        rank 0's ``wait``/``step``/``fetch`` spans and, in epoch windows, ``memory`` spans (the
        two reads of :meth:`Session.run`, ``batch`` -1). ``epoch``: the window is an epoch from a
        fresh iterator (``window`` = ``epoch``, ``epoch_batches`` its length), cut after
        ``epoch_steps_max`` steps unless 0.

        Raises:
            CandidateError: if ``cfg`` cannot be made ready for this workload.
        """
        pool, setup, info = self._ready(cfg)
        k = key(cfg)
        drain = 0 if epoch else in_flight(cfg)  # an epoch window starts a fresh iterator
        warmup = self.warmup_for(cfg)
        if warmup or drain:
            self._run(pool, setup, warmup, False, drain)
        before = (None if epoch else self.last_memory.get(k)) or self._memory(pool, setup)
        own = psutil.Process()
        cpu0 = sum(own.cpu_times()[:2])
        with self.meter.window() as win:
            out = self._run(pool, setup, (epoch_steps_max or None) if epoch else self.steps, epoch)
        loop_cpu_s = sum(own.cpu_times()[:2]) - cpu0 if pool is None else float("nan")
        after = self._memory(pool, setup)
        if not epoch:
            self.last_memory[k] = after
        epoch_reads = _epoch_reads(out, pool)
        growth_from = epoch_reads or (before, after)
        samples = out["batches"] * self.job["batch_size"]
        row = {
            **{k: cfg[k] for k in KNOBS},
            "samples_per_s": samples / win.wall_s,
            "data_stall_pct": 100.0 * out["stall_s"] / win.wall_s,
            "loop_cpu_s": loop_cpu_s,
            "workers_cpu_s": max(0.0, win.cpu_s - loop_cpu_s) if pool is None else float("nan"),
            "batches": out["batches"],
            **_memory_columns([before, after, *(epoch_reads or ())], growth_from),
            "window": "epoch" if epoch else "steps",
            "epoch_batches": out.get("epoch_batches"),
            **info,
            "worker_warning": getattr(setup, "worker_warning", ""),
            "oversubscribed": cfg["processes"] * (cfg["threads"] + cfg["num_workers"]) > self.meter.ncpu,
            "start_method": "fork" if cfg["num_workers"] else "",
        }
        probes = [
            {"actor": "main", "kind": "memory", "start_s": a - win.t0, "end_s": b - win.t0, "batch": -1}
            for a, b in out.get("probes", ())
        ]
        return win, row, loop_spans(out["marks"], win.t0) + probes

    def release_except(self, keep: set[str]) -> None:
        """Free every setup but those in ``keep`` (their DataLoader workers stop)."""
        for k in [k for k in self.setups if k not in keep]:
            pool, setup, _ = self.setups.pop(k)
            self.last_memory.pop(k, None)
            if pool is not None:
                pool.release(setup)
            else:
                self.local.release(setup)

    def close(self) -> None:
        """Free every setup and stop the replica pools."""
        self.release_except(set())
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()
