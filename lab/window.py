"""The measured window and the client of the CPU sampler process.

* :class:`CpuSampler` -- talks to ``python -m lab.sampler``, a separate process that
  samples, with psutil, the busy share of every core, of the whole system and of our own process
  tree (children included: DataLoader workers and ``multiprocessing`` children count).
* :class:`Meter` -- what a job measures with: it owns one sampler and times windows. Its
  :meth:`Meter.window` context manager times one measured window (wall clock
  ``time.perf_counter``) and reports the process tree's CPU utilisation
  ``cpu_util_pct = tree CPU seconds / (wall seconds * available CPUs) * 100`` (0-100).

There is no module-level state: a job creates its :class:`Meter` and hands it to whatever
measures (see :func:`lab.results.interleave`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

from lab import sampler as sampler_mod
from lab.host import affinity, available_cpus
from lab.pressure import cpu_wait_us

#: The sampler process's name (``ps -o comm``; it is a fork of the job, so its command line is the job's).
SAMPLER_NAME = "cpulab-sampler"

#: A window whose interference averages more than this (% of one CPU) is flagged contended.
CONTENDED_PCT = 10.0


class CpuSampler:
    """Samples CPU utilisation during measured windows, from a separate process.

    The sampling runs in ``python -m lab.sampler`` (see that module for why a thread
    would starve under the GIL). Every ``1 / hz`` seconds it records

    * ``cpu<i>``: busy % of logical CPU ``i`` (``psutil.cpu_percent(percpu=True)``, 0-100);
    * ``system``: busy % of the whole machine over the affinity CPUs (0-100);
    * ``tree``: our process tree's CPU time over the interval, as % of ``ncpu`` CPUs (0-100),
      children included, the sampler excluded.

    One sampler process serves all windows of a job; between windows it sleeps on its input.
    It is a fork of the caller (a few ms, where starting ``python -m lab.sampler`` took
    about 150 ms, twice a job), made when the caller's :class:`Meter` opens, before the
    experiment sets anything up; it keeps only its two pipes and runs nothing but psutil.

    Args:
        hz: sampling rate in samples per second (> 0).
        ncpu: CPUs available to the tree (the ``tree`` series' denominator).

    Raises:
        ValueError: if ``hz <= 0``.
    """

    def __init__(self, hz: float, ncpu: int) -> None:
        if hz <= 0:
            raise ValueError(f"sample_hz must be > 0, got {hz}")
        self.hz = hz
        self._proc = _Forked(hz, ncpu)
        self.pid = self._proc.pid
        self.sampler_cpu_s = 0.0
        self.edges: dict = {}
        self._cpu_at_start = 0.0

    def alive(self) -> bool:
        """Whether the sampler process is still running."""
        return self._proc.poll() is None

    def _ask(self, cmd: str) -> str:
        self._proc.stdin.write(cmd + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"CPU sampler (pid {self.pid}) exited with code {self._proc.poll()}")
        return line

    def start(self) -> None:
        """Begin a window (primes ``psutil.cpu_percent``, whose first call returns 0.0)."""
        self._cpu_at_start = float(self._ask("start").split()[1])

    def stop(self) -> list[tuple[float, str, float]]:
        """End the window; return ``[(t_monotonic_s, series, busy_pct)]``.

        Afterwards ``sampler_cpu_s`` holds the sampler's own CPU seconds during the window and
        ``edges`` what the edge counters saw (``steal_s``, ``throttled_s``, ``freq_mhz``,
        ``others``; see :meth:`lab.sampler._Series.window_edges`).
        """
        reply = json.loads(self._ask("stop"))
        self.sampler_cpu_s = reply["sampler_cpu_s"] - self._cpu_at_start
        self.edges = reply.get("edges") or {}
        return [tuple(x) for x in reply["samples"]]

    def close(self) -> None:
        """Ask the sampler to quit and wait for it (at most 5 s)."""
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write("quit\n")
                self._proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            self._proc.wait(timeout=5)


class _Forked:
    """The sampler as a forked child of this process talking over two pipes (the ``Popen``
    calls :class:`CpuSampler` needs: ``pid``, ``poll``, ``stdin``, ``stdout``, ``wait``)."""

    def __init__(self, hz: float, ncpu: int) -> None:
        target = os.getpid()
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the sampler: its two pipes and stderr, nothing else of the caller
            code = 0
            try:
                os.dup2(cmd_r, 0)
                os.dup2(out_w, 1)
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                from lab.host import set_parent_death_signal, set_process_name

                set_parent_death_signal(signal.SIGKILL)
                set_process_name(SAMPLER_NAME)
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_DFL)
                inp, out = os.fdopen(0, "r"), os.fdopen(1, "w")
                sampler_mod.serve(target, hz, ncpu, inp, out)
            except BaseException:  # noqa: BLE001 - the caller sees the pipe close and says so
                code = 1
            finally:
                os._exit(code)
        os.close(cmd_r)
        os.close(out_w)
        self.pid = pid
        self.stdin, self.stdout = os.fdopen(cmd_w, "w"), os.fdopen(out_r, "r")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        end = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > end:
                os.kill(self.pid, signal.SIGKILL)
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.005)
        self.stdout.close()
        return self.returncode


@dataclasses.dataclass
class Window:
    """One measured window: wall time, tree CPU time and the CPU samples taken in it.

    Attributes:
        wall_s: wall-clock duration (s) from ``perf_counter``.
        cpu_s: CPU seconds of the process tree in the window.
        cpu_util_pct: ``cpu_s / (wall_s * available CPUs) * 100``, clipped to 0-100.
        interference_pct: CPU used by everything else on the machine during the window, in %
            of one CPU: the mean of the sampled system busy % times the affinity CPUs, minus
            the job's tree's CPU time over the window (``cpu_s / wall_s``, reaped worker
            processes included), the sampler's own share and the pipeline's
            (``pipeline_cpu_pct``); clipped at 0; NaN where no sample fell in the window.
        pipeline_cpu_pct: CPU of the process chain that started the job (Snakemake, its shell,
            the supervisor) over the window, % of one CPU: the lab's own overhead, kept out of
            ``interference_pct`` and reported on its own; 0 for a job run by hand (no
            Snakemake above it), NaN where the sampler did not report it.
        sampler_cpu_pct: the sampler process's own CPU time over the window, % of one CPU.
        steal_pct: steal time of the affinity CPUs over the window (the hypervisor ran other
            guests), % of their time; NaN where /proc/stat has no steal column.
        cpu_wait_pct: the share of the window in which a runnable task on the machine waited
            for a CPU (%, 0-100; :func:`cpu_wait_us` at the window's two ends over ``wall_s``;
            on 2 CPUs, 3 busy threads read about 50% and 4 about 100%): more runnable threads
            than CPUs, the job's own (oversubscription) or others'; NaN where there is no PSI.
        throttled_s: time the cgroup that sets the CPU quota was throttled in the window (s);
            NaN without a quota.
        cpu_freq_mhz: mean current frequency of the affinity CPUs at the window's two ends
            (MHz); NaN without cpufreq (most VMs).
        others: ``[[pid, name, command line, CPU s]]``, the processes outside the job's tree
            that used the most CPU in the window, most first (at most 3, each at least 1% of
            one CPU; :func:`lab.sampler.top_others`).
        edge_span_s: the time between the sampler's two edge readings (s), which bracket the
            window: what the steal, the pipeline's and the other processes' CPU seconds are
            divided by (``wall_s`` where the sampler did not report it).
        start_unix, end_unix: the window's bounds as Unix time (s), to check overlaps.
        t0: ``perf_counter`` value at the start; spans are reported relative to it.
        ncpu: the available CPUs the window was measured against.
        samples: ``[(t_s, series, busy_pct)]`` from :class:`CpuSampler`, ``t_s`` in seconds
            from the window's start.
    """

    wall_s: float = float("nan")
    cpu_s: float = float("nan")
    cpu_util_pct: float = float("nan")
    interference_pct: float = float("nan")
    sampler_cpu_pct: float = float("nan")
    pipeline_cpu_pct: float = float("nan")
    start_unix: float = float("nan")
    end_unix: float = float("nan")
    t0: float = 0.0
    ncpu: int = 1
    steal_pct: float = float("nan")
    cpu_wait_pct: float = float("nan")
    throttled_s: float = float("nan")
    cpu_freq_mhz: float = float("nan")
    others: list = dataclasses.field(default_factory=list)
    edge_span_s: float = float("nan")
    samples: list[tuple[float, str, float]] = dataclasses.field(default_factory=list)

    def share_pct(self, cpu_s: float) -> float:
        """CPU seconds counted between the edge readings as % of one CPU over their span."""
        span = self.edge_span_s if self.edge_span_s > 0 else self.wall_s
        return 100.0 * cpu_s / span if span > 0 else float("nan")

    def columns(self) -> dict:
        """The metrics columns every experiment takes from a window (docs/csv-schema.md): the
        top other process as ``top_other_pid``, ``top_other`` (name and command line) and
        ``top_other_cpu_pct`` (% of one CPU over the window)."""
        top = self.others[0] if self.others else None
        return {
            "wall_s": self.wall_s,
            "cpu_util_pct": self.cpu_util_pct,
            "available_cpus": self.ncpu,
            "interference_pct": self.interference_pct,
            "contended": bool(self.interference_pct > CONTENDED_PCT),
            "sampler_cpu_pct": self.sampler_cpu_pct,
            "pipeline_cpu_pct": self.pipeline_cpu_pct,
            "window_start_unix": self.start_unix,
            "window_end_unix": self.end_unix,
            "steal_pct": self.steal_pct,
            "cpu_wait_pct": self.cpu_wait_pct,
            "throttled_s": self.throttled_s,
            "cpu_freq_mhz": self.cpu_freq_mhz,
            "top_other_pid": top[0] if top else None,
            "top_other": top[2] if top else "",
            "top_other_cpu_pct": self.share_pct(top[3]) if top else 0.0,
        }


class Meter:
    """Measures the windows of one job; owns its CPU sampler process (started on first use).

    Usage::

        with Meter(sample_hz=10) as meter:
            with meter.window() as w:
                work()
        w.wall_s, w.cpu_util_pct, w.samples

    Args:
        sample_hz: the sampler's rate (samples/s, > 0).
        ncpu: available CPUs (default :func:`lab.host.available_cpus`).
    """

    def __init__(self, sample_hz: float = 10.0, ncpu: int | None = None) -> None:
        if sample_hz <= 0:
            raise ValueError(f"sample_hz must be > 0, got {sample_hz}")
        self.sample_hz = sample_hz
        self.ncpu = ncpu or available_cpus()
        self._sampler: CpuSampler | None = None
        self._tree: dict[int, psutil.Process] = {}  # this job's processes, by pid

    def __enter__(self) -> Meter:
        self.sampler()  # forked now, before the experiment sets anything up (no thread pool yet)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sampler(self) -> CpuSampler:
        """The job's sampler, (re)started if it is not running."""
        if self._sampler is None or not self._sampler.alive():
            self._sampler = CpuSampler(self.sample_hz, self.ncpu)
        return self._sampler

    def tree_cpu_seconds(self) -> float:
        """CPU seconds (user + system) used so far by this process and all its descendants,
        this meter's sampler excluded; differences over a window give the tree's CPU time."""
        exclude = frozenset({self._sampler.pid}) if self._sampler is not None else frozenset()
        return sampler_mod.tree_cpu_seconds(psutil.Process(), exclude, self._tree)

    @contextmanager
    def window(self) -> Iterator[Window]:
        """Time one measured window and sample CPU utilisation during it.

        The body should contain only the work being measured: set-up and warm-up go before.
        """
        win = Window(ncpu=self.ncpu)
        sampler = self.sampler()
        sampler.start()
        cpu0 = self.tree_cpu_seconds()
        wait0 = cpu_wait_us()
        win.start_unix = time.time()
        win.t0 = time.perf_counter()
        try:
            yield win
        finally:
            wall = time.perf_counter() - win.t0
            win.end_unix = time.time()
            wait1 = cpu_wait_us()
            cpu_s = self.tree_cpu_seconds() - cpu0
            if wait0 is not None and wait1 is not None and wall > 0:
                win.cpu_wait_pct = max(0.0, min(100.0, (wait1 - wait0) / 1e4 / wall))
            # perf_counter is CLOCK_MONOTONIC on Linux, the sampler's clock: make times relative
            samples = [(round(t - win.t0, 6), s, v) for t, s, v in sampler.stop()]
            _finish(win, wall, cpu_s, samples, sampler.sampler_cpu_s)
            _edges(win, sampler.edges)

    def close(self) -> None:
        """Stop the sampler process."""
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None


def _mean(samples: list, series: str) -> float | None:
    values = [v for _, s, v in samples if s == series]
    return sum(values) / len(values) if values else None


def _edges(win: Window, edges: dict) -> None:
    """Fill ``win``'s steal, throttling, frequency and other processes from the sampler's
    edge counters (see :class:`Window`)."""
    nan = float("nan")
    win.edge_span_s = edges.get("span_s") or win.wall_s
    steal = edges.get("steal_s")
    span = win.edge_span_s * len(affinity())
    win.steal_pct = 100.0 * steal / span if steal is not None and span > 0 else nan
    win.throttled_s = edges["throttled_s"] if edges.get("throttled_s") is not None else nan
    win.cpu_freq_mhz = edges["freq_mhz"] if edges.get("freq_mhz") is not None else nan
    win.others = edges.get("others") or []
    if edges.get("pipeline_cpu_s") is not None and win.wall_s > 0:
        win.pipeline_cpu_pct = win.share_pct(edges["pipeline_cpu_s"])
        if win.interference_pct == win.interference_pct:  # not NaN
            win.interference_pct = max(0.0, win.interference_pct - win.pipeline_cpu_pct)


def _finish(win: Window, wall_s: float, cpu_s: float, samples: list, sampler_cpu_s: float) -> None:
    """Fill ``win``'s derived fields (see :class:`Window`)."""
    win.wall_s, win.cpu_s, win.samples = wall_s, cpu_s, samples
    denom = wall_s * win.ncpu
    win.cpu_util_pct = max(0.0, min(100.0, 100.0 * cpu_s / denom)) if denom > 0 else float("nan")
    win.sampler_cpu_pct = 100.0 * sampler_cpu_s / wall_s if wall_s > 0 else float("nan")
    system = _mean(samples, "system")
    if system is not None and wall_s > 0:
        # system is a share of the affinity CPUs; the tree's share is its CPU time between the
        # window's edges (cpu_s), not its sampled series: a worker process reaped at the window's
        # end moves its CPU time to its parent only then, past the series' last sample, and the
        # series read 2 forked processes that kept 98% of 2 CPUs busy as 38% "other" CPU
        other = system * len(affinity()) - 100.0 * cpu_s / wall_s - win.sampler_cpu_pct
        win.interference_pct = max(0.0, other)
