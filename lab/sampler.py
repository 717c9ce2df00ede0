"""CPU sampler process: samples a target process tree and the machine's cores with psutil.

Why a process and not a thread: in a process whose main thread runs CPU-bound Python, a
sampler thread starves. Every psutil call makes system calls that release the GIL, and each
time the sampler needs the GIL back it waits up to the switch interval (5 ms) for the busy
thread to drop it (the GIL "convoy effect"); measured here, a 20 Hz sampler thread took 2
samples in 0.5 s of busy looping. A separate process has its own GIL and never perturbs the
measured process's interpreter.

Protocol (one line per message on stdin/stdout):
``start`` -> read the window's edge counters (below), prime ``psutil.cpu_percent`` (its first
call returns 0.0 by design), start sampling, answer ``ok <sampler CPU s so far>``; ``stop`` ->
take a last sample, read the edge counters again, answer one JSON line ``{"samples":
[[t_monotonic_s, series, busy_pct], ...], "sampler_cpu_s": float, "edges": {...}}`` (the
sampler's cumulative CPU seconds, so the caller gets its cost per window; ``edges``: see
:meth:`_Series.edges`); ``quit`` -> exit. Series: ``cpu<i>`` (busy % of CPU i), ``system`` (mean
over the target's available CPUs), ``tree`` (the target process tree's CPU time as % of its
available CPUs; the sampler itself excluded).

Edge counters, read at both ends of a window (outside the caller's timed region: the start
is read before ``ok``, the stop after the caller's clock stopped): the steal time of the
available CPUs (``/proc/stat``), the time the quota's cgroup was throttled (``cpu.stat``), the
CPUs' current frequency, and every process's CPU time (:func:`process_times`), from which the
processes outside the target's tree that used the most CPU in the window are named.

Usage: ``python -m lab.sampler --pid PID --hz 10`` (started by
:class:`lab.window.CpuSampler`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import sys
import time

import psutil

from lab import capacity
from lab.cmdline import short_cmdline


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

    Resolution: where ``proc`` is the calling process, its own time and its reaped children's
    are read with ``getrusage(2)`` (microseconds; Linux scales them to the scheduler's
    nanosecond runtime), so a window shorter than a clock tick still gets its CPU time. Any
    other process is read from ``/proc/<pid>/stat`` through psutil, in clock ticks (10 ms at
    ``USER_HZ`` 100, proc(5)): a live descendant's share of a window is known to a tick.

    Args:
        known: the caller's cache of ``psutil.Process`` objects by pid (filled and pruned here),
            so a descendant is not looked up again on every call; None: no cache.
    """
    known = {} if known is None else known
    total = own_tree_seconds() if proc.pid == os.getpid() else _times_s(proc.cpu_times())
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
        total += _times_s(ct)
    return total


def _times_s(t) -> float:
    """user + system + children's user + system of a ``psutil.Process.cpu_times()`` (s)."""
    return t.user + t.system + t.children_user + t.children_system


