"""Diagnose, then search (experiments/workload/diagnose.py), and the three answers a search
gives (experiments/workload/recommend.py), on recorded inputs."""

from __future__ import annotations

import dataclasses

import pytest

from experiments.workload import KNOBS
from experiments.workload.diagnose import (
    DATA,
    PARALLEL,
    Diagnosis,
    estimate_s,
    steps_for,
)
from experiments.workload.recommend import incomplete_text, outcome

BASE = Diagnosis(
    step_s=0.65,
    steps=1,
    warmup=1,
    batches=8,
    epoch_batches=8,
    data_stall_pct=2.0,
    cpu_util_pct=95.0,
    loop_cpus=1.9,
    workers_cpus=0.0,
    ncpu=2,
    threads=2,
    num_workers=0,
    native_bf16=True,
    bf16_what="avx512_bf16: yes, amx_tile: no",
    input_dims=4,
    layout="contiguous",
    contended=False,
)


def test_a_compute_bound_step_on_full_cpus_searches_precision_and_layout_first():
    """ResNet-18 as issue 21 measured it: 655 ms steps, a 2% stall, both CPUs busy. Workers
    cannot help (nothing to wait for), neither can threads or processes (no idle CPU);
    bfloat16 and channels_last can, and come first."""
    why = BASE.reasons("train")
    assert all(why[k] for k in DATA) and "waited for data 2% of the epoch" in why["num_workers"]
    assert all(why[k] for k in PARALLEL) and "95% busy" in why["threads"]
    assert not why["precision"] and not why["channels_last"] and why["mode"]  # mode: inference only
    assert BASE.order()[:2] == ["precision", "channels_last"]


def test_a_loop_waiting_for_data_takes_workers_first_and_keeps_the_rest():
    stalled = dataclasses.replace(BASE, data_stall_pct=45.0, cpu_util_pct=55.0, loop_cpus=1.1)
    why = stalled.reasons("train")
    assert not any(why[k] for k in (*DATA, *PARALLEL, "precision", "channels_last"))
    assert stalled.order()[: len(DATA)] == list(DATA)
    starved = dataclasses.replace(BASE, data_stall_pct=90.0, cpu_util_pct=50.0)
    assert "save at most 10%" in starved.reasons("train")["precision"]  # compute hardly matters


def test_oversubscribed_cpus_keep_the_thread_knobs():
    crowded = dataclasses.replace(BASE, threads=2, num_workers=2)  # 4 on 2 CPUs: fewer may help
    assert not crowded.reasons("train")["threads"]


def test_windows_are_sized_in_time_and_the_complete_search_is_estimated():
    assert steps_for(0.5, 0.65) == 1 and steps_for(0.5, 0.005) == 100 and steps_for(0.5, 0.2) == 2
    space = {k: [v] for k, v in {"num_workers": 0, "threads": 2, "precision": "float32"}.items()}
    space["precision"] = ["float32", "bfloat16"]
    space["channels_last"] = [False, True]
    start = {"num_workers": 0, "threads": 2, "precision": "float32", "channels_last": False}
    expected, most, n = estimate_s(space, start, step_s=0.65, steps=1, warmup=2, max_rounds=10)
    window = 3 * 0.65 + 0.05
    assert n == 2 and expected == pytest.approx(2 * (6 * 2 * window + 3 * 0.65))
    assert most == pytest.approx(2 * (10 * 2 * window + 3 * 0.65))
    assert "One epoch of the start (8 of 8 steps of 650 ms)" in BASE.sentence()


def _d(**search) -> dict:
    return {"status": "ok", "verified": False, "search": {"stopped": "converged", "untried": [], **search}}


def test_three_answers_and_what_an_incomplete_search_did_not_try():
    assert outcome(_d() | {"verified": True}) == "verified faster"
    assert outcome(_d()) == "searched completely" and incomplete_text(_d()) == ""
    cut = _d(stopped="budget", untried=["threads", "precision"], order=list(KNOBS[:6]), budget_s=45, needed_s=240)
    assert outcome(cut) == "search incomplete"
    assert incomplete_text(cut) == (
        "search incomplete: 4 of 6 knobs tried in its 45 s budget; about 240 s would try all;"
        " not tried: threads, precision"
    )
    # every knob tried, but the budget ran out before a pass changed nothing: no "would try all"
    # beside a smaller estimate (contention stretched the comparisons past the diagnosis's)
    slow = _d(stopped="budget", order=list(KNOBS[:3]), budget_s=29, needed_s=22)
    assert outcome(slow) == "search incomplete"
    assert incomplete_text(slow) == (
        "search incomplete: all 3 knobs tried, but its 29 s budget ran out before it converged"
        " (the diagnosis expected about 22 s: the comparisons took longer than its steps predicted)"
    )
    assert incomplete_text(slow | {"search": {**slow["search"], "needed_s": 60}}).endswith("before it converged")
    # knobs left untried although the estimate fit the budget (seen: 3 of 4 in 34 s, 25 s expected)
    short = _d(stopped="budget", untried=["num_workers"], order=list(KNOBS[:4]), budget_s=34, needed_s=25)
    assert incomplete_text(short) == (
        "search incomplete: 3 of 4 knobs tried in its 34 s budget; the diagnosis expected about 25 s for all:"
        " the comparisons took longer than its steps predicted; not tried: num_workers"
    )
    assert outcome({"status": "failed"}) == "failed"


def test_replicas_are_diagnosed_per_process_and_their_cpus_together():
    """With data-parallel replicas the split between a training process and its workers is not
    read (``workers_cpus`` NaN): the sentence gives their CPUs together, not 0.00 workers, and
    the steps of one process's epoch."""
    import dataclasses

    two = dataclasses.replace(BASE, processes=2, num_workers=2, workers_cpus=float("nan"), loop_cpus=1.14, batches=2)
    text = two.sentence()
    assert "(2 of 8 steps of 650 ms)" in text
    assert "(1.14 CPUs the 2 training processes and their workers together, of 2)" in text and "0.00" not in text
    assert "(1.90 CPUs the training process, which has no DataLoader workers, of 2)" in BASE.sentence()
    one = dataclasses.replace(BASE, num_workers=1, workers_cpus=0.3).sentence()
    assert "(1.90 CPUs the training process, 0.30 its 1 DataLoader worker, of 2)" in one
