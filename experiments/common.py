"""Measurement machinery shared by every experiment module.

What lives here, and why it is shared:

* :func:`available_cpus` -- the CPUs this process may run on (``os.sched_getaffinity``),
  the denominator of every utilisation figure.
* :class:`CpuSampler` -- a sampler process (:mod:`experiments.sampler`) that samples, with psutil, the busy share of
  every core, of the whole system, and of our own process tree (children included:
  DataLoader workers and ``multiprocessing`` children count) during a measured window.
* :func:`measure` -- a context manager that times one measured window (wall clock
  ``time.perf_counter``), runs the sampler and reports the process tree's CPU utilisation
  ``cpu_util_pct = tree CPU seconds / (wall seconds * available CPUs) * 100`` (0-100).
* :func:`set_torch_threads` -- sets intra-op (and optionally inter-op) threads explicitly and
  returns what torch reports back, failing loudly on a mismatch.
* :func:`cli_main` -- builds a command-line interface from an experiment's frozen
  ``Params`` dataclass, runs the experiment's pure ``run`` function and writes its CSVs
  atomically (``metrics.csv``, ``samples.csv``, ``spans.csv``, ``job.json``).

Nothing here imports torch at module level: the gil experiment does not need it and
importing torch costs about 2.5 s per process.
"""

from __future__ import annotations

import argparse
import atexit
import csv
import dataclasses
import fcntl
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
import time
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from experiments import sampler as sampler_mod

#: Columns every metrics row carries. In metrics.csv the order is host, experiment, then the
#: experiment's parameters (Params fields), then the rest of these, then experiment-specific ones.
COMMON_COLUMNS = (
    "host",
    "experiment",
    "repeat",
    "role",
    "status",
    "reason",
    "wall_s",
    "cpu_util_pct",
    "available_cpus",
    "interference_pct",
    "contended",
    "sampler_cpu_pct",
    "window_start_unix",
    "window_end_unix",
)


def cgroup_quota_cpus() -> tuple[float | None, str]:
    """CPUs granted by the cgroup CPU quota (``quota / period``).

    Reads cgroup v2 ``/sys/fs/cgroup/cpu.max``, else v1 ``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us``.

    Returns:
        ``(cpus, "")``; ``(None, "")`` when the cgroup sets no quota; ``(None, reason)`` when
        neither file can be read.
    """
    try:
        fields = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if fields[0] == "max":
            return None, ""
        return int(fields[0]) / int(fields[1]), ""
    except (OSError, IndexError, ValueError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return (quota / period if quota > 0 else None), ""
    except (OSError, ValueError):
        return None, "no readable cgroup cpu.max or cpu.cfs_quota_us"


def available_cpus() -> int:
    """CPUs this process can use: its affinity (``os.sched_getaffinity``, which honours
    ``taskset`` and cpusets, unlike ``os.cpu_count()``), capped by the cgroup CPU quota
    rounded up (a quota of 1.5 CPUs counts as 2).

    This is the denominator of ``cpu_util_pct`` and the limit above which a point (its
    Params' ``cpus_requested()``) is oversubscribed.
    """
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        n = os.cpu_count() or 1
    quota, _ = cgroup_quota_cpus()
    if quota is not None:
        n = min(n, max(1, math.ceil(quota)))
    return n


#: Environment variables pointed at directories the pipeline owns, so that no job writes
#: caches into $HOME or the system temp directory.
OWNED_DIRS = {
    "TMPDIR": "tmp",
    "MPLCONFIGDIR": "matplotlib",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "XDG_CACHE_HOME": "xdg-cache",
    "XDG_CONFIG_HOME": "xdg-config",
}


def prepare_environment(code_dir: str, owned_dir: str) -> dict[str, str]:
    """Set the environment every job inherits (called by the Snakefile at parse time).

    Points each variable of :data:`OWNED_DIRS` at a subdirectory of ``owned_dir`` (created),
    sets ``MPLBACKEND=Agg`` (headless) and puts ``code_dir`` first on ``PYTHONPATH`` so that
    ``python -m experiments.<name>`` works from any working directory.

    Returns:
        The variables that were set, with their values.
    """
    root = Path(owned_dir).resolve()
    env = {}
    for var, sub in OWNED_DIRS.items():
        (root / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(root / sub)
    env["MPLBACKEND"] = "Agg"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (code_dir, os.environ.get("PYTHONPATH")) if p)
    os.environ.update(env)
    return env


def measurement_tmpdir(checkout: str) -> str:
    """A short temporary directory the pipeline owns, for the TMPDIR of measurement jobs.

    Python 3.11's multiprocessing puts AF_UNIX sockets under TMPDIR
    (``<TMPDIR>/pymp-XXXXXXXX/listener-XXXXXXXX``; DataLoader workers use them to pass tensors'
    file descriptors), and AF_UNIX paths are limited to 107 bytes. Under a deep checkout
    ``.snakemake/lab/tmp`` is too long: measured here, a worker failed with "AF_UNIX path too long"
    and its DataLoader waited forever. So measurement jobs get ``/tmp/cpulab-<uid>-<hash of the
    checkout path>`` (mode 700; the system temp directory where /tmp does not exist).

    Returns:
        The directory's path (created).
    """
    import hashlib
    import tempfile

    base = "/tmp" if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK) else tempfile.gettempdir()
    digest = hashlib.sha1(str(Path(checkout).resolve()).encode()).hexdigest()[:10]
    path = Path(base) / f"cpulab-{os.getuid()}-{digest}"
    path.mkdir(mode=0o700, exist_ok=True)
    return str(path)


