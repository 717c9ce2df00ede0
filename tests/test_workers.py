"""Worker processes (lab/workers.py, lab/turns.py): set up together, measured one at a time.

The runners here sleep instead of working, so the order of events is what is asserted, not
the machine's speed: a set-up of 0.4 s sleeping takes 0.4 s on any CPU.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from lab import probe, turns
from lab.host import available_cpus
from lab.results import Measured, RunResult, interleave
from lab.rounds import Rounds
from lab.workers import WorkerError, run_workers

SETUP_S = 0.4

#: Set-ups started so far, shared by forked workers.
_STARTED = multiprocessing.get_context("fork").Value("i", 0)


@dataclasses.dataclass(frozen=True)
class Sleepy:
    """A point whose set-up and windows sleep (``setup_s`` in worker 0, :data:`SETUP_S` in the
    others); worker ``fail_worker`` fails half-way through its set-up; worker ``exit_worker``
    exits ``exit_after_s`` after its set-up; with ``windows_log``, every window appends a line to
    that file."""

    window_s: float = 0.02
    sample_hz: float = 20.0
    repeats: int = 2
    fail_worker: int = -1
    windows_log: str = ""
    setup_s: float = SETUP_S
    exit_worker: int = -1
    exit_after_s: float = 0.0
    teardown_s: float = 0.0
    teardown_log: str = ""


class SleepyRunner:
    """Sets up by sleeping ``SETUP_S``, measures by sleeping ``window_s``; keeps the times."""

    def __init__(self, params: Sleepy, meter) -> None:
        self.params, self.meter = params, meter
        self.setup = (time.time(), None)
        with _STARTED.get_lock():
            _STARTED.value += 1
        me = turns.worker()
        if me == params.fail_worker:
            time.sleep(SETUP_S / 2)
            raise RuntimeError("set-up failed on purpose")
        setup_s = params.setup_s if me == 0 else SETUP_S
        if me == params.exit_worker:  # dies while it waits for its turn
            threading.Timer(setup_s + params.exit_after_s, os._exit, (3,)).start()
        time.sleep(setup_s)
        self.setup = (self.setup[0], time.time())

    def once(self) -> Measured:
        with self.meter.window() as win:
            time.sleep(self.params.window_s)
        if self.params.windows_log:
            with open(self.params.windows_log, "a") as f:
                f.write("window\n")
        row = {"items_per_s": 1.0 / win.wall_s, "setup_start": self.setup[0], "setup_end": self.setup[1]}
        row["worker_seen"] = turns.worker()
        row["probe_pids"] = " ".join(map(str, probe.shared().pids)) if probe.shared() else ""
        return Measured(win, row)

    def close(self) -> None:
        t = time.time()
        time.sleep(self.params.teardown_s)
        if self.params.teardown_log:
            with open(self.params.teardown_log, "a") as f:
                f.write(f"{turns.worker()} {t} {time.time()}\n")


def _run(params: Sleepy, rounds: Rounds) -> RunResult:
    return run_workers(lambda policy: interleave(SleepyRunner, params, rounds=policy), rounds)


def test_workers_set_up_together_and_measure_one_at_a_time():
    rounds = Rounds(4, workers=2, metric="items_per_s")
    t0 = time.time()
    result = _run(Sleepy(), rounds)
    wall = time.time() - t0
    rows = result.rows
    assert sorted({r["worker"] for r in rows}) == [0, 1]
    by = {w: [r for r in rows if r["worker"] == w] for w in (0, 1)}
    setups = {w: (by[w][0]["setup_start"], by[w][0]["setup_end"]) for w in by}
    # the set-ups overlap: each started before the other ended
    assert setups[1][0] < setups[0][1] and setups[0][0] < setups[1][1], setups
    # no window of either worker starts before both set-ups ended, and worker 1's windows
    # all come after worker 0's
    last_setup = max(end for _, end in setups.values())
    assert min(r["window_start_unix"] for r in rows) >= last_setup
    assert max(r["window_end_unix"] for r in by[0]) <= min(r["window_start_unix"] for r in by[1])
    # one set-up's sleep, not two, stood before the windows (two would be 0.8 s)
    assert wall < 2 * SETUP_S + sum(r["wall_s"] for r in rows) + 0.35, wall
    assert result.rounds["per_worker"] == [2, 2] and result.rounds["done"] == 4
    assert all(r["worker_seen"] == r["worker"] for r in rows)  # a worker knows its number
    assert [r["repeat"] for r in sorted(rows, key=lambda r: r["window_start_unix"])] == [0, 1, 2, 3]


def test_a_worker_tears_down_after_the_last_worker_measured_not_between_them(tmp_path):
    """A worker's rounds reach the parent before its tear-down (a slow one here: 0.4 s), which
    waits until no worker measures: the next worker starts at once, and no tear-down runs
    beside a window."""
    log = tmp_path / "teardowns"
    result = _run(Sleepy(teardown_s=SETUP_S, teardown_log=str(log)), Rounds(4, workers=2, metric="items_per_s"))
    by = {w: [r for r in result.rows if r["worker"] == w] for w in (0, 1)}
    handover = min(r["window_start_unix"] for r in by[1]) - max(r["window_end_unix"] for r in by[0])
    assert 0 <= handover < SETUP_S / 2, handover
    teardowns = [line.split() for line in log.read_text().splitlines()]
    assert sorted(int(w) for w, _, _ in teardowns) == [0, 1]
    last_window = max(r["window_end_unix"] for r in result.rows)
    assert all(float(start) >= last_window for _, start, _ in teardowns), (teardowns, last_window)


def test_an_experiment_that_times_its_set_up_has_its_workers_set_up_one_at_a_time():
    """With ``setup_alone`` (the jit experiment, which times a compile in its set-up) no set-up
    overlaps another: worker 1 starts its set-up once worker 0 is set up."""
    result = _run(Sleepy(), Rounds(2, workers=2, metric="items_per_s", setup_alone=True))
    first = {w: next(r for r in result.rows if r["worker"] == w) for w in (0, 1)}
    assert first[1]["setup_start"] >= first[0]["setup_end"]
    assert first[0]["window_start_unix"] >= first[1]["setup_end"]  # and still measured after both


def test_the_jit_experiment_sets_its_workers_up_one_at_a_time():
    """jit times torch.compile's cold first call and finds the compile cache its first worker
    filled in the second: the policy its command line builds keeps their set-ups apart."""
    from lab import registry
    from lab.cli import build_parser, rounds_policy

    exp = registry.get("jit")
    parser = build_parser(exp.params_cls, "jit")
    args = parser.parse_args(["--out", "x", "--rounds-workers", "2"])
    assert rounds_policy(args, "jit", exp.params_cls(), parser).setup_alone
    gil = registry.get("gil")
    parser = build_parser(gil.params_cls, "gil")
    args = parser.parse_args(["--out", "x", "--rounds-workers", "2"])
    assert not rounds_policy(args, "gil", gil.params_cls(), parser).setup_alone


def test_the_last_worker_pools_the_rounds_of_the_workers_before_it():
    """The policy a worker gets at its turn carries the earlier workers' metric values: with a
    target no interval can reach, the last worker measures until max_rounds counted over both."""
    rounds = Rounds(2, target_ci_pct=1e-9, budget_s=60, max_rounds=5, workers=2, metric="items_per_s")
    result = _run(Sleepy(window_s=0.005), rounds)
    assert result.rounds["per_worker"] == [1, 4]
    assert result.rounds["stopped"] == "max_rounds"


@pytest.mark.parametrize(("repeats", "workers", "per_worker"), [(4, 3, [2, 1, 1]), (6, 2, [3, 3]), (5, 2, [3, 2])])
def test_the_workers_measure_the_rounds_asked_for_between_them(repeats, workers, per_worker):
    """Each worker measures its share of the rounds left, so the job measures ``repeats`` rounds
    (a share rounded up for every worker measured 6 for 4 over 3 workers); the command line
    refuses more workers than rounds (tests/test_robustness.py)."""
    result = _run(Sleepy(window_s=0.005, setup_s=0.05), Rounds(repeats, workers=workers))
    assert result.rounds["per_worker"] == per_worker
    assert result.rounds["done"] == repeats == len({r["repeat"] for r in result.rows})


def test_a_worker_that_fails_to_set_up_stops_the_others_before_they_measure(tmp_path, capsys):
    """One worker fails half-way through its set-up, while the other sets up: the job fails
    naming the cause, and the other worker, set up and waiting, never measures a window."""
    _STARTED.value = 0
    log = tmp_path / "windows.log"
    rounds = Rounds(2, workers=2, metric="items_per_s")
    with pytest.raises(WorkerError, match="set-up failed on purpose"):
        _run(Sleepy(fail_worker=1, windows_log=str(log)), rounds)
    assert "RuntimeError: set-up failed on purpose" in capsys.readouterr().err
    assert _STARTED.value == 2
    assert not Path(log).exists()


def test_a_worker_that_dies_while_it_waits_for_its_turn_is_named():
    _STARTED.value = 0
    rounds = Rounds(16, workers=2, metric="items_per_s")  # worker 0 measures 0.4 s; worker 1 dies 0.02 s in
    with pytest.raises(WorkerError, match="worker process 1 died with exit code 3"):
        _run(Sleepy(window_s=0.05, exit_worker=1, exit_after_s=0.02), rounds)


def test_a_failure_is_reported_without_waiting_for_a_slower_set_up():
    """Worker 1 fails after 0.2 s while worker 0 sets up for 6 s: the job fails after the
    failure and worker 0's grace (END_GRACE_S, then SIGTERM), not when worker 0 is set up."""
    _STARTED.value = 0
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match="worker process 1 failed: RuntimeError: set-up failed on purpose"):
        _run(Sleepy(fail_worker=1, setup_s=6.0), Rounds(2, workers=2, metric="items_per_s"))
    assert time.monotonic() - t0 < 6.0


