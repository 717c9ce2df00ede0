"""Multiprocessing experiment: training throughput with P processes x T intra-op threads.

Each of ``processes`` workers (``torch.multiprocessing``, start method from ``start_method``)
trains its own small MLP on a fixed synthetic batch with ``threads`` intra-op threads, the
seed article's "one process per core, each training its own model" pattern. Work per process
is fixed (``steps`` SGD steps of ``batch_size`` samples), so total work grows with P (weak
scaling) and ``samples_per_s`` = P x steps x batch_size / wall time is directly comparable
(``steps_done`` in place of P x steps where a window reached its cap, below).

Model construction and warm-up steps happen before the clock starts; the parent releases all
workers at once through a barrier and stops the clock when the last one reports done.

A window is capped at ``max_window_s``: a process still stepping then stops after the step that
crosses it, and ``samples_per_s`` counts the steps all processes did (``steps_done``). Only
points far slower than their baseline reach the cap (in the configs, oversubscribed teams that
spin: 4-15x slower, windows of 1-7 s for the baseline's 0.2 s); their rate is then a fixed-time
rate, the same steady state without the longest process's tail. The cap's length comes from the
measured spread of that point's per-round ratio to 1 x 1 (docs/benchmarks.md, "A window cap for
multiprocessing"): the interquartile range was 101-113% of the median with 1 s windows and
28-47% with 2 s ones, no wider than without a cap (43-104%), so 2 s keeps the precision and takes
an oversubscribed point's job from 26-42 s to about 15 s.

Start method: ``fork`` by default. Forking after the parent has run OpenMP-parallel work can
deadlock under GNU libgomp, so the parent here runs no torch computation at all before the
workers are forked; the method used is recorded in every row.

Points where P x T exceeds the available CPUs are oversubscribed (column ``oversubscribed``):
the threads then fight over cores and context-switch.

OpenMP wait policy (``omp_wait_policy``): torch's intra-op threads are an OpenMP team (GNU
libgomp in the Linux wheels). A thread that has finished its share of an operation waits for
the next one: with ``OMP_WAIT_POLICY`` unset (``default``) libgomp spins (up to
``GOMP_SPINCOUNT``, 300,000 iterations, when a process's team fits its CPUs; libgomp does not
see the other processes), then sleeps; ``passive`` sleeps at once (a futex), ``active`` spins
without a limit (libgomp's manual, "OMP_WAIT_POLICY" and "GOMP_SPINCOUNT"). Spinning costs a
CPU that another process's thread may need; sleeping costs the wake-up latency of every
operation. libgomp reads the variable once, when torch loads it, so the point's job starts
with it set (:attr:`lab.declare.Experiment.job_env`) and its baseline 1 x 1 runs under the same
policy (a single thread never waits for a team).
"""

from __future__ import annotations

import math
import queue as queue_mod
import threading
import time
from dataclasses import dataclass
from typing import Literal

from lab.params import Declared, param, repeats_field, sample_hz_field
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.window import Meter
from lab.workspeed import CLOCK_COLUMN, UNIT_COLUMN, clock_of, unit_ms


