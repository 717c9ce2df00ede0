"""A job server: measurement jobs forked from one process that has already imported torch.

Why: a measurement job is a fresh ``python -m lab.point <name>`` process, and importing torch
takes about 2.5 s of every such job (5 s on a loaded 2-vCPU VM), longer than many jobs measure.
The server imports torch, numpy, psutil and every experiment's measurement module once per run,
then forks one child per job, so each job starts as a fresh process with those modules already
loaded (as CPython's own ``multiprocessing`` forkserver does for its workers). Nothing else is
carried over: the server runs no torch operation (OpenMP starts no thread pool before a fork,
which under GNU libgomp could deadlock the child), and it freezes its objects out of the garbage
collector (``gc.freeze``) so that children do not copy its pages on their first collection.

Protocol (``AF_UNIX`` stream socket, one connection per job):

* the client (:func:`lab.jobclient.start`: a measurement job's supervisor, :mod:`lab.supervise`;
  or :func:`launch`, ``python -m lab.server run``) sends one JSON line ``{"module",
  "args", "cwd", "env"}`` with its standard input, output and error as file descriptors
  (``SCM_RIGHTS``, :func:`socket.send_fds`);
* the server forks; the child starts its own session (so the job and its workers are one
  process group), asks to die with the server (``PR_SET_PDEATHSIG``), takes the descriptors,
  the working directory and the environment (``tempfile`` forgets the server's temporary
  directory), and runs the module as ``__main__`` (``runpy``); the server answers
  ``{"pid": N}`` and, when the child ends, ``{"status": S}`` (its exit status, or ``-signal``);
* the client passes SIGINT and SIGTERM on to the job's process group and exits with the job's
  status (``128 + signal`` for a job killed by a signal, as a shell reports it); a client that
  vanishes (SIGKILL, or an interrupt before the pid came) closes its connection, and the server
  then kills the job and its group.

A job whose environment sets what a library reads only when it loads otherwise than the server's
did (:data:`lab.threads.LOAD_TIME_VARIABLES`, e.g. ``OMP_WAIT_POLICY``) would run with the server's
values if forked: the server answers ``{"fresh": [names]}``, and the client asks the variant server
started with those settings (:func:`lab.serverctl.variant_socket`; :func:`lab.serverctl.start`
starts one per setting the run's jobs ask for). Where no server answers (a job run by hand, a
cluster node, ``--no-hooks``), the client runs the module itself (``os.execv``); where only the
variant is missing, through :func:`fresh`, which imports torch first.

The workflow starts the server in Snakemake's ``onstart`` handler and stops it in ``onsuccess``
and ``onerror`` (:mod:`lab.serverctl`); it dies with Snakemake otherwise (its parent-death
signal, and a check of its parent every second), and with Ctrl-C, which reaches Snakemake's
whole process group.

Usage::

    python -m lab.server serve --socket PATH [--measure-only | --analysis-only]
    python -m lab.server run --socket PATH -- experiments.gil --workers 2 ...
    python -m lab.server fresh -- lab.point multiprocessing ...   (what ``run`` falls back to)
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import time
import warnings
from pathlib import Path

from lab import jobclient
from lab.jobclient import SOCKET_VARIABLE, ServedJob, ask, connect
from lab.preload import ANALYSIS_PRELOAD, FRESH_PRELOAD, PRELOAD, fresh, preload_one, warm
from lab.serverctl import variant_socket
from lab.threads import LOAD_TIME_VARIABLES


def _send(conn: socket.socket, obj: dict) -> None:
    conn.sendall((json.dumps(obj) + "\n").encode())


def _child(request: dict, fds: list[int]) -> None:
    """In the forked job: become the job described by ``request`` and run it; never returns."""
    code = 1
    try:
        os.setsid()
        from lab.host import set_parent_death_signal

        set_parent_death_signal(signal.SIGKILL)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the server's sockets and pipes are not the job's
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        import lab

        tempfile.tempdir = None  # read TMPDIR again: the job's, not the server's
        lab.JOB_START_UNIX = time.time()
        sys.argv = [request["module"], *request["args"]]
        # as `python -m` would set it up: the working directory first, then the job's PYTHONPATH
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:1] = [request["cwd"], *(p for p in extra if p not in sys.path)]
        gc.unfreeze()
        # a preloaded package's __main__ runs afresh, as `python -m pkg` finds it: not yet imported
        # (else runpy warns that it was, in every job's log)
        sys.modules.pop(f"{request['module']}.__main__", None)
        try:
            with warnings.catch_warnings():
                # a preloaded module (lab.hostinfo) runs afresh as __main__ all the same: runpy's
                # warning that it was imported would stand in every such job's log
                warnings.filterwarnings("ignore", r".*found in sys\.modules after import of package", RuntimeWarning)
                runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - the job's own traceback, as Python would print it
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _status(waitstatus: int) -> int:
    """A child's exit status, or minus the signal that killed it (as ``subprocess`` reports)."""
    return -os.WTERMSIG(waitstatus) if os.WIFSIGNALED(waitstatus) else os.WEXITSTATUS(waitstatus)


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_job(pid: int) -> None:
    """SIGKILL a job whose client is gone: its process group, and the job itself, which may not
    have made its own group yet (``setsid`` is its first step)."""
    _kill_group(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _hung_up(sock: socket.socket) -> bool:
    """Whether a job's client has closed its connection (or it broke)."""
    try:
        return not sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return True


def _preload(measure_only: bool, analysis_only: bool) -> str:
    """Import what :func:`serve`'s jobs need; returns for which jobs, in words.

    Raises:
        ValueError: for both ``measure_only`` and ``analysis_only``.
    """
    from lab import registry

    if measure_only and analysis_only:
        raise ValueError("a server is measure-only or analysis-only, not both")
    for name in FRESH_PRELOAD if measure_only else ANALYSIS_PRELOAD if analysis_only else PRELOAD:
        preload_one(lambda name=name: importlib.import_module(name), name)
    for exp in registry.experiments().values():
        if not analysis_only:
            preload_one(exp.measurement, f"{exp.package}.measure")
        if not measure_only:
            preload_one(exp.analysis, f"{exp.package}.analysis")
    if analysis_only:
        return "analysis and report jobs only, no torch"
    preload_one(warm, "torch.optim")
    return "measurement jobs only" if measure_only else "every job"


def serve(path: str, measure_only: bool = False, analysis_only: bool = False) -> int:
    """Import :data:`PRELOAD` and every experiment's modules, then listen on ``path`` and fork one child per
    connection until SIGTERM, SIGINT or the death of the parent (see the module docstring).
    ``measure_only`` (a variant server, whose jobs are all measurement jobs): import only what
    they need, :data:`~lab.preload.FRESH_PRELOAD` and the experiments' measurement modules, not
    pandas, scipy, matplotlib and the analysis (its start-up, at the run's start, shares the CPUs
    with the main server's). ``analysis_only`` (a run whose jobs all analyse and report, such as
    ``snakemake compare``, and a cluster run, whose jobs here are its local rules): only
    :data:`~lab.preload.ANALYSIS_PRELOAD` and the experiments' analysis modules, not torch
    (2.5-3 s of the run's start on 2 CPUs, which every job waits for).

    Raises:
        ValueError: for both ``measure_only`` and ``analysis_only``.
    """
    from lab.host import set_parent_death_signal

    parent = os.getppid()
    set_parent_death_signal(signal.SIGTERM)
    served = _preload(measure_only, analysis_only)
    gc.collect()
    gc.freeze()
    Path(path).unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # the socket appears only once the server is ready (imports done)
    listener.listen(8)
    print(f"[server] ready at {path}: preloaded for {served}", file=sys.stderr, flush=True)
    jobs: dict[int, socket.socket] = {}  # pid -> its client's connection

    def stop(_signum, _frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    wake_r, wake_w = os.pipe()  # a job's end wakes the loop at once (SIGCHLD), not at the next second
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    try:
        while os.getppid() == parent:
            ready, _, _ = select.select([listener, wake_r, *jobs.values()], [], [], 1.0)
            for sock in ready:
                if sock is wake_r:
                    os.read(wake_r, 512)
                elif sock is listener:
                    _accept(listener, jobs)
                elif _hung_up(sock):  # its client is gone before its job ended
                    _kill_job(next(p for p, c in jobs.items() if c is sock))
            _reap(jobs)
    finally:
        for pid in jobs:
            _kill_group(pid)
        Path(path).unlink(missing_ok=True)
    return 0


def _accept(listener: socket.socket, jobs: dict[int, socket.socket]) -> None:
    conn, _ = listener.accept()
    try:
        msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        while not msg.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                raise ValueError("the client hung up before its request ended")
            msg += more
        request = json.loads(msg)
    except (OSError, ValueError) as exc:
        print(f"[server] bad request: {exc}", file=sys.stderr)
        conn.close()
        return
    differ = [v for v in LOAD_TIME_VARIABLES if request.get("env", {}).get(v) != os.environ.get(v)]
    if differ:  # the job needs what its libraries read at load: not this process's
        for fd in fds:
            os.close(fd)
        try:
            _send(conn, {"fresh": differ})
        except OSError:
            pass
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        conn.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    jobs[pid] = conn
    try:
        _send(conn, {"pid": pid})
    except OSError:  # the client hung up while the job started (an interrupted supervisor)
        _kill_job(pid)


def _reap(jobs: dict[int, socket.socket]) -> None:
    """Answer each client whose job has ended with its status."""
    while jobs:
        try:
            pid, waitstatus = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = jobs.pop(pid, None)
        if conn is not None:
            try:
                _send(conn, {"status": _status(waitstatus)})
            except OSError:
                pass
            conn.close()


def launch(path: str | None, module: str, args: list[str]) -> int:
    """Run ``python -m module args`` as a job of the server at ``path``. A job whose environment
    differs from that server's in :data:`lab.threads.LOAD_TIME_VARIABLES` goes to the variant
    server started with its settings (:func:`variant_socket`), where there is one. Where no
    server answers, or none has the job's settings, the job runs in this process (``os.execv``,
    which does not return; through :func:`lab.preload.fresh` for the latter). Returns the job's
    exit status."""
    conn = connect(path)
    if conn is None:
        os.execv(sys.executable, [sys.executable, "-m", module, *args])
    # The relay is in place before the job can start: a signal that arrives before the server
    # has named the job's pid (the job may already be running and printing) is relayed once it has.
    job: dict[str, int] = {}
    received: list[int] = []

    def relay(signum, _frame):
        received.append(signum)
        if "pid" in job:
            _kill_group(job["pid"], signal.SIGTERM)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, relay)
    request = jobclient.request(module, args)
    replies, reply = ask(conn, request)
    if reply is not None and "fresh" in reply:
        replies.close()
        conn.close()
        path = variant_socket(path, os.environ)
        conn = None if received else connect(path)
        if conn is not None:
            replies, reply = ask(conn, request)
    if conn is None or (reply is not None and "fresh" in reply):
        if received:  # interrupted before the job began: it does not begin
            return 128 + received[0]
        os.execv(sys.executable, [sys.executable, "-m", "lab.server", "fresh", "--", module, *args])
    if reply is None or "pid" not in reply:
        print(f"[server] the job server at {path} did not start the job", file=sys.stderr)
        return 1
    served = ServedJob(conn, replies, reply["pid"])
    job["pid"] = served.pid
    if received:
        _kill_group(served.pid, signal.SIGTERM)
    status = served.wait()
    return 128 - status if status < 0 else status


def export(path: str) -> None:
    """Name the server's socket in this process's environment (:data:`SOCKET_VARIABLE`), which
    every job's command line inherits; "" where no server runs (a cluster)."""
    os.environ[SOCKET_VARIABLE] = path


def main(argv: list[str] | None = None) -> int:
    """``serve`` or ``run`` (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tail: list[str] = []
    if "--" in argv:
        argv, tail = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    p = argparse.ArgumentParser(prog="python -m lab.server", description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["serve", "run", "fresh"])
    p.add_argument(
        "--socket",
        default=os.environ.get(SOCKET_VARIABLE, ""),
        help=f"the server's socket path (default: ${SOCKET_VARIABLE}; '': no server, run in this process)",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument(
        "--measure-only",
        action="store_true",
        help="serve: import only what measurement jobs need (a variant server's jobs)",
    )
    only.add_argument(
        "--analysis-only",
        action="store_true",
        help="serve: import only what analysis and report jobs need, no torch (a run of only those,"
        " or a cluster run's local rules)",
    )
    args = p.parse_args(argv)
    if args.command == "serve":
        if not args.socket:
            p.error("serve needs --socket PATH")
        return serve(args.socket, args.measure_only, args.analysis_only)
    if not tail:
        p.error(f"{args.command} needs -- MODULE ARGS...")
    if args.command == "fresh":
        return fresh(tail[0], tail[1:])
    return launch(args.socket or None, tail[0], tail[1:])


if __name__ == "__main__":
    raise SystemExit(main())