def test_a_point_skipped_before_its_turn_is_the_answer():
    rounds = Rounds(2, workers=3, metric="items_per_s")
    result = run_workers(lambda policy: RunResult.skipped("not on this CPU"), rounds)
    assert result.rounds is None
    assert [r["status"] for r in result.rows] == ["skipped"]


def test_a_point_that_fails_in_a_turn_is_the_answer_and_the_later_workers_do_not_measure(tmp_path):
    """A worker whose turn ends in a failed point (a workload's own code raised) returns no
    rounds: that failure is the job's answer, not an error of the lab's, and no later worker
    measures a window."""
    log = tmp_path / "windows"

    def call(policy):
        policy = turns.await_turn(policy)
        if turns.worker() == 0:
            return RunResult.failed("the workload raised KeyError while measured")
        log.write_text("measured")
        return RunResult(rounds={"done": 1, "elapsed_s": 0.0, "stopped": "fixed"})

    result = run_workers(call, Rounds(2, workers=2, metric="items_per_s"))
    assert result.rounds is None
    assert [r["reason"] for r in result.rows] == ["the workload raised KeyError while measured"]
    assert not log.exists()


def test_a_jobs_workers_share_one_capacity_probe_that_ends_with_the_job():
    """Three workers measure in turn with the probe on: one probe for the job (as many processes
    as available CPUs, started once, not once per worker), a reading on every row of every
    worker, and no probe process left once the job's rounds are done."""
    rounds = Rounds(6, workers=3, metric="items_per_s", probe_ms=2)
    result = _run(Sleepy(setup_s=0.1), rounds)
    assert sorted({r["worker"] for r in result.rows}) == [0, 1, 2]
    seen = {r["probe_pids"] for r in result.rows}
    assert len(seen) == 1 and seen != {""}, seen
    pids = [int(p) for p in seen.pop().split()]
    assert len(pids) == available_cpus()
    assert all(r["delivered_cpus"] > 0 and r["probe_s"] > 0 for r in result.rows)
    left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not left and probe.shared() is None


def test_a_worker_that_measures_without_its_turn_is_refused():
    rounds = Rounds(2, workers=2, metric="items_per_s")
    with pytest.raises(WorkerError, match="without waiting for its turn"):
        run_workers(lambda policy: RunResult(rounds={"done": 1, "elapsed_s": 0.0, "stopped": "fixed"}), rounds)


def test_outside_a_worker_the_turn_is_now_and_the_policy_unchanged():
    rounds = Rounds(3, probe_ms=5)
    assert turns.await_turn(rounds) is rounds and turns.worker() is None