@dataclass(frozen=True)
class Params(Declared):
    """One configuration point of the multiprocessing experiment (declared once: :mod:`lab.params`).

    Raises:
        ValueError: for a value outside its bounds (the message names the field).
    """

    processes: int = param(2, min=1, config=[1, 2, 4], help="training processes (P)", quick=[1, 2])
    threads: int = param(1, min=1, config=[1, 2], help="intra-op threads per process (T)")
    steps: int = param(
        200,
        min=1,
        config=200,
        help="SGD steps per process per repeat",
        quick=150,
        quick_why="windows of 0.1-0.2 s and more, by the machine: shorter ones fall between CPU samples",
    )
    batch_size: int = param(64, min=1, unit="samples", help="batch of one SGD step")
    in_features: int = param(64, min=1, in_config=False, help="input features of the MLP")
    hidden: int = param(256, min=1, in_config=False, help="hidden units of the MLP")
    warmup_steps: int = param(10, min=0, help="untimed SGD steps per process before the repeats", quick=3)
    repeats: int = repeats_field(6)
    sample_hz: float = sample_hz_field()
    start_method: Literal["fork", "forkserver", "spawn"] = param(
        "fork", help="multiprocessing start method of the workers"
    )
    omp_wait_policy: Literal["default", "passive", "active"] = param(
        "default",
        config=["default", "passive"],
        help="OMP_WAIT_POLICY of the job (default: unset, OpenMP threads spin a while before they sleep;"
        " passive: sleep at once; active: spin)",
    )
    max_window_s: float = param(
        2.0,
        min=0,
        unit="s",
        help="a window ends after this long: each process stops after the step that crosses it and"
        " samples/s counts the steps done (0: every process runs all its steps)",
    )
    timeout_s: float = param(
        600.0, above=0, in_config=False, unit="s", help="give up waiting for a worker after this long"
    )

    def cpus_requested(self) -> int:
        """CPUs this point asks for at once: processes x intra-op threads per process."""
        return self.processes * self.threads

    @property
    def steps_per_span(self) -> int:
        return max(1, self.steps // 10)


def _worker(rank: int, params: Params, barrier, stop, q) -> None:
    try:
        from lab.host import die_with_parent
        from lab.threads import set_torch_threads

        die_with_parent()
        from lab.models import classification_batch, mlp, train_step_fn

        info = set_torch_threads(params.threads)
        import torch

        torch.manual_seed(rank)
        model = mlp(params.in_features, params.hidden)
        step = train_step_fn(model)
        x, y = classification_batch(params.batch_size, params.in_features, seed=rank)
        for _ in range(params.warmup_steps):
            step(x, y)
        q.put(("ready", rank, info))
        r = 0
        while True:  # one round per release; the parent decides how many (lab/rounds.py)
            barrier.wait(timeout=params.timeout_s)  # the parent releases all workers at once
            if stop.is_set():
                return
            spans = []
            done = 0
            cap = time.perf_counter() + params.max_window_s if params.max_window_s > 0 else math.inf
            while done < params.steps:
                n = min(params.steps_per_span, params.steps - done)
                t0, c0 = time.perf_counter(), time.process_time()
                k = 0
                while k < n:
                    step(x, y)
                    k += 1
                    if time.perf_counter() >= cap:
                        break
                t1, c1 = time.perf_counter(), time.process_time()
                spans.append(
                    {"actor": f"process-{rank}", "kind": "train", "t0": t0, "t1": t1, "cpu_s": c1 - c0, "steps": k}
                )
                done += k
                if t1 >= cap:
                    break
            q.put(("done", rank, r, spans))
            r += 1
    except BaseException as exc:  # report, then fail the worker
        q.put(("error", rank, f"{type(exc).__name__}: {exc}"))
        raise


def _get(q, procs, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            msg = q.get(timeout=0.5)
        except queue_mod.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"worker process {dead[0].name} exited with code {dead[0].exitcode}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"no message from the workers within {timeout_s} s") from None
            continue
        if msg[0] == "error":
            raise RuntimeError(f"worker {msg[1]} failed: {msg[2]}")
        return msg


class Runner:
    """P persistent worker processes, built and warmed up, waiting at a barrier."""

    def __init__(self, params: Params, meter: Meter) -> None:
        import torch.multiprocessing as mp

        self.params, self.meter = params, meter
        ctx = mp.get_context(params.start_method)
        self.barrier = ctx.Barrier(params.processes + 1)
        self.stop = ctx.Event()
        self.q = ctx.Queue()
        self.procs = [
            ctx.Process(
                target=_worker,
                args=(rank, params, self.barrier, self.stop, self.q),
                name=f"process-{rank}",
                daemon=True,
            )
            for rank in range(params.processes)
        ]
        for p in self.procs:
            p.start()
        infos = [_get(self.q, self.procs, params.timeout_s)[2] for _ in self.procs]
        self.threads_seen = max(i["torch_threads"] for i in infos)

    def once(self) -> Measured:
        """Release all workers for one repeat of ``steps`` steps each; wait for every one."""
        p = self.params
        with self.meter.window() as win:
            self.barrier.wait(timeout=p.timeout_s)
            msgs = [_get(self.q, self.procs, p.timeout_s) for _ in self.procs]
        steps_done = sum(s["steps"] for _, _rank, _r, spans in msgs for s in spans)
        row = {
            "samples_per_s": steps_done * p.batch_size / win.wall_s,
            "steps_done": steps_done,
            "torch_threads": self.threads_seen,
            "oversubscribed": p.cpus_requested() > self.meter.ncpu,
        }
        spans = [
            {
                "actor": s["actor"],
                "kind": s["kind"],
                "start_s": s["t0"] - win.t0,
                "end_s": s["t1"] - win.t0,
                "cpu_s": s["cpu_s"],
                "steps": s["steps"],
            }
            for _, _rank, _r, spans in msgs
            for s in spans
        ]
        # the work's own speed (lab.workspeed): one intra-op thread per process, no more than the CPUs
        alone = p.threads == 1 and p.cpus_requested() <= self.meter.ncpu
        row[UNIT_COLUMN] = unit_ms(spans, units="steps") if alone else float("nan")
        row[CLOCK_COLUMN] = clock_of(row[UNIT_COLUMN], cpu=False)
        return Measured(win, row, spans)

    def close(self) -> None:
        """Release the workers waiting for another round with the stop flag set; join them."""
        self.stop.set()
        try:
            self.barrier.wait(timeout=5)
        except threading.BrokenBarrierError:
            pass  # a worker is gone: the joins below reap what is left
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()


def run(params: Params, baseline: Params | None = None, rounds: Rounds | None = None) -> RunResult:
    """Measure ``params.repeats`` rounds with P persistent worker processes, interleaved with
    ``baseline`` (its own worker processes) if given.

    Returns:
        A :class:`~lab.results.RunResult` with one row per repeat and role: ``wall_s``
        (s), ``samples_per_s`` (training samples/s over all processes: ``steps_done`` x
        ``batch_size`` / ``wall_s``), ``steps_done`` (SGD steps of all processes in the window:
        ``processes x steps`` unless the window reached ``max_window_s``), ``cpu_util_pct``
        (0-100), ``torch_threads`` (intra-op threads torch reported in the workers) and
        ``oversubscribed``; spans per process per chunk of steps.

    Raises:
        RuntimeError: if a worker fails or reports threads other than requested.
    """
    return interleave(Runner, params, baseline, rounds=rounds)
