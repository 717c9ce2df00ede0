"""Start and stop a run's job servers (:mod:`lab.server`): the main one, and a variant for each
setting of what torch's OpenMP runtime reads when it loads that the run's jobs ask for.

The workflow calls :func:`start` in Snakemake's ``onstart`` handler and :func:`stop` in
``onsuccess`` and ``onerror``. A job whose load-time settings
(:data:`lab.threads.LOAD_TIME_VARIABLES`) differ from the main server's cannot be forked from it
(it would run with the server's); its client finds the variant server started with its settings
at :func:`variant_socket`, computed from the job's own environment.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from lab.threads import load_time_key, with_env

#: Seconds :func:`start` waits for the servers' sockets (each appears once its imports are done).
READY_TIMEOUT_S = 120.0


def variant_socket(path: str, env: Mapping[str, str]) -> str:
    """The socket of the server started with ``env``'s load-time settings beside the server at
    ``path``: ``path.<digest>`` (:func:`lab.threads.load_time_key`), found from a job's own env."""
    return f"{path}.{load_time_key(env)}"


def start(
    path: str, env: dict[str, str], log: str, variants: Iterable[Mapping] = (), analysis_only: bool = False
) -> list[subprocess.Popen]:
    """Start a server on ``path`` with environment ``env`` (a measurement job's: what torch reads at
    import is what a job would read), its output to ``log`` (``analysis_only``: one that imports
    what analysis and report jobs need and no torch, ``lab.server serve --analysis-only``, for a
    run of no other jobs), and a variant server for each
    ``variants`` entry (``{name: value}``, ``None``: unset; the run's jobs' ``job_env``) whose
    load-time settings differ from ``env``'s, on :func:`variant_socket`, logging to ``log.<digest>``
    (a variant imports only what measurement jobs need: ``lab.server serve --measure-only``).
    They import at once; returns the running ones, the main one first, once all listen. A variant
    that does not start is left out, said on stderr: its jobs start afresh, as without it.

    Raises:
        RuntimeError: if the main server exits or does not listen within :data:`READY_TIMEOUT_S`.
    """
    from lab.fileio import log_stream

    envs = {path: (env, log)}
    for venv in (with_env(env, wanted) for wanted in variants):
        if load_time_key(venv) != load_time_key(env):
            envs.setdefault(variant_socket(path, venv), (venv, f"{log}.{load_time_key(venv)}"))
    started = {}
    try:
        for where, (e, lg) in envs.items():
            Path(where).unlink(missing_ok=True)
            with log_stream(lg) as out:
                cmd = [sys.executable, "-m", "lab.server", "serve", "--socket", where]
                if where != path:  # a variant serves measurement jobs only
                    cmd.append("--measure-only")
                elif analysis_only:
                    cmd.append("--analysis-only")
                started[where] = subprocess.Popen(
                    cmd, env=e, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
                )
        deadline = time.monotonic() + READY_TIMEOUT_S
        for where, proc in list(started.items()):
            while not Path(where).exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if not Path(where).exists() and where == path:
                raise RuntimeError(f"the job server did not start (exit code {proc.poll()}); log: {log}")
            if not Path(where).exists():  # its jobs start afresh, as without it
                print(f"[server] a variant job server did not start; log: {envs[where][1]}", file=sys.stderr)
                stop([started.pop(where)])
    except BaseException:
        stop(started.values())
        raise
    return list(started.values())


def stop(procs: Iterable[subprocess.Popen]) -> None:
    """Stop the servers :func:`start` started (SIGTERM, then SIGKILL after 5 s)."""
    procs = [p for p in procs if p.poll() is None]
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
