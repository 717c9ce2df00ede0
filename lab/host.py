"""This process on this host: the CPUs it may use, the directories the pipeline owns, its label.

* :func:`available_cpus` -- the denominator of every utilisation figure: the affinity
  (``os.sched_getaffinity``, which honours ``taskset`` and cpusets) capped by the CPU quota of
  this process's own cgroup (:func:`lab.capacity.cgroup_quota`).
* :func:`prepare_environment`, :func:`measurement_tmpdir` -- caches and temporary files in
  directories the pipeline owns, never in ``$HOME`` or the system temp directory.
* :func:`sanitise_host`, :func:`default_host` -- the host label of ``results/<host>/``.
* :func:`die_with_parent` -- worker processes stop when the job that started them dies.

Nothing here imports torch, pandas or matplotlib.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from lab.capacity import cgroup_quota
from lab.fileio import read_json_object
from lab.prctl import set_parent_death_signal, set_process_name  # noqa: F401 (re-exported)


def affinity() -> list[int]:
    """Logical CPUs this process may run on (``os.sched_getaffinity``), sorted."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return list(range(os.cpu_count() or 1))


def available_cpus() -> int:
    """CPUs this process can use: its affinity (unlike ``os.cpu_count()``), capped by the cgroup
    CPU quota rounded up (a quota of 1.5 CPUs counts as 2).

    This is the denominator of ``cpu_util_pct`` and the limit above which a point (its
    Params' ``cpus_requested()``) is oversubscribed.
    """
    n = len(affinity())
    quota = cgroup_quota().cpus
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


#: Variables whose paths reach a command line unquoted: Snakemake's scheduler (it runs the
#: CBC solver on a file under TMPDIR) and inductor's g++ calls (sources under TMPDIR and the cache
#: directory) split them at spaces. Measured under a checkout in ``lab résultats/``: Snakemake
#: printed "Failed to solve scheduling problem with ILP solver" and fell back to its greedy
#: scheduler, and torch.compile failed with "g++: fatal error: input file '/tmp/sp' is the same
#: as output file".
NO_SPACES = ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR")


#: Environment variable naming a directory of the running job's own, empty when the job starts,
#: shared by its worker processes and removed when it ends (:func:`job_scratch`).
JOB_SCRATCH = "LAB_JOB_SCRATCH"

#: torch.compile's cache inside a job's scratch directory (:func:`job_scratch`).
INDUCTOR_CACHE = "inductor"


@contextmanager
def job_scratch(sweep: bool = False) -> Iterator[Path]:
    """A fresh directory for one job, named in ``$LAB_JOB_SCRATCH`` while it lasts, under
    ``$TMPDIR`` (the pipeline's own, without spaces: :data:`NO_SPACES`), removed after.

    A job's worker processes are forked inside it and inherit the variable, so the first one
    finds the directory empty and later ones find what it wrote. torch.compile's on-disk cache
    (``$TORCHINDUCTOR_CACHE_DIR``, :data:`INDUCTOR_CACHE` inside it) is kept there for every
    experiment, its previous value put back after: a first call is measured cold in a job's first
    worker process and with the cache filled in later ones, whatever earlier runs left behind
    (the jit experiment reports both; the workload's torch.compile candidates pay the same).

    Args:
        sweep: first remove the ``job-*`` directories of earlier jobs in ``$TMPDIR`` (a job
            stopped by SIGTERM or SIGKILL, on its timeout or a cancelled run, leaves its own
            behind); only for a caller that holds the measurement lock, so no other job's
            directory is in use.
    """
    if sweep:
        for old in Path(tempfile.gettempdir()).glob("job-*"):
            shutil.rmtree(old, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix="job-"))
    cache_before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ[JOB_SCRATCH] = str(path)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path / INDUCTOR_CACHE)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(JOB_SCRATCH, None)
        if cache_before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_before


def prepare_environment(code_dir: str, owned_dir: str, short_dir: str | None = None) -> dict[str, str]:
    """Set the environment every job inherits (called by the Snakefile at parse time).

    Points each variable of :data:`OWNED_DIRS` at a subdirectory of ``owned_dir`` (created),
    sets ``MPLBACKEND=Agg`` (headless) and puts ``code_dir`` first on ``PYTHONPATH`` so that
    ``python -m lab.point <name>`` works from any working directory.

    Args:
        short_dir: a directory the pipeline owns whose path has no whitespace (e.g.
            :func:`measurement_tmpdir`): the variables of :data:`NO_SPACES` go to a
            subdirectory of it when their place under ``owned_dir`` has whitespace in its path.

    Returns:
        The variables that were set, with their values.
    """
    root = Path(owned_dir).resolve()
    env = {}
    for var, sub in OWNED_DIRS.items():
        path = root / sub
        path.mkdir(parents=True, exist_ok=True)
        if short_dir is not None and var in NO_SPACES and re.search(r"\s", str(path)):
            path = Path(short_dir) / sub
            path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
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


