"""The end-to-end runs whose tests check what a run writes, refuses and resumes, run at once.

Six end-to-end runs take most of the suite's time. Two of them assert physics against what the
same run measured about the machine (the quick run of ``quick_run``, the interpreters' run), so
nothing may run beside them. The other four assert no measured value: the SLURM executor's two
host labels (tests/test_slurm.py), an interrupted and resumed run, a second host on one CPU and
the image workload (tests/test_workflow.py) check files, refusals, statuses and report text.
They run concurrently here, each in its own copy of the repository, while no other test runs:
the session fixture ``side_runs`` (conftest.py) starts the runs the selected tests name (marker
``side_run``) and returns only when every one has ended. Their measurements share the two CPUs,
and the lab says so in their reports (contended windows); their tests do not read them.

A run returns what its test asserts on; an exception is kept and raised again by the test that
asks for that run (:meth:`Outcome.value`), so one broken run fails its own test only.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from conftest import IGNORE, ROOT
from helpers import venv_env

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
    """A copy of the repository at ``base/repo`` (no results, caches or venv)."""
    work = base / "repo"
    shutil.copytree(ROOT, work, ignore=IGNORE)
    return work


def _tail(proc: subprocess.CompletedProcess | subprocess.Popen, out: str = "", err: str = "") -> str:
    return f"exit {proc.returncode}\n{out[-2000:]}\n{err[-4000:]}"


# --- SLURM: a one-node cluster of this machine (scripts/slurm-test-cluster.sh) --------------

SCRIPT = ROOT / "scripts" / "slurm-test-cluster.sh"
DAEMONS = ("slurmctld", "slurmd", "munged")
CONF = Path("/etc/slurm/slurm.conf")

#: The quick config, smaller: the self-check and the gil experiment's counting loop, so that both
#: host labels' SLURM jobs fit in minutes: each SLURM job takes about 12 s on the node (srun,
#: Snakemake again inside, a fresh interpreter that imports torch, then the job), so the run's
#: time is its number of jobs (6 a label) times that.
SLURM_OVERLAY = """
cluster:
  hosts:
    slurm-2cpu: {partition: debug, constraint: cpulab, cpus: %(cpus)d}
    slurm-1cpu: {partition: onecpu, cpus: 1}
experiments: [gil]
selfcheck: {duration_s: 0.3, repeats: 2}
rounds: {target_ci_pct: 0, workers: 1}
gil: {workload: [cpu], mode: [sequential, processes], workers: [2]}
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
    """``bash scripts/slurm-test-cluster.sh ARGS``, its output captured."""
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env)


def run_slurm(base: Path) -> dict:
    """Bring the cluster up, run the quick config (smaller) through the SLURM executor as two
    host labels, bring it down. Returns ``skipped`` (why not, and ``required``) or ``work``,
    ``took`` (s), ``proc`` (exit status and output tail), ``down`` (its status and stderr),
    ``left`` (daemons running after) and ``conf_restored``."""
    env, why, required = slurm_permission()
    if env is None:
        return {"skipped": why, "required": required}
    before = CONF.read_bytes() if CONF.exists() else None
    up = slurm_script("up", env=env)
    if up.returncode != 0:
        raise AssertionError(f"SLURM did not come up: {up.stdout[-2000:]}{up.stderr[-3000:]}")
    try:
        work = copy_repo(base)
        (work / "cluster.yaml").write_text(SLURM_OVERLAY % {"cpus": len(os.sched_getaffinity(0))})
        cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--jobs", "3"]
        cmd += ["--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1"]
        cmd += ["--seconds-between-status-checks", "1", "--latency-wait", "5"]
        cmd += ["--configfile", "config.quick.yaml", "cluster.yaml"]
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=1500, env=venv_env())
        took = time.perf_counter() - t
    finally:
        down = slurm_script("down", env=env, timeout=120)
    return {
        "work": work,
        "took": took,
        "proc": (proc.returncode, _tail(proc, proc.stdout, proc.stderr)),
        "down": (down.returncode, down.stderr[-2000:]),
        "left": slurm_running(),
        "conf_restored": (CONF.read_bytes() if CONF.exists() else None) == before,
    }


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
  repeats: 3
multiprocessing:
  processes: [2]
  threads: [1]
  steps: 1500
  repeats: 3
