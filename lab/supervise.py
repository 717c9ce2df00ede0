"""Run one measurement job under supervision: a timeout, crash records, clean interrupts.

Usage (the ``measure`` rule)::

    python -m lab.supervise --timeout-s 900 --log LOG --out DIR --host H --experiment E \\
        -- python -m lab.point E ARGS...

The experiment runs as a child process in its own session (process group), with
``PR_SET_PDEATHSIG`` so that it dies if the supervisor is killed; its worker processes
(DataLoader workers, multiprocessing children) ask for the same (:func:`lab.host.die_with_parent`).
Where the command is the rule's ``python -m lab.server run -- ...`` and the job server answers,
the supervisor is the server's client itself (:func:`start_job`): the job, forked by the server
in a session of its own, is what it waits on and stops, and the server kills it if the
supervisor dies.

* Child exits 0: its files are in ``DIR`` (written atomically, ``metrics.csv`` last); exit 0.
* Child exits non-zero (a genuine crash: an exception, a worker that died, a thread-count
  mismatch): ``DIR/metrics.csv`` gets one row with ``status`` = ``failed`` and ``reason`` = the
  exit status, the last error line of the log and the log's path; exit 0, so the rest of the
  pipeline runs and the report lists the point. The workflow's final ``point_status`` job then
  fails, naming every failed point and its log.
* ``--timeout-s`` expires: the child's whole process tree is killed (SIGTERM, then SIGKILL
  after :data:`GRACE_S`), and the point is recorded with ``status`` = ``timeout``; exit 0.
* The supervisor gets SIGINT or SIGTERM (Ctrl-C, Snakemake cancelling the job): it forwards
  SIGTERM to the child's tree, kills what is left after :data:`GRACE_S`, writes nothing and
  exits 128 + signal number; Snakemake removes the job's incomplete outputs and the next run
  measures the point again.

The failure files follow docs/csv-schema.md: ``metrics.csv`` with ``host``, ``experiment``, the
point's swept keys (from the ``<key>~<value>`` directories of ``DIR``), ``repeat`` 0, ``role``
``point``, ``status``, ``reason``; header-only ``samples.csv`` and ``spans.csv``; a ``job.json``
with the job's times and ``status``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lab import JOB_START_UNIX
from lab.prctl import set_parent_death_signal

# psutil (for a timeout's process tree) and the file writers (for a failure's files) are imported
# where they are used: every job starts through this module, and they took 60 ms of its 80 ms
# import, time between two measurement jobs (docs/benchmarks.md).

#: Seconds between SIGTERM and SIGKILL when a process tree is stopped.
GRACE_S = 3.0


def exit_quietly_on_interrupt(main, name: str) -> None:
    """Run ``main()`` (returning an exit status) as a rule's ``__main__`` and exit with it. Ctrl-C
    in Snakemake reaches every job of the process group: a job that writes nothing then prints
    one line, ``[<name>] interrupted by SIGINT: nothing recorded``, not a traceback, and exits
    130 (128 + SIGINT), so Snakemake removes its incomplete outputs.

    Raises:
        SystemExit: always, with ``main()``'s status or 130.
    """
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print(f"[{name}] interrupted by SIGINT: nothing recorded", file=sys.stderr)
        raise SystemExit(130) from None


def _pdeathsig() -> None:  # runs in the child between fork and exec
    set_parent_death_signal(signal.SIGKILL)


def kill_tree(proc, grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM the job's process group (``proc``: :func:`start_job`'s; None: not started) and every
    descendant, SIGKILL survivors after ``grace_s``; return the pids that had to be killed.

    Descendants are collected first (psutil), so processes that left the group are found too.
    """
    import psutil

    if proc is None:  # not started (a job server that did not answer in time): nothing to stop
        return []
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    for p in family:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    psutil.wait_procs(alive, timeout=grace_s)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    return [p.pid for p in alive]


def point_from_dir(out: Path) -> dict:
    """``{key: value}`` from the ``<key>~<value>`` components of a point directory."""
    return dict(part.split("~", 1) for part in out.parts if "~" in part)


def last_error_line(log: Path | None) -> str:
    """The last line of the log that looks like an error (``...Error: ...``, ``error: ...``)."""
    if log is None or not log.exists():
        return ""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error:" in ln or "Exception" in ln or "Killed" in ln:
            return ln[:300]
    return lines[-1][:300] if lines else ""


def record_failure(out: Path, host: str, experiment: str, status: str, reason: str) -> None:
    """Write the failure files of a point (see the module docstring); ``metrics.csv`` last."""
    from lab.fileio import write_csv, write_json
    from lab.results import SAMPLE_COLUMNS, SPAN_COLUMNS

    out.mkdir(parents=True, exist_ok=True)
    point = point_from_dir(out)
    write_csv(out / "samples.csv", [], SAMPLE_COLUMNS)
    write_csv(out / "spans.csv", [], SPAN_COLUMNS)
    write_json(
        out / "job.json",
        {
            "experiment": experiment,
            "host": host,
            "params": point,
            "pid": os.getpid(),
            "job_start_unix": JOB_START_UNIX,
            "job_end_unix": time.time(),
            "status": status,
            "reason": reason,
        },
        sort_keys=True,
    )
    row = {"host": host, "experiment": experiment, **point, "repeat": 0, "role": "point", "status": status}
    write_csv(out / "metrics.csv", [{**row, "reason": reason}])


class _Timeout(Exception):
    pass