def host_label(name: str | None) -> str:
    """The label of ``results/<host>/``: ``name`` sanitised (:func:`sanitise_host`), or this
    machine's (:func:`default_host`) when ``name`` is empty or None. Every command line and the
    workflow take their label from here.

    Raises:
        ValueError: if nothing usable is left of ``name``.
    """
    return sanitise_host(name) if name else default_host()


def node_kind(facts: Mapping) -> tuple:
    """``(cpu_model, logical_cpus)`` of a host.json or a job.json's ``node``: two machines of one
    kind have the same (``(None, None)``: not recorded). The analysis sets aside a point measured
    on a node of another kind (:func:`analysis.load.mark_other_nodes`), and a run refuses to
    measure under a label whose host.json is of another kind than this machine
    (:func:`lab.hostinfo.other_machine`)."""
    return facts.get("cpu_model"), facts.get("logical_cpus")


def cpu_count_problem(value) -> str | None:
    """Why host.json's ``available_cpus`` ``value`` is no count of CPUs (an integer >= 1), as a
    clause, or None where it is one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"'available_cpus' is {value!r}: a count of CPUs (integer >= 1) was expected"
    return None


class Host(Mapping):
    """One machine of the lab: its label and its facts, built once and passed down.

    It reads as the mapping of its facts: host.json (:mod:`lab.hostinfo`: ``available_cpus``,
    ``cpu_model``, ``cpu_flags`` ...) and, where they were measured, ``user_environment`` (the
    user's thread variables, :mod:`lab.userenv`) and ``interpreters`` (:mod:`lab.interpreters`).

    Attributes:
        label: the host label (the directory ``results/<label>/``), sanitised.
    """

    def __init__(self, label: str, facts: Mapping | None = None) -> None:
        self.label = host_label(label)
        self._facts = dict(facts or {})

    @classmethod
    def load(cls, host_dir: str | Path, need_host_json: bool = False) -> Host:
        """The host of ``results/<label>/``: its host.json, user_env.json and interpreters.json
        (a missing file is left out, host.json too unless ``need_host_json``).

        Raises:
            FileNotFoundError: for a missing host.json where ``need_host_json``.
            ValueError: naming the file, for one that is not JSON or holds no JSON object.
        """
        host_dir = Path(host_dir)
        host_json, *others = [host_dir / n for n in ("host.json", "user_env.json", "interpreters.json")]
        host_json = host_json if need_host_json or host_json.exists() else None
        return cls.from_files(host_dir.name, host_json, *(p if p.exists() else None for p in others))

    @classmethod
    def from_files(
        cls,
        label: str,
        host_json: str | Path | None = None,
        user_env: str | Path | None = None,
        interpreters: str | Path | None = None,
    ) -> Host:
        """A host from exactly the files given (None: that file's facts are absent), labelled
        by host.json's ``host`` or else ``label``.

        Raises:
            FileNotFoundError: for a file given that does not exist.
            ValueError: naming the file, for one that is not JSON or holds no JSON object, and
                for a host.json without ``available_cpus`` or whose ``available_cpus`` is not a
                count (an integer >= 1).
        """
        facts = read_json_object(Path(host_json)) if host_json else {}
        if host_json and "available_cpus" not in facts:  # a tester's {} passed the analysis, then broke a chart
            raise ValueError(
                f"{host_json}: no 'available_cpus' field: not a host fingerprint written by lab.hostinfo"
                " (delete it and rerun: the pipeline writes it again, and measures nothing again)"
            )
        if "available_cpus" in facts and (problem := cpu_count_problem(facts["available_cpus"])):
            raise ValueError(f"{host_json}: {problem}")
        if user_env:
            facts["user_environment"] = read_json_object(Path(user_env))
        if interpreters:
            facts["interpreters"] = read_json_object(Path(interpreters))["interpreters"]
        return cls(facts.get("host") or label, facts)

    def __getitem__(self, key: str):
        return self._facts[key]

    def __iter__(self):
        return iter(self._facts)

    def __len__(self) -> int:
        return len(self._facts)

    def __repr__(self) -> str:
        return f"Host({self.label!r}, {len(self._facts)} facts)"

    def with_facts(self, **more) -> Host:
        """The same host with facts added or replaced."""
        return Host(self.label, {**self._facts, **more})


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies.

    Called first thing in worker processes, so that killing a job (timeout, Ctrl-C, SIGTERM
    from Snakemake) never leaves its workers running as orphans. A no-op where prctl is absent.
    """
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)
