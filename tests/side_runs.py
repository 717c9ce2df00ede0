"""The end-to-end runs whose tests check what a run writes, refuses and resumes, run at once.

Seven end-to-end runs take most of the suite's time. Two of them assert physics against what the
same run measured about the machine (the quick run of ``quick_run``, the interpreters' run), so
nothing may run beside them. The other five assert no measured value: the SLURM executor's two
host labels (tests/test_slurm.py), an interrupted and resumed run, a second host on one CPU, the
image workload and a workload that does not import (tests/test_workflow.py) check files,
refusals, statuses and report text. A sixth job, torch.compile's cold first call against one
with the cache filled (tests/test_experiments.py), asserts a difference of orders of magnitude
that sharing the CPUs cannot hide, and runs here for the half minute its compiling takes. They
run concurrently here, each run in its own copy of the repository (under a path with a space
and a non-ASCII character). conftest.py starts the runs the selected tests name (marker
``side_run``) in a background thread when the session starts; meanwhile only the tests that
measure nothing run (the modules of its ``BESIDE_SIDE_RUNS``: analysis, report, config and
dry-run tests, on the CPU time the side runs leave idle while they wait on SLURM's steps and on
each other), every other test waits until all have ended, and the fixture ``side_runs`` returns
them then. Their measurements share the two CPUs, and the lab says so in their reports
(contended windows); their tests do not read them.

A run returns what its test asserts on; an exception is kept and raised again by the test that
asks for that run (:meth:`Outcome.value`), so one broken run fails its own test only. Every
process a run starts leads a session of its own and is registered (:func:`_start`): a timeout,
or Ctrl-C in pytest (the session's end), kills each whole process group, and the SLURM cluster goes down whatever
happened (:class:`Cluster`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from conftest import IGNORE, ROOT
from helpers import venv_env

from lab.host import measurement_tmpdir
from lab.window import SAMPLER_NAME


@dataclasses.dataclass
class Outcome:
    """One side run: its wall time (s), what it returned, or the exception it raised."""

    name: str
    seconds: float
    result: Any = None
    error: BaseException | None = None

    def value(self) -> Any:
        """What the run returned; raises what it raised."""
        if self.error is not None:
            raise self.error
        return self.result


def copy_repo(base: Path) -> Path:
    """A copy of the repository at ``base/lab résultats/repo`` (no results, caches or venv): every
    path that reaches a shell command must be quoted."""
    work = base / "lab r\u00e9sultats" / "repo"
    shutil.copytree(ROOT, work, ignore=IGNORE)
    return work


#: Set when pytest is interrupted: every run stops at its next step.
CANCEL = threading.Event()
_PROCS: list[subprocess.Popen] = []
_PROCS_LOCK = threading.Lock()


class Cancelled(RuntimeError):
    """The side runs were interrupted (Ctrl-C in pytest)."""


def _start(cmd: list[str], **kw) -> subprocess.Popen:
    """``Popen(cmd)`` as the leader of a new session, registered so that :func:`kill_all` can
    end its whole process group.

    Raises:
        Cancelled: if the side runs were interrupted.
    """
    with _PROCS_LOCK:
        if CANCEL.is_set():
            raise Cancelled("the side runs were interrupted")
        proc = subprocess.Popen(cmd, start_new_session=True, **kw)
        _PROCS.append(proc)
    return proc


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_all() -> None:
    """Stop every side run: no new process starts, every registered process group is killed."""
    with _PROCS_LOCK:
        CANCEL.set()
        for proc in _PROCS:
            _killpg(proc)


def _run(cmd: list[str], timeout: float, **kw) -> tuple[int, str]:
    """Run ``cmd`` (:func:`_start`) to its end; ``(exit status, its output tail)``. On timeout its
    whole process group is killed.

    Raises:
        subprocess.TimeoutExpired: after ``timeout`` s (the group killed first).
        Cancelled: if the side runs were interrupted.
    """
    proc = _start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc)
        proc.communicate()
        raise
    if CANCEL.is_set():
        raise Cancelled("the side runs were interrupted")
    return proc.returncode, f"exit {proc.returncode}\n{out[-2000:]}\n{err[-4000:]}"


# --- SLURM: a one-node cluster of this machine (scripts/slurm-test-cluster.sh) --------------

SCRIPT = ROOT / "scripts" / "slurm-test-cluster.sh"
DAEMONS = ("slurmctld", "slurmd", "munged")
CONF = Path("/etc/slurm/slurm.conf")

#: The quick config, smaller: the self-check and the gil experiment's counting loop in 2
#: processes (its job interleaves the sequential baseline), so that both host labels' SLURM jobs
#: fit in minutes: each SLURM job takes about 12 s on the node (srun, Snakemake again inside, a
#: fresh interpreter that imports torch, then the job), so the run's time is its number of jobs
#: (5 a label: user environment, host, interpreters, self-check, the point) times that.
SLURM_OVERLAY = """
cluster:
  hosts:
    slurm-2cpu: {partition: debug, constraint: cpulab, cpus: %(cpus)d}
    slurm-1cpu: {partition: onecpu, cpus: 1}
