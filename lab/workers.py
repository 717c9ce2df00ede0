"""A job's rounds split over worker processes, one after the other, as pyperf does.

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
anything up, so every worker imports torch, builds its model and warms up on its own. Rows
carry ``worker`` (0-based); ``repeat`` keeps counting across workers, so (point, repeat) stays
unique and rounds stay in time order.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import traceback
from collections.abc import Callable

from lab.host import set_parent_death_signal
from lab.results import RunResult
from lab.rounds import Rounds


class WorkerError(RuntimeError):
    """A worker process failed; the message is the last line of its traceback."""


def _child(conn, fn: Callable[[], RunResult]) -> None:
    set_parent_death_signal(signal.SIGTERM)
    try:
        conn.send(("ok", fn()))
    except BaseException:  # noqa: BLE001 - the parent reports whatever ended the worker
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def in_worker(fn: Callable[[], RunResult]) -> RunResult:
    """Run ``fn`` in a forked process and return its result.

    Raises:
        WorkerError: naming the last line of the worker's traceback (printed in full to
            stderr), or its exit code if it died without one.
    """
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn))
    proc.start()
    send.close()
    try:
        kind, payload = recv.recv()
    except EOFError:
        kind, payload = "died", None
    proc.join()
    if kind == "ok":
        return payload
    if kind == "error":
        print(payload, file=sys.stderr, end="")
        raise WorkerError(f"worker process failed: {payload.strip().splitlines()[-1]}")
    raise WorkerError(f"worker process died with exit code {proc.exitcode}")


def _metric_values(result: RunResult, role: str, metric: str) -> list[float]:
    rows = sorted((r for r in result.rows if r.get("role") == role), key=lambda r: r["repeat"])
    return [float(r.get(metric, float("nan"))) for r in rows]


def _merge(into: RunResult, part: RunResult, worker: int, offset: int) -> None:
    """Append ``part`` (one worker's) to ``into``, its rounds numbered after ``offset``."""
    for row in part.rows:
        into.rows.append({**row, "repeat": row["repeat"] + offset, "worker": worker})
    for name in ("samples", "spans", "others"):
        getattr(into, name).extend({**x, "repeat": x["repeat"] + offset} for x in getattr(part, name))


def run_workers(call: Callable[[Rounds], RunResult], rounds: Rounds) -> RunResult:
    """Measure a point's rounds in ``rounds.workers`` processes, one after the other.

    Args:
        call: runs the experiment with a policy (its ``run(params, baseline, rounds=...)``).
        rounds: the job's policy; each worker gets :meth:`Rounds.for_worker`.

    Returns:
        The workers' results in one :class:`~lab.results.RunResult`: rows with
        ``worker`` and continuous ``repeat``, ``rounds`` with the total ``done``, the last
        worker's ``stopped``, the summed ``elapsed_s`` and each worker's rounds
        (``per_worker``). A result without rounds (a skipped point) is returned as it is.
        With one worker, ``call`` runs in this process.
    """
    if rounds.workers == 1:
        return call(rounds)
    merged, done, elapsed, per_worker = RunResult(), 0, 0.0, []
    for w in range(rounds.workers):
        point = _metric_values(merged, "point", rounds.metric) if rounds.metric else []
        base = _metric_values(merged, "baseline", rounds.metric) if rounds.metric else []
        policy = rounds.for_worker(w, done, elapsed, point, base)
        part = in_worker(lambda policy=policy: call(policy))
        if part.rounds is None:  # nothing measured in rounds (skipped): that is the answer
            return part
        _merge(merged, part, w, done)
        done += part.rounds["done"]
        elapsed += part.rounds["elapsed_s"]
        per_worker.append(part.rounds["done"])
        merged.outcome = part.outcome or merged.outcome
        stopped = part.rounds["stopped"]
    for row in merged.rows:
        row["rounds_stopped"] = stopped
    values = [_metric_values(merged, role, rounds.metric) if rounds.metric else [] for role in ("point", "baseline")]
    merged.rounds = rounds.record(done, stopped, elapsed, *values) | {"per_worker": per_worker}
    return merged
