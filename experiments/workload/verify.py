"""Workload experiment, stage ``verify``: the search's start (``baseline``) against its winner
(``point``), in worker processes one after the other.

Why worker processes: a process's own state can move a workload's speed, and not alike for two
configurations. In the quick run y1-1 (AMX Xeon VM, 2026-12-05), the first with this split, the
winner (bfloat16, channels_last) over float32 read 1.31-1.42x in the first worker's five rounds
and 1.42-1.49x in the second's, seconds later. Two earlier runs' verifications, each in one
process, had put it at 1.43x (95% CI 1.36-1.47) and 1.61x (1.54-1.67). A bare 1024^2 bfloat16
matmul moves less: its per-process medians spread 11% over eight fresh processes, a between-process
sd of logs 0.030 and 0.041 against 0.049 and 0.022 within a process in two readings (float32: 6%,
0.022 against 0.023-0.024; ``benchmarks/process_state.py``, docs/benchmarks.md). Rounds in one
process cannot show such a shift in their interval. Split over ``verify_processes`` processes
(:func:`lab.workers.run_workers`, set up one at a time, measured in turn), the rows
carry ``worker`` and the summary widens the interval by the spread between them
(:func:`analysis.stats.worker_scale`), as for every other experiment's rounds.

Each worker loads the workload, makes both settings ready and runs one untimed step of each
(before its turn), then measures its share of ``repeats`` rounds A B B A of ``steps`` steps
(``window`` = ``steps``). The first worker first measures one whole epoch of each (repeat 0,
counted in its share; ``window`` = ``epoch``: the timeline, with the main loop's spans, and the
DataLoader workers' memory across an epoch; at most ``timeline_steps_max`` steps of it). With
``verify_epochs`` every round is a whole epoch and the first worker's round 0 gives the timeline.
"""

from __future__ import annotations

import time

from lab import turns
from lab.results import RunResult
from lab.rounds import Rounds
from lab.window import Meter
from lab.workers import run_workers


def verify(params, after: list[dict] | None) -> RunResult:
    """Stage ``verify`` of ``params`` (:class:`experiments.workload.measure.Params`) after the
    search job ``after`` (its ``job.json``).

    Returns:
        The rows of every worker (``worker``, ``repeat`` numbered on over them) with the outcome
        ``{"start", "winner"}``; or one ``failed`` row: the search recorded no winner, the
        workload cannot be loaded, or its own code raised (the reason names the config key).

    Raises:
        lab.workers.WorkerError: for a worker process that died or hit an error of the lab's own.
    """
    outcome = ((after or [{}])[0].get("outcome")) or {}
    if "winner" not in outcome:
        why = outcome.get("reason") or (after or [{}])[0].get("reason") or "it recorded no winner"
        return RunResult.failed(f"the search did not finish ({why}); nothing to verify")
    epochs = 0 if params.verify_epochs else 1  # the timeline's epochs: the first worker's repeat 0
    # Set up one at a time: a set-up runs a step of each side on its threads, and two at once
    # oversubscribe the CPUs. The quick run's verification (2 threads a side, AMX Xeon VM,
    # 2026-12-05) waited 2.60, 1.21 and 0.46 s for its first window set up together, 0.52 and
    # 0.49 s one at a time. The summary judges the gain: no metric here.
    policy = Rounds(params.repeats + epochs, workers=params.verify_processes, setup_alone=True)
    return run_workers(lambda rounds: _measure(params, outcome, rounds), policy)


def _measure(params, outcome: dict, rounds: Rounds) -> RunResult:
    """One worker's share of the verification (see the module docstring)."""
    from experiments.workload.bench import Bench
    from experiments.workload.loader import WorkloadError, load
    from experiments.workload.record import Recorder, user_failure

    try:
        workload = load(params.entry, params.task, params.batch_size)
    except WorkloadError as exc:
        return RunResult.failed(str(exc))
    start, winner = outcome["start"], outcome["winner"]
    with Meter(params.sample_hz) as meter:
        warmup = params.warmup if params.steps else outcome.get("warmup", params.warmup)
        bench = Bench(workload, params.job, meter, params.steps or outcome.get("steps"), warmup)
        try:
            if not bench.steps:  # a search of an older version: size the windows here
                from experiments.workload.diagnose import step_time, steps_for

                bench.steps = steps_for(params.window_s, step_time(bench, start))
            for cfg in (start, winner):  # set up before the turn: no set-up while another worker measures
                bench.check(cfg)
            rounds = turns.await_turn(rounds)
            rec = Recorder(bench, params, outcome.get("numerics", {}), 0)
            t0 = time.monotonic()
            timeline = turns.worker() in (None, 0)
            n = rounds.min_rounds - (timeline and not params.verify_epochs)  # its share counts the epochs
            _rounds(rec, params, start, winner, n, timeline)
        except Exception as exc:
            return user_failure(exc, params)
        finally:
            bench.close()
    rec.result.outcome = {"start": start, "winner": winner}
    # the whole record, as job.json keeps it where this process is the only one (run_workers
    # returns its result as it is); with more, run_workers pools the workers' records
    record = rounds.record(rec.repeat, "fixed", time.monotonic() - t0, [], [])
    rec.result.rounds = record | {"per_worker": [rec.repeat]}
    return rec.result


def _rounds(rec, params, start: dict, winner: dict, n: int, timeline: bool) -> None:
    """``n`` rounds A B B A of the winner (``point``) and the start (``baseline``); first, with
    ``timeline``, one whole epoch of each (or, with ``verify_epochs``, spans in round 0)."""
    if timeline and not params.verify_epochs:  # repeat 0: one whole epoch of each, for the timeline
        for role, cfg in (("baseline", start), ("point", winner)):
            rec.window(cfg, role, spans=True, epoch=True)
        rec.repeat += 1
    for r in range(n):
        order = [("point", winner), ("baseline", start)]
        for role, cfg in order[:: 1 if r % 2 == 0 else -1]:
            rec.window(cfg, role, spans=timeline and params.verify_epochs and r == 0, epoch=params.verify_epochs)
        rec.repeat += 1