"""

#: A point of each experiment of INTERRUPT_CONFIG: the interrupted runs target one each.
INTERRUPT_TARGETS = {
    "dataloader": "results/int/dataloader/dataset~io/num_workers~2/metrics.csv",
    "multiprocessing": "results/int/multiprocessing/processes~2/threads~1/metrics.csv",
}

#: How long the processes of an interrupted run may take to end (s): an orphan never does.
ORPHAN_WAIT_S = 10.0


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


def _interrupt_during(work: Path, experiment: str, seen: dict[int, float]) -> int:
    """Run towards one point of `experiment`, send SIGINT to the run's process group (as
    Ctrl-C does) once that job has started its workers, and return snakemake's exit status;
    every pid seen is recorded."""
    cmd = [sys.executable, "-m", "snakemake", INTERRUPT_TARGETS[experiment], "--cores", "4", "--configfile", "int.yaml"]
    cmd += ["--config", "host=int"]  # last: --config takes every following argument
    proc = subprocess.Popen(
        cmd,
        cwd=work,
        env=venv_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    fired = False
    while proc.poll() is None and time.monotonic() < deadline:
        fam = _family(proc.pid)
        seen.update(fam)
        for pid in fam:  # the job (or its worker process): the parent of a CPU sampler
            try:
                p = psutil.Process(pid)
                if p.name() == SAMPLER_NAME:
                    job = p.parent()
                    if len(job.children(recursive=True)) >= 3:  # sampler + 2 workers
                        fired = True
            except (psutil.NoSuchProcess, AttributeError):
                pass
        if fired:
            time.sleep(0.3)
            seen.update(_family(proc.pid))
            os.killpg(proc.pid, signal.SIGINT)
            break
        time.sleep(0.1)
    if not fired:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # leave nothing behind, then fail
        _, err = proc.communicate(timeout=60)
        raise AssertionError(f"never saw the {experiment} job's workers: {err[-2000:]}")
    proc.communicate(timeout=120)
    return proc.returncode


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
    ``incomplete`` (points with a metrics.csv but a missing file or a row not ok); then
    ``resumed`` (exit status and output tail), ``host_json_kept`` and ``host``."""
    import pandas as pd

    work = copy_repo(base)
    (work / "int.yaml").write_text(INTERRUPT_CONFIG)
    host_dir = work / "results" / "int"
    out: dict = {}
    for experiment in INTERRUPT_TARGETS:
        seen: dict[int, float] = {}
        rc = _interrupt_during(work, experiment, seen)
        deadline = time.monotonic() + ORPHAN_WAIT_S
        while alive(seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        incomplete = []
        for m in host_dir.rglob("metrics.csv"):  # every point that looks complete is complete
            missing = [n for n in ("samples.csv", "spans.csv", "job.json") if not (m.parent / n).exists()]
            if missing or not (pd.read_csv(m)["status"] == "ok").all():
                incomplete.append(f"{m}: missing {missing}")
        out[experiment] = {
            "rc": rc,
            "orphans": alive(seen),
            "done": [str(p) for p in (host_dir / experiment).rglob("metrics.csv")],
            "incomplete": incomplete,
        }
    host_json = (host_dir / "host.json").stat().st_mtime_ns
    cmd = [sys.executable, "-m", "snakemake", "--cores", "4", "--configfile", "int.yaml", "--config", "host=int"]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=900, env=venv_env())
    out["resumed"] = (proc.returncode, _tail(proc, "", proc.stderr))
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
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600, env=venv_env())
    return {"host": work / "results" / "e2e-1cpu", "cpu": cpu, "proc": (proc.returncode, _tail(proc, "", proc.stderr))}


# --- The image workload: examples/imagefolder, narrowed -----------------------------------

IMAGES_CONFIG = (
    "selfcheck: {duration_s: 0.3, repeats: 2}\n"
    "workload: {window_s: 0.2, budget_max_s: 25, max_rounds: 6, repeats: 6, diagnose_s: 3}\n"
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
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=900, env=venv_env(env))
    return {"host": work / "results" / "e2e-images", "proc": (proc.returncode, _tail(proc, "", proc.stderr))}


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
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600, env=venv_env(env))
    return {"work": work, "host": work / "results" / "e2e-broken", "proc": (proc.returncode, proc.stderr)}


#: Every side run by the name its tests give in ``@pytest.mark.side_run(name)``.
RUNS: dict[str, Callable[[Path], dict]] = {
    "slurm": run_slurm,
    "interrupted": run_interrupted,
    "one_cpu": run_one_cpu,
    "images": run_images,
    "broken": run_broken,
}


def run_all(names: list[str], base_of: Callable[[str], Path]) -> dict[str, Outcome]:
    """Run the side runs ``names`` at once, each in ``base_of(name)``; return when all ended.

    Raises:
        KeyError: for a name that is not in :data:`RUNS`.
    """
    funcs = {name: RUNS[name] for name in names}

    def timed(name: str) -> Outcome:
        t = time.perf_counter()
        try:
            outcome = Outcome(name, 0.0, result=funcs[name](base_of(name)))
        except BaseException as exc:  # noqa: BLE001 - kept for the test that asks for this run
            outcome = Outcome(name, 0.0, error=exc)
        outcome.seconds = time.perf_counter() - t
        print(f"side run {name}: {outcome.seconds:.0f} s", file=sys.stderr)
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, len(funcs))) as pool:
        outcomes = list(pool.map(timed, funcs))
    return {o.name: o for o in outcomes}
