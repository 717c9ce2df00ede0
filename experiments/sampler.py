"""CPU sampler process: samples a target process tree and the machine's cores with psutil.

Why a process and not a thread: in a process whose main thread runs CPU-bound Python, a
sampler thread starves. Every psutil call makes system calls that release the GIL, and each
time the sampler needs the GIL back it waits up to the switch interval (5 ms) for the busy
thread to drop it (the GIL "convoy effect"); measured here, a 20 Hz sampler thread took 2
samples in 0.5 s of busy looping. A separate process has its own GIL and never perturbs the
measured process's interpreter.

Protocol (one line per message on stdin/stdout):
``start`` -> prime ``psutil.cpu_percent`` (its first call returns 0.0 by design), start
sampling, answer ``ok <sampler CPU s so far>``; ``stop`` -> take a last sample, answer one
JSON line ``{"samples": [[t_monotonic_s, series, busy_pct], ...], "sampler_cpu_s": float}``
(the sampler's cumulative CPU seconds, so the caller gets its cost per window);
``quit`` -> exit. Series: ``cpu<i>`` (busy % of CPU i), ``system`` (mean over the target's
available CPUs), ``tree`` (the target process tree's CPU time as % of its available CPUs;
the sampler itself excluded).

Usage: ``python -m experiments.sampler --pid PID --hz 10`` (started by
:class:`experiments.window.CpuSampler`).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time

import psutil


def _children_from_proc(pid: int) -> list[int] | None:
    """Direct children of ``pid`` from ``/proc/<pid>/task/<tid>/children`` (Linux 4.2+ with
    CONFIG_PROC_CHILDREN), or None where that file does not exist."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Pids of every live descendant of ``pid``.

    Walks the kernel's per-task child lists, which costs a few file reads per process of the
    tree, instead of ``psutil.Process.children(recursive=True)``, which reads the status of
    every process on the machine (1.3 ms per call with 68 processes here: over 1% of a CPU
    at 10 Hz). Falls back to psutil where the kernel lacks the child lists.
    """
    out: list[int] = []
    stack = [pid]
    while stack:
        kids = _children_from_proc(stack.pop())
        if kids is None:
            try:
                return [c.pid for c in psutil.Process(pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                return []
        out.extend(kids)
        stack.extend(kids)
    return out


def tree_cpu_seconds(
    proc: psutil.Process, exclude: frozenset[int] = frozenset(), known: dict[int, psutil.Process] | None = None
) -> float:
    """CPU seconds (user + system) of ``proc``, its reaped children and live descendants with
    theirs (a reaped process's time moves to its parent's ``children_*`` fields), skipping the
    pids in ``exclude`` and descendants that vanish while being read.

    Args:
        known: the caller's cache of ``psutil.Process`` objects by pid (filled and pruned here),
            so a descendant is not looked up again on every call; None: no cache.
    """
    known = {} if known is None else known
    t = proc.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for pid in descendants(proc.pid):
        if pid in exclude:
            continue
        try:
            child = known.get(pid) or known.setdefault(pid, psutil.Process(pid))
            ct = child.cpu_times()
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            known.pop(pid, None)
            continue
        # a descendant's own reaped children too: the workers a child interpreter forked
        total += ct.user + ct.system + ct.children_user + ct.children_system
    return total


class _Series:
    """The samples of one window: per-core, system and tree busy %, taken every ``interval`` s."""

    def __init__(self, target: psutil.Process, exclude: frozenset[int], cpus: list[int], ncpu: int, interval: float):
        self.target, self.exclude, self.cpus, self.ncpu, self.interval = target, exclude, cpus, ncpu, interval
        self.samples: list = []
        self.last_t = self.last_tree = 0.0
        self.known: dict[int, psutil.Process] = {}  # the tree's processes, by pid

    def tree_cpu_s(self) -> float:
        return tree_cpu_seconds(self.target, self.exclude, self.known)

    def start(self) -> None:
        psutil.cpu_percent(percpu=True)  # prime: the first call returns 0.0 by design
        self.samples = []
        self.last_t, self.last_tree = time.monotonic(), self.tree_cpu_s()

    def sample(self, final: bool = False) -> None:
        now = time.monotonic()
        if final and now - self.last_t < self.interval / 2:
            return  # too short to measure: CPU times tick at 10 ms
        per_core = psutil.cpu_percent(percpu=True)
        try:
            tree = self.tree_cpu_s()
        except psutil.NoSuchProcess:
            return
        used = [per_core[i] for i in self.cpus if i < len(per_core)]
        self.samples += [[now, f"cpu{i}", per_core[i]] for i in self.cpus if i < len(per_core)]
        self.samples.append([now, "system", sum(used) / max(len(used), 1)])
        dt = now - self.last_t
        if dt > 0:
            # /proc CPU times tick at 10 ms, so an interval can show more CPU time than it
            # could hold (3 ticks in 25 ms = 120% of one CPU). Clipping would drop the excess
            # and bias the mean low (measured: 89% for a loop the kernel gave 97%); instead the
            # excess is carried into the next interval, which keeps the series within 0-100%
            # and its total equal to the tree's CPU time.
            cpu_s = min(max(0.0, tree - self.last_tree), dt * self.ncpu)
            self.samples.append([now, "tree", 100.0 * cpu_s / (dt * self.ncpu)])
            self.last_tree += cpu_s
        self.last_t = now


def serve(pid: int, hz: float, ncpu: int | None = None, inp=sys.stdin, out=sys.stdout) -> None:
    """Answer ``start``/``stop``/``quit`` commands on ``inp`` (see the module docstring).

    ``ncpu`` is the CPUs the tree may use (affinity capped by the cgroup quota): the ``tree``
    series is a share of them. ``system`` is the mean busy % of the target's affinity CPUs.
    """
    target = psutil.Process(pid)
    cpus = sorted(target.cpu_affinity())
    series = _Series(target, frozenset({os.getpid()}), cpus, ncpu or len(cpus), 1.0 / hz)
    fd = inp.fileno()
    sampling, next_t = False, 0.0
    while True:
        timeout = max(0.0, next_t - time.monotonic()) if sampling else None
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            series.sample()
            next_t += series.interval
            continue
        line = inp.readline()
        cmd = line.strip()
        if cmd == "start":
            series.start()
            next_t, sampling = series.last_t + series.interval, True
            out.write(f"ok {time.process_time()}\n")
            out.flush()
        elif cmd == "stop":
            series.sample(final=True)
            sampling = False
            # process_time (CLOCK_PROCESS_CPUTIME_ID) has ns resolution; /proc ticks are 10 ms
            out.write(json.dumps({"samples": series.samples, "sampler_cpu_s": time.process_time()}) + "\n")
            out.flush()
        elif cmd == "quit" or line == "":
            return


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pid", type=int, default=os.getppid(), help="process tree to sample (default: parent)")
    p.add_argument("--hz", type=float, default=10.0, help="samples per second")
    p.add_argument("--ncpu", type=int, default=None, help="CPUs available to the tree (default: its affinity)")
    args = p.parse_args(argv)
    serve(args.pid, args.hz, args.ncpu)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
