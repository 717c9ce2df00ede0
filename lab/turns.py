"""A worker process's turn: a job's worker processes set up together, then measure one at a time.

Why: a job splits its rounds over worker processes (:mod:`lab.workers`), and each of them sets
its point up on its own: the fork, the CPU sampler, the experiment's runners and their warm-up
(the capacity probe's processes are the job's, shared by its workers: :func:`lab.probe.share`),
0.17-0.22 s a worker in the quick run (2026-12-04, AMX Xeon VM), outside every measured window.
Made one after the other, the second worker's set-up was 5% of the run's measurement phase.
Made together, before anyone measures, they overlap on the machine's CPUs, and no set-up runs
while another worker measures.

How: :func:`lab.workers.run_workers` forks every worker at once and hands each its end of a
pipe (:func:`enter`). A worker's :func:`lab.results.interleave` sets up and warms up, then calls
:func:`await_turn` just before its first round: it says ``ready`` and sleeps on the pipe (no CPU)
until the parent sends the policy its rounds follow (a :class:`~lab.rounds.Rounds`, which may
pool the rounds of the workers before it), or ``stop``. The parent lets the first worker measure
only when every worker is ready. A worker that has measured its rounds sends them at once
(:func:`finished`) and tears its set-up down only when the parent ends the job. Outside such
a worker (one worker, a job run by hand, a test), :func:`await_turn` returns the policy it was
given.
"""

from __future__ import annotations

import typing

from lab.rounds import Rounds

if typing.TYPE_CHECKING:  # only named in annotations: a job that never forks workers skips the import
    from multiprocessing.connection import Connection

#: This process's end of its parent's pipe while it is a worker waiting for its turn; None elsewhere.
_conn: Connection | None = None

#: This process's number among its job's workers (0-based); None outside a worker.
_index: int | None = None

#: The pipe once this worker's turn came (:func:`await_turn`), until it reports (:func:`finished`).
_turn: Connection | None = None

#: Whether this worker sent its result before its tear-down (:func:`finished`).
_reported = False


class TurnStopped(SystemExit):
    """The parent ended the job before this worker's turn (another worker failed or skipped)."""


def enter(conn: Connection, index: int) -> None:
    """Make this process worker ``index`` (0-based), whose first round waits for the parent
    (called in the fork)."""
    global _conn, _index
    _conn, _index = conn, index


def worker() -> int | None:
    """This process's number among its job's workers (0-based; the ``worker`` column of its
    rows); None outside a worker process."""
    return _index


def await_turn(rounds: Rounds) -> Rounds:
    """Wait, set up, for this worker's turn; return the policy to measure with.

    Args:
        rounds: the policy the worker was forked with (returned as it is outside a worker).

    Returns:
        The policy the parent sent (:meth:`lab.rounds.Rounds.for_worker` with the earlier
        workers' rounds), or ``rounds`` where this process is no waiting worker; a second call
        in the same worker returns ``rounds`` too.

    Raises:
        TurnStopped: where the parent sends ``stop`` or closes the pipe.
    """
    global _conn, _turn
    if _conn is None:
        return rounds
    conn, _conn = _conn, None
    conn.send(("ready", None))
    try:
        kind, policy = conn.recv()
    except EOFError:
        kind, policy = "stop", None
    if kind != "go":
        raise TurnStopped(0)
    _turn = conn
    return policy


def finished(result) -> None:
    """In a worker whose turn came: send the parent ``("ok", result)`` now, its rounds measured,
    and sleep on the pipe (no CPU) until the parent says ``stop`` once no worker measures any
    more; the caller's tear-down (its runners' interpreters and processes, the sampler) then
    runs beside the other workers' tear-downs, not between two workers' rounds (36 ms a job on
    the EPYC VM, docs/benchmarks.md). Does nothing elsewhere (one worker, a job run by hand, a
    test). :func:`reported` says whether it sent."""
    global _turn, _reported
    if _turn is None:
        return
    conn, _turn = _turn, None
    conn.send(("ok", result))
    _reported = True
    try:
        conn.recv()
    except (EOFError, OSError):
        pass


def reported() -> bool:
    """Whether this worker has sent its result (:func:`finished`): :mod:`lab.workers` sends no other."""
    return _reported