def sanitise_host(name: str) -> str:
    """Turn a host name into a label safe for paths: ``[A-Za-z0-9._-]``, no leading dot.

    Raises:
        ValueError: if nothing usable is left.
    """
    label = re.sub(r"[^A-Za-z0-9._-]+", "-", name or "").strip("-.")
    if not label:
        raise ValueError(f"host label {name!r} has no usable characters (allowed: A-Z a-z 0-9 . _ -)")
    return label


def default_host() -> str:
    """The sanitised short hostname of this machine (up to its first dot), the default label."""
    return sanitise_host(socket.gethostname().split(".")[0])


# --------------------------------------------------------------------------------------
# CPU accounting
# --------------------------------------------------------------------------------------


def tree_cpu_seconds(proc: psutil.Process | None = None) -> float:
    """CPU seconds (user + system) used so far by a process and all its descendants.

    Counts the process itself, the children it has already waited for (``children_user``
    and ``children_system``) and every live descendant except this process's CPU sampler.
    Differences of this value over a window give the tree's CPU time in that window.
    """
    exclude = frozenset({_SAMPLER.pid}) if _SAMPLER is not None and _SAMPLER.pid else frozenset()
    return sampler_mod.tree_cpu_seconds(proc or psutil.Process(), exclude)


class CpuSampler:
    """Samples CPU utilisation during measured windows, from a separate process.

    The sampling runs in ``python -m experiments.sampler`` (see that module for why a thread
    would starve under the GIL). Every ``1 / hz`` seconds it records

    * ``cpu<i>``: busy % of logical CPU ``i`` (``psutil.cpu_percent(percpu=True)``, 0-100);
    * ``system``: busy % of the whole machine over the available CPUs (0-100);
    * ``tree``: our process tree's CPU time over the interval, as % of all available CPUs
      (0-100), children included, the sampler excluded.

    One sampler process serves all windows of a job; between windows it sleeps on its input.

    Args:
        hz: sampling rate in samples per second (> 0).
    """

    def __init__(self, hz: float = 10.0) -> None:
        if hz <= 0:
            raise ValueError(f"sample_hz must be > 0, got {hz}")
        self.hz = hz
        env = dict(os.environ)
        code_dir = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (code_dir, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "experiments.sampler",
                "--pid",
                str(os.getpid()),
                "--hz",
                str(hz),
                "--ncpu",
                str(available_cpus()),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.pid = self._proc.pid
        self.sampler_cpu_s = 0.0

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

        Afterwards ``sampler_cpu_s`` holds the sampler's own CPU seconds during the window.
        """
        reply = json.loads(self._ask("stop"))
        self.sampler_cpu_s = reply["sampler_cpu_s"] - self._cpu_at_start
        return [tuple(x) for x in reply["samples"]]

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write("quit\n")
                self._proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            self._proc.wait(timeout=5)


_SAMPLER: CpuSampler | None = None


def get_sampler(hz: float) -> CpuSampler:
    """This process's sampler at ``hz``, started on first use and closed at exit."""
    global _SAMPLER
    if _SAMPLER is None or _SAMPLER.hz != hz or _SAMPLER._proc.poll() is not None:
        if _SAMPLER is not None:
            _SAMPLER.close()
        _SAMPLER = CpuSampler(hz)
        atexit.register(_SAMPLER.close)
    return _SAMPLER


@dataclasses.dataclass
class Window:
    """One measured window: wall time, tree CPU time and the CPU samples taken in it.

    Attributes:
        wall_s: wall-clock duration (s) from ``perf_counter``.
        cpu_s: CPU seconds of the process tree in the window.
        cpu_util_pct: ``cpu_s / (wall_s * available CPUs) * 100``, clipped to 0-100.
        interference_pct: CPU used by everything else on the machine during the window, in %
            of one CPU: mean(system busy) - mean(our tree), both in % of all available CPUs,
            times the available CPUs, minus the sampler's own share; clipped at 0.
        sampler_cpu_pct: the sampler process's own CPU time over the window, % of one CPU.
        start_unix, end_unix: the window's bounds as Unix time (s), to check overlaps.
        t0: ``perf_counter`` value at the start; spans are reported relative to it.
        samples: ``[(t_s, series, busy_pct)]`` from :class:`CpuSampler`, ``t_s`` in seconds
            from the window's start.
    """

    wall_s: float = float("nan")
    cpu_s: float = float("nan")
    cpu_util_pct: float = float("nan")
    interference_pct: float = float("nan")
    sampler_cpu_pct: float = float("nan")
    start_unix: float = float("nan")
    end_unix: float = float("nan")
    t0: float = 0.0
    samples: list[tuple[float, str, float]] = dataclasses.field(default_factory=list)


@contextmanager
def measure(sample_hz: float = 10.0) -> Iterator[Window]:
    """Time one measured window and sample CPU utilisation during it.

    Usage::

        with measure(10) as w:
            work()
        w.wall_s, w.cpu_util_pct, w.samples

    The body should contain only the work being measured: set-up and warm-up go before.
    """
    win = Window()
    proc = psutil.Process()
    sampler = get_sampler(sample_hz)
    sampler.start()
    cpu0 = tree_cpu_seconds(proc)
    win.start_unix = time.time()
    win.t0 = time.perf_counter()
    try:
        yield win
    finally:
        t1 = time.perf_counter()
        win.end_unix = time.time()
        cpu1 = tree_cpu_seconds(proc)
        # perf_counter is CLOCK_MONOTONIC on Linux, the sampler's clock: make times relative
        win.samples = [(round(t - win.t0, 6), s, v) for t, s, v in sampler.stop()]
        win.wall_s = t1 - win.t0
        win.cpu_s = cpu1 - cpu0
        ncpu = available_cpus()
        denom = win.wall_s * ncpu
        win.cpu_util_pct = max(0.0, min(100.0, 100.0 * win.cpu_s / denom)) if denom > 0 else float("nan")
        win.sampler_cpu_pct = 100.0 * sampler.sampler_cpu_s / win.wall_s if win.wall_s > 0 else float("nan")
        system = [v for _, s, v in win.samples if s == "system"]
        tree = [v for _, s, v in win.samples if s == "tree"]
        if system and tree:
            n_affinity = len(os.sched_getaffinity(0))  # system is a share of these, tree of ncpu
            other = sum(system) / len(system) * n_affinity - sum(tree) / len(tree) * ncpu - win.sampler_cpu_pct
            win.interference_pct = max(0.0, other)


#: A window whose interference averages more than this (% of one CPU) is flagged contended.
CONTENDED_PCT = 10.0


def window_columns(win: Window) -> dict:
    """The metrics columns every experiment takes from a :class:`Window`."""
    return {
        "wall_s": win.wall_s,
        "cpu_util_pct": win.cpu_util_pct,
        "available_cpus": available_cpus(),
        "interference_pct": win.interference_pct,
        "contended": bool(win.interference_pct > CONTENDED_PCT),
        "sampler_cpu_pct": win.sampler_cpu_pct,
        "window_start_unix": win.start_unix,
        "window_end_unix": win.end_unix,
    }


# --------------------------------------------------------------------------------------
# Threads
# --------------------------------------------------------------------------------------


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``).

    Called first thing in worker processes, so that killing a job (timeout, Ctrl-C, SIGTERM
    from Snakemake) never leaves its workers running as orphans. A no-op where prctl is absent.
    """
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def set_torch_threads(intra_op: int, inter_op: int | None = None) -> dict:
    """Set torch's intra-op (and optionally inter-op) thread counts and read them back.

    Snakemake exports ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` equal to a rule's ``threads:``;
    experiments never rely on that and set their thread counts here explicitly.

    Returns:
        ``{"torch_threads": torch.get_num_threads(), "interop_threads":
        torch.get_num_interop_threads(), "omp_num_threads_env": $OMP_NUM_THREADS or ""}``.

    Raises:
        RuntimeError: if torch reports a different number than was requested, naming both.
    """
    import torch

    torch.set_num_threads(intra_op)
    if inter_op is not None and torch.get_num_interop_threads() != inter_op:
        torch.set_num_interop_threads(inter_op)
    observed = torch_thread_info()
    if observed["torch_threads"] != intra_op:
        raise RuntimeError(
            f"requested {intra_op} intra-op threads but torch.get_num_threads() reports {observed['torch_threads']}"
        )
    if inter_op is not None and observed["interop_threads"] != inter_op:
        raise RuntimeError(
            f"requested {inter_op} inter-op threads but torch.get_num_interop_threads() "
            f"reports {observed['interop_threads']}"
        )
    return observed


def torch_thread_info() -> dict:
    """What torch and the environment say about threads right now (see :func:`set_torch_threads`)."""
    import torch

    return {
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS", ""),
    }


# --------------------------------------------------------------------------------------
# Results and the command line
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class RunResult:
    """What an experiment's ``run(params)`` returns: raw data, no aggregates.

    Attributes:
        rows: one dict per replicate (metrics; the CLI adds ``host`` and ``experiment``).
        samples: CPU samples, dicts with ``repeat, t_s, series, busy_pct``.
        spans: work spans, dicts with ``repeat, actor, kind, start_s, end_s`` (seconds from
            the start of the measured window) plus kind-specific fields.
    """

    rows: list[dict] = dataclasses.field(default_factory=list)
    samples: list[dict] = dataclasses.field(default_factory=list)
    spans: list[dict] = dataclasses.field(default_factory=list)

    @classmethod
    def skipped(cls, reason: str, **row) -> RunResult:
        """A point that was not measured: one ``point`` row with status ``skipped``, the
        ``reason`` and any extra columns in ``row`` (e.g. the thread settings seen)."""
        return cls(rows=[{"repeat": 0, "role": "point", "status": "skipped", "reason": reason, **row}])

    def add_window(self, repeat: int, win: Window, role: str = "point", params=None, **row) -> dict:
        """Append a metrics row built from ``win`` plus ``row`` and keep its samples.

        ``role`` is ``point`` or ``baseline``; ``params`` (a Params object) overrides the
        job's parameters in this row's parameter columns (baseline rows).
        """
        full = {"repeat": repeat, "role": role, "status": "ok", "reason": "", **window_columns(win), **row}
        if params is not None:
            full["_params"] = dataclasses.asdict(params)
        self.rows.append(full)
        self.samples.extend(
            {"repeat": repeat, "role": role, "t_s": t, "series": s, "busy_pct": round(v, 3)} for t, s, v in win.samples
        )
        return full


@dataclasses.dataclass
class Measured:
    """One measured window of a :class:`Runner`.

    Attributes:
        win: the window (wall time, CPU, samples).
        row: experiment-specific metrics columns (throughput with its unit in the name ...).
        spans: work spans with ``actor, kind, start_s, end_s`` in seconds from ``win.t0``.
    """

    win: Window
    row: dict
    spans: list[dict] = dataclasses.field(default_factory=list)


class Runner(typing.Protocol):
    """A configuration point made ready to measure: set-up and warm-up happen when it is
    created, ``once()`` measures one window, ``close()`` releases processes."""

    def once(self) -> Measured: ...

    def close(self) -> None: ...


def interleave(make_runner: Callable[[typing.Any], Runner], params, baseline=None) -> RunResult:
    """Measure ``params.repeats`` rounds of a point and, interleaved, its baseline.

    Both are set up (and warmed up) first. In round ``r`` the point and the baseline are each
    measured once, in the order point, baseline for even ``r`` and baseline, point for odd
    ``r`` (A B B A ...), so that slow drift of a shared machine (timings here move by up to
    30% between runs) affects both alike and cancels out of their ratio, as in asv's rounds
    and pyperf's worker processes. Without a baseline, or when the point is its own
    baseline, only the point is measured.

    Returns:
        A :class:`RunResult`; rows have ``role`` ``point`` or ``baseline``.
    """
    runners = [("point", params, make_runner(params))]
    try:
        if baseline is not None and baseline != params:
            runners.append(("baseline", baseline, make_runner(baseline)))
        result = RunResult()
        for r in range(params.repeats):
            for role, p, runner in runners if r % 2 == 0 else runners[::-1]:
                m = runner.once()
                result.add_window(r, m.win, role=role, params=p if role == "baseline" else None, **m.row)
                result.spans.extend({"repeat": r, "role": role, **s} for s in m.spans)
        return result
    finally:
        for _, _, runner in runners:
            runner.close()


def check_choice(name: str, value, allowed) -> None:
    """Raise ``ValueError`` naming ``name``, the bad ``value`` and the ``allowed`` values."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {sorted(allowed)}")


def check_min(name: str, value, minimum) -> None:
    """Raise ``ValueError`` if ``value`` is not a finite number ``>= minimum``, naming the
    parameter and the bound."""
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name}={value!r} is out of range; it must be >= {minimum}")


def _atomic_write(path: Path, write: Callable[[typing.TextIO], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", newline="") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_csv(path: Path, rows: list[dict], columns: list[str] | None = None) -> None:
    """Write ``rows`` as CSV atomically (temporary file then rename); header even if empty."""
    if columns is None:
        columns = []
        for row in rows:
            columns.extend(k for k in row if k not in columns)

    def write(fh):
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="raise")
        w.writeheader()
        w.writerows(rows)

    _atomic_write(path, write)


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` as indented JSON atomically."""
    _atomic_write(path, lambda fh: json.dump(data, fh, indent=2, sort_keys=True, default=str))


SAMPLE_COLUMNS = ["repeat", "role", "t_s", "series", "busy_pct"]
SPAN_COLUMNS = ["repeat", "role", "actor", "kind", "start_s", "end_s"]


@contextmanager
def exclusive(lock_path: str | None) -> Iterator[float]:
    """Hold an exclusive ``flock`` on ``lock_path`` (no-op when None); yields the wait in s.

    Measurement jobs take this lock so that two of them never measure at the same time,
    even when a scheduler starts them together.
    """
    if not lock_path:
        yield 0.0
        return
    Path(lock_path).parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - t
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _field_type(params_cls, field: dataclasses.Field):
    hints = typing.get_type_hints(params_cls)
    tp = hints[field.name]
    if typing.get_origin(tp) is typing.Literal:
        args = typing.get_args(tp)
        return type(args[0]), args
    return tp, None


def _parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes"):
        return True
    if low in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser(params_cls, description: str) -> argparse.ArgumentParser:
    """An ``argparse`` parser with one ``--option`` per field of the ``Params`` dataclass.

    ``Literal[...]`` fields become choices; defaults come from the dataclass. Common options:
    ``--out DIR`` (where the CSVs go), ``--host LABEL`` and ``--lock PATH``.
    """
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(params_cls):
        tp, choices = _field_type(params_cls, f)
        conv = _parse_bool if tp is bool else tp
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=conv,
            choices=choices,
            default=f.default,
            help=(f.metadata.get("help", "") if f.metadata else ""),
        )
    p.add_argument("--out", required=True, help="output directory for metrics.csv, samples.csv, spans.csv")
    p.add_argument("--host", default=None, help="host label (default: sanitised hostname)")
    p.add_argument("--lock", default=None, help="lock file serialising measurement jobs")
    p.add_argument(
        "--max-oversubscription",
        type=float,
        default=None,
        metavar="FACTOR",
        help="skip the point if it asks for more than FACTOR x the available CPUs (default: no limit)",
    )
    p.add_argument(
        "--baseline",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="also measure this variant of the point (fields overridden), interleaved with it",
    )
    return p


def parse_overrides(params_cls, items: list[str]) -> dict:
    """Turn ``["mode=sequential", ...]`` into typed field values of ``params_cls``.

    Raises:
        ValueError: for an item without ``=``, an unknown field or a value of the wrong type.
    """
    fields = {f.name: f for f in dataclasses.fields(params_cls)}
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"--baseline {item!r}: expected KEY=VALUE with KEY one of {sorted(fields)}")
        tp, choices = _field_type(params_cls, fields[key])
        try:
            value = _parse_bool(text) if tp is bool else tp(text)
        except (ValueError, argparse.ArgumentTypeError):
            raise ValueError(f"--baseline {item!r}: {key} must be of type {tp.__name__}") from None
        if choices is not None and value not in choices:
            raise ValueError(f"--baseline {item!r}: {key} must be one of {list(choices)}")
        out[key] = value
    return out


def oversubscription_skip(params, limit: float | None, ncpu: int | None = None) -> str | None:
    """Why a point is skipped for asking for too many CPUs, or None to measure it.

    ``params.cpus_requested()`` (threads, processes or workers running at once) above
    ``limit`` x the available CPUs is skipped: such a point measures mostly the scheduler
    and can take many times longer than the rest of its sweep. Up to the limit a point is
    measured and flagged ``oversubscribed`` where it asks for more than the available CPUs,
    because the cost of oversubscription is itself a finding.

    Args:
        params: a Params object with a ``cpus_requested()`` method (CPUs, int).
        limit: the factor (config ``max_oversubscription``), or None for no limit.
        ncpu: available CPUs (default :func:`available_cpus`).
    """
    if limit is None or not hasattr(params, "cpus_requested"):
        return None
    ncpu = ncpu or available_cpus()
    asked = params.cpus_requested()
    if asked <= limit * ncpu:
        return None
    return (
        f"asks for {asked} CPUs at once but this host has {ncpu} available; max_oversubscription "
        f"{limit:g} allows up to {math.floor(limit * ncpu)}"
    )


def cli_main(
    experiment: str,
    params_cls,
    run: Callable[[typing.Any, typing.Any], RunResult],
    description: str,
    argv: list[str] | None = None,
) -> int:
    """Command-line entry point shared by the experiment modules.

    Parses ``argv`` into ``params_cls`` (and ``--baseline`` overrides into a second Params),
    runs ``run(params, baseline)`` while holding the measurement lock (or, for a point above
    ``--max-oversubscription``, writes one row with status ``skipped`` and the reason; see
    :func:`oversubscription_skip`), and writes
    ``metrics.csv``, ``samples.csv``, ``spans.csv`` and ``job.json`` into ``--out``.
    Parameter errors exit with status 2 and a message naming the parameter.
    """
    parser = build_parser(params_cls, description)
    args = parser.parse_args(argv)
    kwargs = {f.name: getattr(args, f.name) for f in dataclasses.fields(params_cls)}
    try:
        params = params_cls(**kwargs)
        baseline = dataclasses.replace(params, **parse_overrides(params_cls, args.baseline)) if args.baseline else None
    except ValueError as exc:
        parser.error(str(exc))
    host = sanitise_host(args.host) if args.host else default_host()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from experiments import JOB_START_UNIX as job_start

    print(f"[{experiment}] {params}", file=sys.stderr, flush=True)
    skip = oversubscription_skip(params, args.max_oversubscription)
    with exclusive(args.lock) as waited:
        locked_at = time.time()
        if skip is not None:
            result = RunResult.skipped(skip)
        else:
            result = run(params, baseline)
        released_at = time.time()
    param_cols = dataclasses.asdict(params)
    rows = [
        {"host": host, "experiment": experiment, **(r.pop("_params", None) or param_cols), **r} for r in result.rows
    ]
    columns = list(COMMON_COLUMNS[:2]) + list(param_cols)
    for r in rows:
        columns.extend(k for k in r if k not in columns)
    write_csv(out / "samples.csv", result.samples, SAMPLE_COLUMNS)
    span_cols = list(SPAN_COLUMNS)
    for s in result.spans:
        span_cols.extend(k for k in s if k not in span_cols)
    write_csv(out / "spans.csv", result.spans, span_cols)
    write_json(
        out / "job.json",
        {
            "experiment": experiment,
            "host": host,
            "params": param_cols,
            "baseline": dataclasses.asdict(baseline) if baseline else None,
            "pid": os.getpid(),
            "python": platform.python_version(),
            "job_start_unix": job_start,
            "lock_wait_s": waited,
            "lock_acquired_unix": locked_at,
            "lock_released_unix": released_at,
            "job_end_unix": time.time(),
            "env": {var: os.environ.get(var) for var in (*OWNED_DIRS, "OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        },
    )
    write_csv(out / "metrics.csv", rows, columns)  # last: its presence means the point is complete
    for r in rows:
        print(
            f"[{experiment}] repeat={r['repeat']} {r.get('role', '')} status={r['status']} "
            f"wall_s={r.get('wall_s', float('nan')):.4f} cpu_util_pct={r.get('cpu_util_pct', float('nan')):.1f} "
            f"{r.get('reason') or ''}",
            file=sys.stderr,
        )
    return 0