class _Interrupt(Exception):
    pass


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # real-time signals have no name
        return f"signal {signum}"


def _clear_outputs(out: Path) -> None:
    """Remove the child's files, finished or half-written (hidden ``.<name>.tmp*`` files)."""
    for name in ("metrics.csv", "samples.csv", "spans.csv", "job.json"):
        (out / name).unlink(missing_ok=True)
        for tmp in out.glob(f".{name}.tmp*"):
            tmp.unlink(missing_ok=True)


def _timed_out(proc, out: Path, host: str, experiment: str, timeout_s: float, log: Path | None) -> int:
    """Kill the tree of a job past its timeout and record the point as ``timeout``."""
    killed = kill_tree(proc)
    reason = f"exceeded the job timeout of {timeout_s:g} s (config job_timeout_s); process tree killed"
    if killed:
        reason += f" ({len(killed)} process{'es' if len(killed) > 1 else ''} needed SIGKILL)"
    if log is not None:
        reason += f"; log: {log}"
    _clear_outputs(out)
    record_failure(out, host, experiment, "timeout", reason)
    print(f"[supervise] timeout: {reason}", file=sys.stderr)
    return 0


def _exited(rc: int, out: Path, host: str, experiment: str, log: Path | None) -> int:
    """Record what a finished child left: its own files (exit 0) or a failure record."""
    if rc == 0:
        if not (out / "metrics.csv").exists():
            record_failure(out, host, experiment, "failed", "the experiment exited 0 without writing metrics.csv")
        return 0
    what = f"killed by {_signal_name(-rc)}" if rc < 0 else f"exit status {rc}"
    err = last_error_line(log)
    reason = f"crashed ({what})" + (f": {err}" if err else "") + (f"; log: {log}" if log else "")
    _clear_outputs(out)
    record_failure(out, host, experiment, "failed", reason)
    print(f"[supervise] failed: {reason}", file=sys.stderr)
    return 0


#: The rule's command for a job of the job server: ``python -m lab.server run -- MODULE ARGS...``.
SERVED = ["-m", "lab.server", "run", "--"]


def start_job(cmd: list[str]):
    """Start ``cmd``. Where it is the rule's ``python -m lab.server run -- MODULE ARGS`` and the job
    server (``$LAB_JOB_SERVER``) forks the job, this process is the job's client itself
    (:func:`lab.jobclient.start`): the job's own process group is what a timeout or an interrupt
    stops, and no client interpreter starts between two jobs (about 50 ms each on the EPYC VM,
    docs/benchmarks.md). Otherwise (no server answers, the job needs a variant server or a fresh
    process, any other command) ``cmd`` runs as a child process in a session of its own. Returns
    a ``subprocess.Popen`` or a :class:`lab.jobclient.ServedJob` (``pid``, ``wait``)."""
    if cmd[1 : 1 + len(SERVED)] == SERVED and len(cmd) > 1 + len(SERVED):
        from lab import jobclient

        job = jobclient.start(os.environ.get(jobclient.SOCKET_VARIABLE), cmd[1 + len(SERVED)], cmd[2 + len(SERVED) :])
        if job is not None:
            return job
    return subprocess.Popen(cmd, start_new_session=True, preexec_fn=_pdeathsig)  # noqa: PLW1509


def supervise(cmd: list[str], out: Path, host: str, experiment: str, timeout_s: float, log: Path | None) -> int:
    """Run ``cmd``; see the module docstring for what each outcome writes and returns.

    The wait blocks in ``waitpid``, or for a served job in a read of the server's status line
    (no polling while the experiment is measured); the timeout is a ``SIGALRM`` timer. After the
    first SIGINT/SIGTERM further ones are only noted, so the clean-up (SIGTERM, grace period,
    SIGKILL) always runs to the end.
    """
    received: list[int] = []

    def on_stop(signum, _frame):
        received.append(signum)
        if len(received) == 1:
            raise _Interrupt

    def on_alarm(_signum, _frame):
        raise _Timeout

    previous = {s: signal.signal(s, on_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, on_alarm)
    proc = None
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)  # the job's start counts (a server that never answers)
        proc = start_job(cmd)
        rc = proc.wait()
        signal.setitimer(signal.ITIMER_REAL, 0)
    except _Timeout:
        return _timed_out(proc, out, host, experiment, timeout_s, log)
    except _Interrupt:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if proc is not None:
            kill_tree(proc)
        print(f"[supervise] interrupted by {_signal_name(received[0])}: job stopped, nothing recorded", file=sys.stderr)
        return 128 + received[0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    try:  # whatever is left in the child's process group goes with it
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return _exited(rc, out, host, experiment, log)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; everything after ``--`` is the experiment's command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(
        prog="python -m lab.supervise",
        usage="%(prog)s --timeout-s S --out DIR --host H --experiment E [--log LOG] -- COMMAND...",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--timeout-s", type=float, required=True, help="job timeout in s")
    p.add_argument("--out", required=True, help="the point's output directory")
    p.add_argument("--host", required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--log", default=None, help="the job's log file, named in failure reasons")
    args = p.parse_args(argv[:split])
    cmd = argv[split + 1 :]
    if not cmd:
        p.error("no command after --: the experiment's command line follows a lone --")
    if not args.timeout_s > 0:
        p.error(f"--timeout-s must be > 0, got {args.timeout_s}")
    log = Path(args.log) if args.log else None
    return supervise(cmd, Path(args.out), args.host, args.experiment, args.timeout_s, log)


if __name__ == "__main__":
    raise SystemExit(main())
