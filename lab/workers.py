"""A job's rounds split over worker processes that measure one after the other, as pyperf does.

Measured here (``benchmarks/between_processes.py``, docs/benchmarks.md "Honest intervals"): the
median speedup of a point can differ between processes that measure it back to back by more
than the rounds inside one process let on. Over four processes of 6 rounds each, the standard
deviation of the per-process median log ratio was up to 1.6x the standard error one process's
rounds gave (sleeping processes; DataLoader workers over none: 1.35x) in one measurement, and
0.6x to 1.3x in a second one: present at times, not always. What differs between processes
(where the threads land, memory layout, the state the host was in when the process started)
is fixed for a process's life, so rounds cannot see it; when it is there, an interval from one
process is too narrow for a rerun. pyperf answers this by running
every benchmark in several worker processes (``--processes``, default 20); the lab runs a
point's rounds in :attr:`lab.rounds.Rounds.workers` processes (config
``rounds.workers``) and the analysis widens the interval by the spread between them
(:func:`analysis.stats.worker_scale`).

Each worker is a ``fork`` of the job's process made before the experiment's ``run`` sets
anything up, so every worker builds its model and warms up on its own. The workers are forked
together and set up at the same time; then they measure one after the other, each alone on the
machine (:mod:`lab.turns`), so a job of ``W`` workers holds ``W`` set-ups in memory at once. Rows
carry ``worker`` (0-based); ``repeat`` keeps counting across workers, so (point, repeat) stays
unique and rounds stay in time order.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator

from lab import probe as probe_mod
from lab import turns
from lab.host import available_cpus, set_parent_death_signal
from lab.results import RunResult
from lab.rounds import Rounds

#: Seconds a stopped worker gets to end on its own, and again after SIGTERM, before SIGKILL.
END_GRACE_S = 2.0
#: Seconds a worker that has sent its rounds gets for its tear-down (:func:`lab.turns.finished`)
#: before SIGTERM: 0.04-0.2 s here (a child interpreter, DataLoader workers, the CPU sampler).
TEARDOWN_S = 60.0


class WorkerError(RuntimeError):
    """A worker process failed; the message is the last line of its traceback."""


def _child(conn, fn: Callable[[], RunResult], index: int) -> None:
    set_parent_death_signal(signal.SIGTERM)
    turns.enter(conn, index)
    try:
        msg = ("ok", fn())
    except turns.TurnStopped:
        msg = ("stopped", None)
    except BaseException:  # noqa: BLE001 - the parent reports whatever ended the worker
        msg = ("error", traceback.format_exc())
    if turns.reported():  # its result went before its tear-down; the parent reads no more
        if msg[0] == "error":
            print(msg[1], file=sys.stderr, end="")
        conn.close()
        return
    try:
        conn.send(msg)
    except OSError:  # the parent is gone or stopped listening: nothing left to tell
        pass
    finally:
        conn.close()


class _Worker:
    """One forked worker process (number ``index``) and the parent's end of its pipe (see
    :mod:`lab.turns`)."""

    def __init__(self, index: int, fn: Callable[[], RunResult]) -> None:
        ctx = multiprocessing.get_context("fork")
        self.index = index
        self.conn, theirs = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_child, args=(theirs, fn, index))
        self.proc.start()
        theirs.close()
        self.measured = False  # its rounds arrived: it may be tearing its set-up down

    def recv(self) -> tuple[str, object]:
        """The worker's next message: ``("ready", None)``, ``("ok", RunResult)``, ``("error",
        traceback)``, or ``("died", None)`` where it ended without one."""
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return "died", None

    def go(self, policy: Rounds) -> tuple[str, object]:
        """Send the worker its turn's policy; return its final message (``died`` where it
        died while it waited)."""
        try:
            self.conn.send(("go", policy))
        except OSError:
            return "died", None
        return self.recv()

    def result(self, msg: tuple[str, object]) -> RunResult:
        """The :class:`RunResult` of a final message.

        Raises:
            WorkerError: for a worker that failed or died, naming it (its traceback printed
                to stderr).
        """
        kind, payload = msg
        if kind == "ok":
            self.measured = True
            return payload
        self.proc.join(timeout=5)
        if kind == "error":
            print(payload, file=sys.stderr, end="")
            raise WorkerError(f"worker process {self.index} failed: {payload.strip().splitlines()[-1]}")
        raise WorkerError(f"worker process {self.index} died with exit code {self.proc.exitcode}")


def _end(workers: list[_Worker]) -> None:
    """Stop the workers (those that wait for their turn, and those that measured and wait to
    tear down) and reap them all: a worker still setting up (it reads ``stop`` only when ready)
    gets :data:`END_GRACE_S`, one tearing down :data:`TEARDOWN_S`, then SIGTERM (the lab's
    helper processes die with it: their parent-death signal), then SIGKILL."""
    for w in workers:
        if w.proc.is_alive():
            try:
                w.conn.send(("stop", None))
            except OSError:
                pass
    now = time.monotonic()
    for w in workers:
        deadline = now + (TEARDOWN_S if w.measured else END_GRACE_S)
        w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
    for how in ("terminate", "kill"):
        for w in workers:
            if w.proc.is_alive():
                getattr(w.proc, how)()
        for w in workers:
            w.proc.join(timeout=END_GRACE_S)
    for w in workers:
        w.conn.close()


def _first_messages(workers: list[_Worker]) -> Iterator[tuple[_Worker, tuple[str, object]]]:
    """Each worker's first message, in the order they arrive (a failure is seen at once,
    not after the set-ups of the workers before it)."""
    waiting = {w.conn: w for w in workers}
    while waiting:
        for conn in multiprocessing.connection.wait(list(waiting)):
            worker = waiting.pop(conn)
            yield worker, worker.recv()


def run_in_turn(
    fns: list[Callable[[], RunResult]],
    policy: Callable[[int, list[RunResult]], Rounds],
    together: bool = True,
    before_turns: Callable[[], None] | None = None,
) -> list[RunResult]:
    """Fork one worker per function at once (``together``; else each once the one before is
    set up); when all are ready (:func:`lab.turns.await_turn`), call ``before_turns`` (where
    given), then let them measure one after the other, worker ``w`` with ``policy(w, results
    so far)``.

    Returns:
        The workers' results, in order; just one where a worker returned no rounds (a point
        skipped before its turn, or one that failed in it, as a workload's own code may): the
        others are stopped.

    Raises:
        WorkerError: for a worker that failed or died (the others are stopped), or one that
            measured rounds without waiting for its turn.
    """
    workers: list[_Worker] = []
    try:
        batches = [list(enumerate(fns))] if together else [[(i, fn)] for i, fn in enumerate(fns)]
        for batch in batches:
            started = [_Worker(i, fn) for i, fn in batch]
            workers += started
            for worker, msg in _first_messages(started):
                if msg[0] != "ready":
                    alone = worker.result(msg)
                    if alone.rounds is not None and len(fns) > 1:
                        raise WorkerError(f"worker process {worker.index} measured rounds without waiting for its turn")
                    return [alone]
        if before_turns is not None:
            before_turns()
        results: list[RunResult] = []
        for worker in workers:
            result = worker.result(worker.go(policy(worker.index, results)))
            if result.rounds is None:  # its turn ended in a failed or skipped point: the answer
                return [result]
            results.append(result)
        return results
    finally:
        _end(workers)


def _metric_values(result: RunResult, role: str, metric: str) -> list[float]:
    rows = sorted((r for r in result.rows if r.get("role") == role), key=lambda r: r["repeat"])
    return [float(r.get(metric, float("nan"))) for r in rows]


def _values(result: RunResult, metric: str) -> tuple[list[float], list[float]]:
    """The point's and the baseline's ``metric`` values, one per round in round order (empty
    without a metric)."""
    return tuple(_metric_values(result, role, metric) if metric else [] for role in ("point", "baseline"))


def _merge(into: RunResult, part: RunResult, worker: int, offset: int) -> None:
    """Append ``part`` (one worker's) to ``into``, its rounds numbered after ``offset``."""
    for row in part.rows:
        into.rows.append({**row, "repeat": row["repeat"] + offset, "worker": worker})
    for name in ("samples", "spans", "others"):
        getattr(into, name).extend({**x, "repeat": x["repeat"] + offset} for x in getattr(part, name))


def _pooled(parts: list[RunResult]) -> tuple[RunResult, int, float]:
    """The workers' results so far in one :class:`RunResult` (rounds numbered on), their rounds
    and their summed ``elapsed_s``."""
    merged, done, elapsed = RunResult(), 0, 0.0
    for w, part in enumerate(parts):
        _merge(merged, part, w, done)
        done += part.rounds["done"]
        elapsed += part.rounds["elapsed_s"]
        merged.outcome = part.outcome or merged.outcome
    return merged, done, elapsed


def run_workers(call: Callable[[Rounds], RunResult], rounds: Rounds) -> RunResult:
    """Measure a point's rounds in ``rounds.workers`` processes: set up together (one at a time
    with ``rounds.setup_alone``), measured one after the other (:mod:`lab.turns`).

    Args:
        call: runs the experiment with a policy (its ``run(params, baseline, rounds=...)``).
        rounds: the job's policy; each worker gets :meth:`Rounds.for_worker`, with the rounds
            of the workers before it, when its turn comes.

    Returns:
        The workers' results in one :class:`~lab.results.RunResult`: rows with
        ``worker`` and continuous ``repeat``, ``rounds`` with the total ``done``, the last
        worker's ``stopped``, the summed ``elapsed_s`` and each worker's rounds
        (``per_worker``). A result without rounds (a skipped point) is returned as it is.
        With one worker, ``call`` runs in this process. With ``rounds.probe_ms`` above 0, the
        workers share one capacity probe (:func:`lab.probe.share`), started here as they fork.

    Raises:
        WorkerError: for a worker that failed or died (see :func:`run_in_turn`).
    """
    if rounds.workers == 1:
        return call(rounds)

    def policy(w: int, parts: list[RunResult]) -> Rounds:
        merged, done, elapsed = _pooled(parts)
        return rounds.for_worker(w, done, elapsed, *_values(merged, rounds.metric))

    forked = [rounds.for_worker(w, 0, 0.0, [], []) for w in range(rounds.workers)]
    fns = [lambda p=p: call(p) for p in forked]
    probe = probe_mod.Probe(available_cpus(), rounds.probe_ms, wait=False) if rounds.probe_ms > 0 else None
    probe_mod.share(probe)  # the workers' probe (they measure one at a time): started once, beside their set-up
    try:
        ready = probe.wait_ready if probe is not None else None
        parts = run_in_turn(fns, policy, together=not rounds.setup_alone, before_turns=ready)
    finally:
        probe_mod.share(None)
        if probe is not None:
            probe.close()  # every worker has ended (run_in_turn): no other copy of its pipes is left
    if parts[0].rounds is None:  # nothing measured in rounds (skipped): that is the answer
        return parts[0]
    merged, done, elapsed = _pooled(parts)
    stopped = parts[-1].rounds["stopped"]
    for row in merged.rows:
        row["rounds_stopped"] = stopped
    per_worker = {"per_worker": [p.rounds["done"] for p in parts]}
    merged.rounds = rounds.record(done, stopped, elapsed, *_values(merged, rounds.metric)) | per_worker
    return merged