def own_tree_seconds() -> float:
    """CPU seconds (user + system) of the calling process, all its threads, and its reaped
    children, from ``getrusage(2)`` ``RUSAGE_SELF`` and ``RUSAGE_CHILDREN`` (microseconds)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


#: Processes named per window: the most CPU-hungry ones outside the measured tree.
TOP_OTHERS = 3

#: A process is named only if it used at least this much of one CPU over the window (%).
OTHER_MIN_PCT = 1.0


def process_times(proc: str = "/proc") -> dict[int, tuple[int, float, str]]:
    """``{pid: (start ticks, CPU s, name)}`` of every process, from ``/proc/<pid>/stat``
    (proc(5): fields 14 and 15 are its user and system time, 22 its start time, in ``USER_HZ``
    ticks).

    A process's own time only: the time of children it reaped (fields 16-17) would charge a
    parent, in the window it reaped them, for CPU its children used before the window
    (measured: a shell that had run many short commands showed 24 CPUs in a 0.1 s window).
    Processes that start and end inside one window are not seen. Read from /proc directly:
    ``psutil.process_iter`` with the same fields cost 10.6 ms of CPU per call for 73
    processes here, ``open()`` on each file 1.34 ms for 67 processes on the AVX2 EPYC VM
    (2026-12-06), and ``os.open``/``os.read``, which make no file object, 0.84 ms; it runs
    twice per measured window, outside it, and the job waits for it.
    """
    out = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"{proc}/{name}/stat", os.O_RDONLY)
        except OSError:
            continue  # ended meanwhile
        try:
            data = os.read(fd, 4096)  # one line of about 300 bytes (proc(5))
        except OSError:
            continue  # ended between the open and the read
        finally:
            os.close(fd)
        right = data.rfind(b")")
        if right < 0:
            continue  # nothing read: the process was reaped between the open and the read
        comm = data[data.index(b"(") + 1 : right].decode(errors="replace")
        f = data[right + 2 :].split()
        ticks = int(f[11]) + int(f[12])
        out[int(name)] = (int(f[19]), ticks / capacity.CLK_TCK, comm)
    return out


def is_snakemake(argv: list[bytes]) -> bool:
    """Whether a command line is Snakemake itself: ``snakemake ...``, ``python .../snakemake
    ...`` or ``python -m snakemake ...`` (not a shell whose script mentions it, such as the
    conda activation Snakemake's rules run under ``--use-conda``)."""
    names = [os.path.basename(a) for a in argv[:2]]
    return b"snakemake" in names or argv[1:3] == [b"-m", b"snakemake"]


def _argv(pid: int, proc: str) -> list[bytes]:
    with open(f"{proc}/{pid}/cmdline", "rb") as fh:
        return fh.read().split(b"\0")


def ancestors(pid: int, proc: str = "/proc") -> set[int]:
    """The pipeline's processes above a job: the pids from ``pid``'s parent up to the first
    Snakemake process (the experiment's command line, the supervisor, the shell Snakemake runs
    rules in, Snakemake itself; :func:`is_snakemake`), read from field 4 of ``/proc/<pid>/stat``
    and the command lines. Empty for a job run by hand, without Snakemake above it: the shells
    above are the user's."""
    out: set[int] = set()
    while pid > 1:
        try:
            with open(f"{proc}/{pid}/stat", "rb") as fh:
                data = fh.read()
            pid = int(data[data.rindex(b")") + 2 :].split()[1])
            if pid <= 1:
                return set()
            out.add(pid)
            if is_snakemake(_argv(pid, proc)):
                return out
        except OSError:
            return set()
    return set()


def same_slurm_job(job_id: str | None, proc: str = "/proc") -> set[int]:
    """Inside a SLURM job: the processes of that job (``SLURM_JOB_ID`` in their environment),
    such as the jobstep's outer Snakemake and its ``srun``, which are not the job's ancestors
    (the inner Snakemake runs under ``slurmstepd``). Empty outside SLURM or where the
    environments cannot be read."""
    if not job_id:
        return set()
    needle = b"SLURM_JOB_ID=" + job_id.encode() + b"\0"
    out = set()
    for name in os.listdir(proc):
        if name.isdigit():
            try:
                with open(f"{proc}/{name}/environ", "rb") as fh:
                    if needle in fh.read() + b"\0":
                        out.add(int(name))
            except OSError:
                continue
    return out


def cpu_between(before: dict, after: dict, pids: set[int]) -> float:
    """CPU seconds the processes ``pids`` used between two :func:`process_times` readings."""
    total = 0.0
    for pid in pids:
        if pid in after:
            prior = before.get(pid)
            total += after[pid][1] - (prior[1] if prior is not None and prior[0] == after[pid][0] else 0.0)
    return total


def top_others(before: dict, after: dict, exclude: set[int], wall_s: float) -> list[list]:
    """``[[pid, name, short command line, CPU s], ...]``: the :data:`TOP_OTHERS` processes
    outside ``exclude`` that used the most CPU between two :func:`process_times` readings
    (a process started in between counts all its CPU time), each at least
    :data:`OTHER_MIN_PCT` % of one CPU over ``wall_s``."""
    used = []
    for pid, (start, cpu_s, name) in after.items():
        if pid in exclude:
            continue
        prior = before.get(pid)
        delta = cpu_s - prior[1] if prior is not None and prior[0] == start else cpu_s
        if wall_s > 0 and 100.0 * delta / wall_s >= OTHER_MIN_PCT:
            used.append((delta, pid, name))
    used.sort(reverse=True)
    return [[pid, name, short_cmdline(pid, name), round(d, 4)] for d, pid, name in used[:TOP_OTHERS]]


class _Series:
    """The samples of one window: per-core, system and tree busy %, taken every ``interval`` s."""

    def __init__(self, target: psutil.Process, exclude: frozenset[int], cpus: list[int], ncpu: int, interval: float):
        self.target, self.exclude, self.cpus, self.ncpu, self.interval = target, exclude, cpus, ncpu, interval
        self.samples: list = []
        self.last_t = self.last_tree = 0.0
        self.known: dict[int, psutil.Process] = {}  # the tree's processes, by pid
        self.quota = capacity.cgroup_quota(target.pid)
        # the pipeline's own processes: Snakemake's chain above the job and, on a cluster, the
        # other processes of its SLURM job; the job's own tree is excluded from them
        tree = {target.pid, *descendants(target.pid), os.getpid()}
        self.ours = (ancestors(target.pid) | same_slurm_job(os.environ.get("SLURM_JOB_ID"))) - tree
        self.first: dict = {}  # edge counters at the window's start

    def edges(self) -> dict:
        """The window's edge counters now: ``t`` (monotonic s), ``steal_s`` (of the available
        CPUs), ``throttled_s`` (the quota's cgroup), ``freq_mhz`` (mean of the available CPUs)
        and ``procs`` (:func:`process_times`); None where a counter cannot be read."""
        try:
            steal = capacity.steal_seconds(capacity.read_proc_stat(), self.cpus)
        except OSError:
            steal = None
        return {
            "t": time.monotonic(),
            "steal_s": steal,
            "throttled_s": capacity.throttled_seconds(self.quota),
            "freq_mhz": capacity.cpu_freq_mhz(self.cpus)[0],
            "procs": process_times(),
        }

    def window_edges(self) -> dict:
        """What happened between the start's edge counters and now: ``span_s`` (the time
        between the two readings, a little longer than the caller's window), ``steal_s``,
        ``throttled_s`` (differences, None where unreadable), ``freq_mhz`` (mean of both ends),
        ``pipeline_cpu_s`` (CPU of the chain that started the job: Snakemake, its shell, the
        supervisor; :func:`ancestors`) and ``others`` (:func:`top_others`: processes outside the
        target's tree, the sampler and that chain)."""
        a, b = self.first, self.edges()

        def diff(key):
            return b[key] - a[key] if a.get(key) is not None and b[key] is not None else None

        freqs = [x for x in (a.get("freq_mhz"), b["freq_mhz"]) if x is not None]
        tree = {self.target.pid, *descendants(self.target.pid), *self.known, *self.exclude}
        before, span = a.get("procs", {}), b["t"] - a.get("t", b["t"])
        return {
            "span_s": span,
            "steal_s": diff("steal_s"),
            "throttled_s": diff("throttled_s"),
            "freq_mhz": sum(freqs) / len(freqs) if freqs else None,
            "pipeline_cpu_s": cpu_between(before, b["procs"], self.ours),
            "others": top_others(before, b["procs"], tree | self.ours, span),
        }

    def tree_cpu_s(self) -> float:
        return tree_cpu_seconds(self.target, self.exclude, self.known)

    def start(self) -> None:
        self.first = self.edges()
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
            # the sampler's cost in the window: process_time (CLOCK_PROCESS_CPUTIME_ID, ns
            # resolution; /proc ticks are 10 ms) before the edges, which are read after the
            # caller's clock stopped and so do not perturb the window
            cost = time.process_time()
            reply = {"samples": series.samples, "sampler_cpu_s": cost, "edges": series.window_edges()}
            out.write(json.dumps(reply) + "\n")
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