experiments: [gil]
selfcheck: {duration_s: 0.3, repeats: 2}
rounds: {target_ci_pct: 0, workers: 1}
gil: {workload: [cpu], mode: [processes], workers: [2]}
"""


def pid_alive(pid: int | str) -> bool:
    """Whether ``pid`` runs (a zombie, exited and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def slurm_running(names=DAEMONS) -> list[str]:
    """The SLURM and munge daemons running now, as "name (pid N)"."""
    out = []
    for d in names:
        found = subprocess.run(["pgrep", "-x", d], capture_output=True, text=True).stdout.split()
        out += [f"{d} (pid {pid})" for pid in found if pid_alive(pid)]
    return out


def slurm_permission() -> tuple[dict | None, str, bool]:
    """``(env, why_not, required)``: the environment to bring the cluster up with, or None and
    what it would touch with how to allow it; ``required`` under LAB_REQUIRE_SLURM (CI), where
    a refusal is a failure rather than a skip."""
    required = os.environ.get("LAB_REQUIRE_SLURM") == "1"
    asked = required or os.environ.get("LAB_ALLOW_SLURM") == "1"
    installed = all(shutil.which(d) for d in DAEMONS)
    why = ""
    if os.geteuid() != 0:
        why = "bringing SLURM up needs root"
    elif slurm_running():
        why = f"SLURM or munge of this machine's own is running ({', '.join(slurm_running())}): never touched"
    elif not installed and not (asked and shutil.which("apt-get")):
        why = "SLURM is not installed" + ("; no apt-get to install it" if asked else "")
    elif not asked and CONF.exists():
        why = f"{CONF} exists (it would be kept aside and put back)"
    if why:
        why = (
            f"{why}; the SLURM test writes {CONF}, starts munged, slurmctld and slurmd"
            + ("" if installed else " and installs Debian's slurmctld slurmd slurm-client munge")
            + ": set LAB_ALLOW_SLURM=1 to allow it"
        )
        return None, why, required
    return {**os.environ, "LAB_SLURM_INSTALL": "1" if asked else ""}, "", required


def slurm_script(*args, env=None, timeout=600) -> subprocess.CompletedProcess:
    """``bash scripts/slurm-test-cluster.sh ARGS``, its output captured; in a session of its own,
    so that Ctrl-C in the terminal does not stop it half-way."""
    cmd = ["bash", str(SCRIPT), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, start_new_session=True)


class Cluster:
    """The one-node cluster of the SLURM side run: up on entry, down on exit whatever happened
    (a failed ``up`` included, whose leftovers ``down`` removes).

    Attributes:
        env, why, required: :func:`slurm_permission` (``env`` None: not brought up).
        up_error: why ``up`` failed ("" when it came up).
        down: ``(exit status, stderr tail)`` of ``down``; ``left``: daemons running after it;
        conf_restored: slurm.conf as it was before (or absent, as before). Set on exit.
    """

    def __init__(self) -> None:
        self.env, self.why, self.required = slurm_permission()
        self.up_error, self.down, self.left, self.conf_restored = "", None, None, None
        self._before = None

    def __enter__(self) -> Cluster:
        if self.env is not None:
            self._before = CONF.read_bytes() if CONF.exists() else None
            try:
                up = slurm_script("up", env=self.env)
                if up.returncode != 0:
                    self.up_error = f"exit {up.returncode}: {up.stdout[-2000:]}{up.stderr[-3000:]}"
            except subprocess.TimeoutExpired as exc:
                self.up_error = f"timed out: {exc}"
        return self

    def __exit__(self, *exc) -> None:
        if self.env is None:
            return
        try:
            down = slurm_script("down", env=self.env, timeout=120)
            self.down = (down.returncode, down.stderr[-2000:])
        except subprocess.TimeoutExpired as err:
            self.down = (-1, f"timed out: {err}")
        self.left = slurm_running()
        self.conf_restored = (CONF.read_bytes() if CONF.exists() else None) == self._before


def run_slurm(base: Path, cluster: Cluster) -> dict:
    """Through the SLURM executor on ``cluster`` (up), the quick config (smaller) as two host
    labels, then ``snakemake compare`` of both as usual (no SLURM; it measures nothing, so it
    runs here, beside the other side runs). Returns ``cluster`` (its ``down``, ``left`` and
    ``conf_restored`` are set once every side run has ended) and ``skipped`` (why not, with
    ``required``), ``up_error`` (the cluster did not come up), or ``work``, ``took`` (s), ``proc``
    (exit status and output tail), ``server_log`` (the SLURM run's job server log, "" where none
    was written) and ``compare`` (exit status and output tail; None after a failed run)."""
    if cluster.env is None:
        return {"cluster": cluster, "skipped": cluster.why, "required": cluster.required}
    if cluster.up_error:
        return {"cluster": cluster, "up_error": cluster.up_error}
    work = copy_repo(base)
    (work / "cluster.yaml").write_text(SLURM_OVERLAY % {"cpus": len(os.sched_getaffinity(0))})
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--jobs", "3"]
    cmd += ["--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1"]
    cmd += ["--seconds-between-status-checks", "1", "--latency-wait", "5"]
    cmd += ["--configfile", "config.quick.yaml", "cluster.yaml"]
    t = time.perf_counter()
    proc = _run(cmd, 1500, cwd=work, env=venv_env())
    took = time.perf_counter() - t
    log = Path(measurement_tmpdir(str(work)), "server.log")
    server_log = log.read_text() if log.exists() else ""
    compare = [sys.executable, "-m", "snakemake", "--cores", "4", "compare", "--configfile", "cluster.yaml"]
    done = _run(compare, 600, cwd=work, env=venv_env()) if proc[0] == 0 else None
    return {"cluster": cluster, "work": work, "took": took, "proc": proc, "server_log": server_log, "compare": done}


# --- An interrupted run, then the same command again -------------------------------------

INTERRUPT_CONFIG = """\
experiments: [dataloader, multiprocessing]
selfcheck: {duration_s: 0.3, repeats: 2}
rounds: {target_ci_pct: 0}
dataloader:
  dataset: [io]
  num_workers: [2]
  items: {io: 200}
  io_latency_s: 0.01
  repeats: 4
multiprocessing:
  processes: [2]
  threads: [1]
  steps: 1500
  repeats: 4
"""

#: A point of each experiment of INTERRUPT_CONFIG: the interrupted runs target one each.
INTERRUPT_TARGETS = {
    "dataloader": "results/int/dataloader/dataset~io/num_workers~2/metrics.csv",
    "multiprocessing": "results/int/multiprocessing/processes~2/threads~1/omp_wait_policy~default/metrics.csv",
}

#: How long the processes of an interrupted run may take to end (s): an orphan never does.
ORPHAN_WAIT_S = 5.0


def _family(root_pid: int) -> dict[int, float]:
    try:
        procs = [psutil.Process(root_pid), *psutil.Process(root_pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    out = {}
    for p in procs:
        try:
            out[p.pid] = p.create_time()
        except psutil.NoSuchProcess:
            pass
    return out


def _measuring(p: psutil.Process) -> bool:
    """Whether ``p`` is a job's CPU sampler whose job has started its 2 workers."""
    return p.name() == SAMPLER_NAME and len(p.parent().children(recursive=True)) >= 3  # sampler + 2 workers


def _analysing(p: psutil.Process) -> bool:
    """Whether ``p`` runs an analysis job (rule analyse)."""
    return "summarise" in p.cmdline()


def _interrupt_during(work: Path, target: str, seen: dict[int, float], when=_measuring, group: bool = True) -> int:
    """Run towards ``target``, send SIGINT once a process of the run is ``when`` (to the run's
    process group, as Ctrl-C in a terminal does; with ``group`` False to Snakemake alone, as
    ``timeout -s INT`` does), and return snakemake's exit status; every pid seen is recorded."""
    cmd = [sys.executable, "-m", "snakemake", target, "--cores", "4", "--configfile", "int.yaml"]
    cmd += ["--config", "host=int"]  # last: --config takes every following argument
    proc = _start(cmd, cwd=work, env=venv_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    fired = False
    while proc.poll() is None and time.monotonic() < deadline and not CANCEL.is_set() and not fired:
        fam = _family(proc.pid)
        seen.update(fam)
        for pid in fam:
            try:
                fired = fired or when(psutil.Process(pid))
            except (psutil.NoSuchProcess, AttributeError):
                pass
        time.sleep(0.05 if fired else 0.1)
    if not fired:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # leave nothing behind, then fail
        _, err = proc.communicate(timeout=60)
        raise AssertionError(f"never saw a process of the run towards {target} {when.__doc__}: {err[-2000:]}")
    time.sleep(0.25 if when is _measuring else 0)  # a measurement's workers settle; an analysis is short
    seen.update(_family(proc.pid))
    (os.killpg if group else os.kill)(proc.pid, signal.SIGINT)
    proc.communicate(timeout=120)
    return proc.returncode


def _orphans(seen: dict[int, float]) -> list[str]:
    """The processes ``seen`` still alive after :data:`ORPHAN_WAIT_S`, recorded, then killed:
    nothing may run beside the next run."""
    deadline = time.monotonic() + ORPHAN_WAIT_S
    while alive(seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    orphans = alive(seen)
    for line in orphans:
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    return orphans


def alive(seen: dict[int, float]) -> list[str]:
    """Of the processes ``seen`` (pid -> creation time), those still running, as "pid cmdline"."""
    left = []
    for pid, created in seen.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {' '.join(p.cmdline())[:100]}")
        except psutil.NoSuchProcess:
            pass
    return left


def run_interrupted(base: Path) -> dict:
    """Ctrl-C during the dataloader's and the multiprocessing experiment's jobs, then the run
    again. Returns per experiment ``rc`` and, after at most :data:`ORPHAN_WAIT_S`, ``orphans``
    (processes of the run still alive), ``done`` (metrics.csv of the interrupted point) and
    ``incomplete`` (points with a metrics.csv but a missing file or a row not ok); ``analysis``
    (``rc`` and ``orphans`` of a SIGINT to Snakemake alone during the dataloader's analysis job);
    then ``resumed`` (exit status and output tail), ``host_json_kept`` and ``host``."""
    import pandas as pd

    work = copy_repo(base)
    (work / "int.yaml").write_text(INTERRUPT_CONFIG)
    host_dir = work / "results" / "int"
    out: dict = {}
    for experiment, target in INTERRUPT_TARGETS.items():
        seen: dict[int, float] = {}
        rc = _interrupt_during(work, target, seen)
        orphans = _orphans(seen)
        incomplete = []
        for m in host_dir.rglob("metrics.csv"):  # every point that looks complete is complete
            missing = [n for n in ("samples.csv", "spans.csv", "job.json") if not (m.parent / n).exists()]
            if missing:
                incomplete.append(f"{m}: no {', '.join(missing)}")
            elif not (pd.read_csv(m)["status"] == "ok").all():
                incomplete.append(f"{m}: a row not ok")
        out[experiment] = {
            "rc": rc,
            "orphans": orphans,
            "done": [str(p) for p in (host_dir / experiment).rglob("metrics.csv")],
            "incomplete": incomplete,
        }
    # SIGINT to Snakemake alone while an analysis job runs: its outputs are left marked incomplete,
    # which the plain run below must redo (the workflow profile's rerun-incomplete)
    seen = {}
    rc = _interrupt_during(work, "results/int/dataloader/summary.csv", seen, when=_analysing, group=False)
    out["analysis"] = {"rc": rc, "orphans": _orphans(seen)}
    host_json = (host_dir / "host.json").stat().st_mtime_ns
    cmd = [sys.executable, "-m", "snakemake", "--cores", "4", "--configfile", "int.yaml", "--config", "host=int"]
    out["resumed"] = _run(cmd, 900, cwd=work, env=venv_env())
    out["host_json_kept"] = (host_dir / "host.json").stat().st_mtime_ns == host_json
    out["host"] = host_dir
    return out


# --- A second host: the same machine on one CPU -------------------------------------------

ONE_CPU_CONFIG = (
    "experiments: [workload, gil]\nselfcheck: {duration_s: 0.3, repeats: 2}\ngil: {repeats: 6}\n"
    "rounds: {target_ci_pct: 0}\n"
    "workload: {budget_s: 15, max_rounds: 6, repeats: 6}\n"
)


def run_one_cpu(base: Path) -> dict:
    """The gil experiment and the workload pinned to one CPU (the lowest of this process's
    affinity), host label ``e2e-1cpu``. Returns ``host`` (its results directory), ``cpu`` and
    ``proc`` (exit status and output tail)."""
    work = copy_repo(base)
    cpu = min(os.sched_getaffinity(0))
    (work / "one-cpu.yaml").write_text(ONE_CPU_CONFIG)
    # pinned before Snakemake starts, so every job inherits it (no preexec_fn: this is a thread)
    pin = (
        f"import os, sys; os.sched_setaffinity(0, {{{cpu}}}); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    )
    cmd = [sys.executable, "-c", pin, "-m", "snakemake", "--cores", "4", "--configfile", "config.quick.yaml"]
    cmd += ["one-cpu.yaml", "--config", "host=e2e-1cpu"]
    return {"host": work / "results" / "e2e-1cpu", "cpu": cpu, "proc": _run(cmd, 600, cwd=work, env=venv_env())}


# --- The image workload: examples/imagefolder, narrowed -----------------------------------

IMAGES_CONFIG = (
    "selfcheck: {duration_s: 0.3, repeats: 2}\n"
    "workload: {window_s: 0.2, budget_max_s: 15, max_rounds: 6, repeats: 6, diagnose_s: 3}\n"
)


def run_images(base: Path) -> dict:
    """examples/imagefolder by changing only the config: a ResNet on JPEG files decoded and
    augmented with PIL (width 16, 64-pixel crops, steps of about 0.05 s), host label
    ``e2e-images``. Returns ``host`` and ``proc`` (exit status and output tail)."""
    work = copy_repo(base)
    (work / "small.yaml").write_text(IMAGES_CONFIG)
    env = {**os.environ, "LAB_IMAGEFOLDER": str(base / "images")}
    env |= {"LAB_IMAGEFOLDER_WIDTH": "16", "LAB_IMAGEFOLDER_CROP": "64"}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "4", "--configfile", "config.quick.yaml"]
    cmd += ["examples/imagefolder/config.yaml", "small.yaml", "--config", "host=e2e-images"]
    return {"host": work / "results" / "e2e-images", "proc": _run(cmd, 900, cwd=work, env=venv_env(env))}


# --- A workload that does not import, beside the fixture experiment ----------------------

BROKEN_CONFIG = (
    "experiments: [workload, nap]\nselfcheck: {duration_s: 0.3, repeats: 2}\nnap: {sleepers: [1, 2]}\n"
    "workload: {entry: 'mylab.missing:build'}\n"
)


def run_broken(base: Path) -> dict:
    """A workload whose entry exists but does not import (``mylab.missing``, on PYTHONPATH), with
    the fixture experiment nap beside it, host label ``e2e-broken``. Returns ``work``, ``host``
    and ``proc`` (exit status, output tail)."""
    from conftest import add_fixture_experiment

    work = copy_repo(base)
    add_fixture_experiment(work)
    (base / "mylab").mkdir()
    (base / "mylab" / "missing.py").write_text("import not_installed_here\n\n\ndef build():\n    pass\n")
    (work / "broken.yaml").write_text(BROKEN_CONFIG)
    env = {**os.environ, "PYTHONPATH": str(base)}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "4", "--configfile", "config.quick.yaml", "broken.yaml"]
    cmd += ["--config", "host=e2e-broken"]
    return {"work": work, "host": work / "results" / "e2e-broken", "proc": _run(cmd, 600, cwd=work, env=venv_env(env))}


# --- torch.compile: a cold first call, then one with the job's cache filled ---------------

#: The jit experiment's command line for one compile point in two worker processes (no workflow).
JIT_COMPILE_ARGS = ["--model", "mlp", "--mode", "compile", "--iterations", "5", "--warmup-calls", "1", "--repeats", "2"]


def run_jit_compile(base: Path) -> dict:
    """A compile job of the jit experiment in two worker processes, one after the other: the first
    compiles with the job's compile cache empty, the second finds it filled (half a minute of
    compiling on 2 CPUs, which needs no workflow around it). Skipped (``skipped``: why) without a
    C++ compiler. Returns ``out`` (the point's directory), ``tmp`` (the job's TMPDIR) and
    ``proc`` (exit status and output tail)."""
    from experiments.jit import measure as jit

    if jit.cxx_compiler()[0] is None:
        return {"skipped": "no C++ compiler for inductor here"}
    out, tmp = base / "point", base / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "TORCHINDUCTOR_CACHE_DIR": str(base / "pipeline-cache")}
    cmd = [sys.executable, "-m", "lab.point", "jit", *JIT_COMPILE_ARGS, "--rounds-workers", "2", "--out", str(out)]
    proc = _run([*cmd, "--baseline", "mode=eager"], 600, cwd=ROOT, env=venv_env(env))
    return {"out": out, "tmp": tmp, "proc": proc}


#: Every side run by the name its tests give in ``@pytest.mark.side_run(name)``.
RUNS: dict[str, Callable[..., dict]] = {
    "slurm": run_slurm,  # run_slurm(base, cluster): the cluster is run_all's
    "interrupted": run_interrupted,
    "one_cpu": run_one_cpu,
    "images": run_images,
    "broken": run_broken,
    "jit_compile": run_jit_compile,
}


def run_all(names: list[str], base_of: Callable[[str], Path]) -> dict[str, Outcome]:
    """Run the side runs ``names`` at once, each in ``base_of(name)``; return when all ended.
    The SLURM cluster (where ``slurm`` is among them) comes up before any run starts and goes
    down after all have ended. On Ctrl-C every run's process group is killed, then it is raised.

    Raises:
        KeyError: for a name that is not in :data:`RUNS`.
    """
    funcs = {name: RUNS[name] for name in names}
    CANCEL.clear()
    _PROCS.clear()

    def timed(name: str, cluster: Cluster | None) -> Outcome:
        t = time.perf_counter()
        try:
            args = (base_of(name), cluster) if name == "slurm" else (base_of(name),)
            outcome = Outcome(name, 0.0, result=funcs[name](*args))
        except BaseException as exc:  # noqa: BLE001 - kept for the test that asks for this run
            outcome = Outcome(name, 0.0, error=exc)
        outcome.seconds = time.perf_counter() - t
        print(f"side run {name}: {outcome.seconds:.0f} s", file=sys.stderr)
        return outcome

    with Cluster() if "slurm" in funcs else contextlib.nullcontext() as cluster:
        pool = ThreadPoolExecutor(max_workers=max(1, len(funcs)))
        futures = [pool.submit(timed, name, cluster) for name in funcs]
        try:
            outcomes = [f.result() for f in futures]
        except BaseException:
            kill_all()
            raise
        finally:
            pool.shutdown(wait=True)
            kill_all()  # whatever a run left in its process groups: nothing runs beside the next test
    return {o.name: o for o in outcomes}
