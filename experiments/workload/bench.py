"""The workload's measured windows: a configuration made ready where it runs (this process, or
a pool of replicas for ``processes > 1``), one window measured, its metrics row built.

Every window is timed by the job's :class:`~experiments.window.Meter` (wall time, the process
tree's CPU time, CPU samples) around the steps themselves; the throughput counts every
replica's samples. Memory is read outside the window, before and after it: USS and PSS of the
training process(es) and of each DataLoader worker (:meth:`Session.memory`), whose sum after the
window is the point's ``peak_*`` (the largest of the two reads), and each worker's USS growth
over the window, which flags copy-on-read growth of forked workers (pytorch/pytorch#13246).
"""

from __future__ import annotations

from experiments.fetch import loop_spans
from experiments.workload import KNOBS
from experiments.workload.replicas import Replicas
from experiments.workload.session import Session, label

#: A worker whose USS grows by more than this share and this many MB over a window is flagged.
GROWTH_PCT, GROWTH_MB = 5.0, 1.0


def key(cfg: dict) -> str:
    """A configuration's identity (its label)."""
    return label({k: cfg[k] for k in KNOBS})


def _memory_columns(before: list[dict], after: list[dict]) -> dict:
    """Peak USS/PSS (MB) of the processes and their workers, and the largest worker growth."""
    totals = []
    for reads in (before, after):
        uss = sum(r["main_uss_mb"] + sum(u for u, _ in r["workers"].values()) for r in reads)
        pss = sum(r["main_pss_mb"] + sum(p for _, p in r["workers"].values()) for r in reads)
        totals.append((uss, pss))
    growth = 0.0
    grows = False
    for b, a in zip(before, after):
        for pid, (uss1, _) in a["workers"].items():
            if pid in b["workers"]:
                uss0 = b["workers"][pid][0]
                growth = max(growth, uss1 - uss0)
                grows |= uss1 - uss0 > max(GROWTH_MB, uss0 * GROWTH_PCT / 100)
    return {
        "peak_uss_mb": max(t[0] for t in totals),
        "peak_pss_mb": max(t[1] for t in totals),
        "main_pss_mb": sum(r["main_pss_mb"] for r in after),
        "workers_pss_mb": sum(p for r in after for _, p in r["workers"].values()),
        "worker_uss_growth_mb": growth,
        "memory_grows": grows,
    }


class Bench:
    """Configurations of one workload, ready to measure (see the module docstring).

    Args:
        workload: the loaded workload (this process's copy).
        job: ``{"entry", "task", "batch_size"}`` (replicas load their own copy from it).
        meter: the job's meter.
        steps: steps (or inference calls) per window; ``epoch`` windows ignore it.
        warmup: untimed steps before every window (threads set, workers awake).
    """

    def __init__(self, workload, job: dict, meter, steps: int, warmup: int) -> None:
        self.job, self.meter, self.steps, self.warmup = job, meter, steps, warmup
        self.local = Session(workload, job["task"], job["batch_size"])
        self.pools: dict[int, Replicas] = {}
        self.setups: dict[str, tuple] = {}  # key -> (where, setup or key)

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

    def _run(self, pool, setup, steps, epoch: bool) -> dict:
        return pool.run(setup, steps, epoch) if pool is not None else self.local.run(setup, steps=steps, epoch=epoch)

    def measure(self, cfg: dict, epoch: bool = False):
        """One window of ``cfg``; returns ``(window, row, spans)``: ``row`` has the knobs and
        ``samples_per_s``, ``data_stall_pct``, ``batches``, the memory columns, ``setup_s``,
        ``first_call_s``, ``worker_warning``, ``oversubscribed``, ``start_method``; spans are
        rank 0's ``wait``/``step``/``fetch`` spans.

        Raises:
            CandidateError: if ``cfg`` cannot be made ready for this workload.
        """
        pool, setup, info = self._ready(cfg)
        if self.warmup:
            self._run(pool, setup, self.warmup, False)
        before = self._memory(pool, setup)
        with self.meter.window() as win:
            out = self._run(pool, setup, None if epoch else self.steps, epoch)
        after = self._memory(pool, setup)
        samples = out["batches"] * self.job["batch_size"]
        row = {
            **{k: cfg[k] for k in KNOBS},
            "samples_per_s": samples / win.wall_s,
            "data_stall_pct": 100.0 * out["stall_s"] / win.wall_s,
            "batches": out["batches"],
            **_memory_columns(before, after),
            **info,
            "worker_warning": getattr(setup, "worker_warning", ""),
            "oversubscribed": cfg["processes"] * (cfg["threads"] + cfg["num_workers"]) > self.meter.ncpu,
            "start_method": "fork" if cfg["num_workers"] else "",
        }
        return win, row, loop_spans(out["marks"], win.t0)

    def release_except(self, keep: set[str]) -> None:
        """Free every setup but those in ``keep`` (their DataLoader workers stop)."""
        for k in [k for k in self.setups if k not in keep]:
            pool, setup, _ = self.setups.pop(k)
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
