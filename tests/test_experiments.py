"""Each experiment's pure run function with tiny parameters, and the measurement machinery."""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.dataloader import measure as dataloader
from experiments.gil import measure as gil
from experiments.intraop import measure as intraop
from experiments.jit import measure as jit
from experiments.multiprocessing import measure as mp_exp
from lab.host import JOB_SCRATCH, available_cpus, job_scratch
from lab.threads import set_torch_threads
from lab.window import Meter

NCPU = available_cpus()


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# ------------------------------------------------------------------ measurement machinery


def test_measure_busy_loop_uses_one_cpu():
    """The window's CPU utilisation is the busy loop's own CPU time (the kernel's account, read
    by the loop itself with process_time) over the window: one CPU's worth where the host gives
    the loop a whole CPU, less where it does not (steal, a shared core); judged against what the
    loop itself got, not against 100 / CPUs."""
    with Meter(20) as meter, meter.window() as w:
        c0, t0 = time.process_time(), time.perf_counter()
        _busy(0.5)
        own_s, span_s = time.process_time() - c0, time.perf_counter() - t0
    own = 100.0 * own_s / (span_s * NCPU)
    assert w.wall_s == pytest.approx(0.5, abs=0.1)
    assert w.cpu_util_pct == pytest.approx(100 * w.cpu_s / (w.wall_s * NCPU))
    assert abs(w.cpu_util_pct - own) <= 3, (w.cpu_util_pct, own, w.interference_pct)  # 10 ms ticks of 0.5 s
    assert w.cpu_util_pct <= 100.0 / NCPU + 3  # one thread: never more than one CPU
    tree = [v for _, s, v in w.samples if s == "tree"]
    assert len(tree) >= 5
    # psutil's first cpu_percent() call returns 0.0; the sampler primes it, so a busy
    # process is never sampled as idle.
    assert min(tree[:-1]) > own * 0.5
    cores = {s for _, s, _ in w.samples if s.startswith("cpu")}
    assert len(cores) == NCPU


def _busy_and_report(seconds: float, conn) -> None:
    _busy(seconds)
    conn.send(time.process_time())  # the child's own CPU time, measured independently


def test_measure_counts_child_processes():
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    with Meter(10) as meter, meter.window() as w:
        p = ctx.Process(target=_busy_and_report, args=(0.4, send))
        p.start()
        child_cpu_s = recv.recv()
        p.join()
    # whatever else ran on the machine, the joined child's own CPU time is in the tree's
    assert child_cpu_s > 0.05
    assert w.cpu_s >= child_cpu_s * 0.95, ("CPU time of a joined child must count", w.cpu_s, child_cpu_s)


def test_set_torch_threads_reports_what_torch_uses():
    import torch

    before = torch.get_num_threads()
    try:
        info = set_torch_threads(1)
        assert info["torch_threads"] == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------ gil


def test_gil_io_threads_overlap_cpu_threads_do_not():
    io_seq = gil.run(gil.Params(workload="io", mode="sequential", workers=2, io_iterations=5, warmup=0, repeats=2))
    io_thr = gil.run(gil.Params(workload="io", mode="threads", workers=2, io_iterations=5, warmup=0, repeats=2))
    seq = min(r["wall_s"] for r in io_seq.rows)
    thr = min(r["wall_s"] for r in io_thr.rows)
    assert seq >= 0.1  # 2 tasks x 5 sleeps x 10 ms, one after the other
    assert seq / thr > 1.5, (seq, thr)

    cpu_thr = gil.run(
        gil.Params(workload="cpu", mode="threads", workers=2, cpu_iterations=1_500_000, warmup=0, repeats=1)
    )
    spans = pd.DataFrame(cpu_thr.spans)
    assert set(spans["actor"]) == {"thread-0", "thread-1"}
    assert len(spans) == 2 * 20
    # The GIL: two CPU-bound threads together never get more than one CPU's worth of time.
    wall = cpu_thr.rows[0]["wall_s"]
    assert spans["cpu_s"].sum() / wall < 1.15
    assert (spans["cpu_s"] <= (spans["end_s"] - spans["start_s"]) + 0.01).all()


@pytest.mark.skipif(NCPU < 2, reason="needs 2 CPUs")
def test_gil_processes_run_concurrently():
    res = gil.run(
        gil.Params(workload="cpu", mode="processes", workers=2, cpu_iterations=2_000_000, warmup=0, repeats=1)
    )
    spans = pd.DataFrame(res.spans)
    assert set(spans["actor"]) == {"process-0", "process-1"}
    # the two processes run at the same time (robust to load; the speedup this gives on an
    # idle machine is a fidelity check of the pipeline)
    first, second = (spans[spans["actor"] == a] for a in ("process-0", "process-1"))
    assert first["start_s"].min() < second["end_s"].max() and second["start_s"].min() < first["end_s"].max()
    assert res.rows[0]["start_method"] == "fork"


def test_gil_params_reject_bad_values():
    with pytest.raises(ValueError, match="workers=0.*>= 1"):
        gil.Params(workers=0)


def test_cli_reports_bad_parameter_and_writes_nothing(tmp_path):
    out = tmp_path / "point"
    proc = subprocess.run(
        [sys.executable, "-m", "lab.point", "gil", "--workers", "-1", "--out", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "workers=-1" in proc.stderr
    assert not out.exists()


def test_a_run_that_changes_directory_still_writes_where_it_was_asked(tmp_path, monkeypatch):
    """User code (a workload's ``build()``) may ``os.chdir``: the point's files still go to
    ``--out`` as given, relative to where the job started."""
    import os

    from lab.cli import measure_point
    from lab.results import RunResult

    def run(params, baseline=None):
        os.chdir(elsewhere)
        res = RunResult()
        res.rows.append({"repeat": 0, "role": "point", "status": "ok", "wall_s": 0.1, "tasks_per_s": 20.0})
        return res

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    argv = ["--workload", "io", "--mode", "threads", "--host", "h", "--out", "results/h/point"]
    done = measure_point(
        "gil", gil.Params, run, "test", argv=argv, metric=lambda _: "tasks_per_s", columns=["tasks_per_s"]
    )
    assert done == 0
    assert (tmp_path / "results/h/point/metrics.csv").exists() and not (elsewhere / "results").exists()


def test_cli_writes_point_files(tmp_path):
    out = tmp_path / "point"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.point",
            "gil",
            "--workload",
            "io",
            "--mode",
            "threads",
            "--io-iterations",
            "15",
            "--repeats",
            "2",
            "--warmup",
            "0",
            "--host",
            "test<host>",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    m = pd.read_csv(out / "metrics.csv")
    assert list(m["repeat"]) == [0, 1]
    assert set(m["host"]) == {"test-host"}
    assert {"workload", "mode", "workers", "wall_s", "tasks_per_s", "cpu_util_pct", "status"} <= set(m.columns)
    assert (m["status"] == "ok").all()
    assert ((m["cpu_util_pct"] >= 0) & (m["cpu_util_pct"] <= 100)).all()
    assert (pd.read_csv(out / "spans.csv")["kind"] == "io").all()
    assert set(pd.read_csv(out / "samples.csv")["series"]) >= {"system", "tree", "cpu0"}


# ------------------------------------------------------------------ multiprocessing


def test_multiprocessing_trains_in_processes():
    p = mp_exp.Params(processes=2, threads=1, steps=6, warmup_steps=1, repeats=2)
    res = mp_exp.run(p)
    assert len(res.rows) == 2
    for row in res.rows:
        assert row["torch_threads"] == 1
        assert row["samples_per_s"] == pytest.approx(2 * 6 * 64 / row["wall_s"])
        assert row["steps_done"] == 12
        assert row["oversubscribed"] is (2 > NCPU)
    spans = pd.DataFrame(res.spans)
    assert set(spans["actor"]) == {"process-0", "process-1"}
    assert spans.groupby(["repeat", "actor"])["steps"].sum().eq(6).all()


def test_a_multiprocessing_window_stops_at_its_cap_and_counts_the_steps_done():
    """Steps that would take minutes stop once the window reaches ``max_window_s``: each process
    after the step that crosses it, and samples/s counts the steps done."""
    p = mp_exp.Params(processes=2, threads=1, steps=10**6, warmup_steps=1, repeats=2, max_window_s=0.3)
    res = mp_exp.run(p)
    spans = pd.DataFrame(res.spans)
    for r, row in enumerate(res.rows):
        assert 0 < row["steps_done"] < 2 * 10**6
        assert row["samples_per_s"] == pytest.approx(row["steps_done"] * 64 / row["wall_s"])
        assert row["wall_s"] >= 0.3  # every process stepped until the cap
        mine = spans[spans["repeat"] == r]
        assert mine["steps"].sum() == row["steps_done"]
        # each process stopped after the step that crossed the cap: its last span ends past it
        last = mine.groupby("actor")["end_s"].max()
        assert (last >= 0.3).all() and (last <= row["wall_s"]).all()


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("max_window_s", -1.0, "max_window_s=-1.0 is out of range; it must be >= 0"),
        ("max_window_s", math.inf, "max_window_s=inf is out of range; it must be a finite number >= 0"),
        ("max_window_s", math.nan, "max_window_s=nan is out of range; it must be a finite number >= 0"),
        ("timeout_s", math.inf, "timeout_s=inf is out of range; it must be a finite number > 0"),
    ],
)
def test_a_bound_names_the_value_and_says_a_finite_number_where_it_was_not(field, value, said):
    with pytest.raises(ValueError) as err:
        mp_exp.Params(**{field: value})
    assert str(err.value) == said


def test_multiprocessing_marks_oversubscription():
    res = mp_exp.run(mp_exp.Params(processes=1, threads=NCPU + 1, steps=2, warmup_steps=0, repeats=1))
    assert res.rows[0]["oversubscribed"] is True
    assert res.rows[0]["torch_threads"] == NCPU + 1


# ------------------------------------------------------------------ dataloader


@pytest.mark.parametrize("dataset", ["tensor", "cpu", "io"])
def test_dataloader_epoch(dataset):
    p = dataloader.Params(dataset=dataset, num_workers=1, items=128, io_latency_s=0.0005, warmup_epochs=1, repeats=1)
    res = dataloader.run(p)
    row = res.rows[0]
    assert row["samples_per_s"] == pytest.approx(128 / row["wall_s"])
    assert row["batches_per_s"] == pytest.approx(4 / row["wall_s"])
    assert 0 <= row["data_stall_pct"] <= 100
    spans = pd.DataFrame(res.spans)
    assert sorted(spans["kind"].value_counts().to_dict().items()) == [("fetch", 4), ("step", 4), ("wait", 4)]
    fetch = spans[spans["kind"] == "fetch"]
    assert set(fetch["actor"]) == {"worker-0"}  # measured inside the worker process


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_fetch_spans_are_causal(num_workers):
    # each batch is fetched (in a worker, or in the main loop's own wait) before the main loop
    # receives it: fetch end <= end of that batch's wait; all on one clock (perf_counter)
    p = dataloader.Params(dataset="cpu", num_workers=num_workers, items=96, batch_size=8, cpu_work_size=2048)
    spans = pd.DataFrame(dataloader.run(dataloader.Params(**{**p.__dict__, "repeats": 1})).spans)
    fetch = spans[spans["kind"] == "fetch"].set_index("batch")
    wait = spans[spans["kind"] == "wait"].set_index("batch")
    assert len(fetch) == len(wait) == 12
    assert (fetch["end_s"] <= wait["end_s"] + 1e-6).all()
    assert (fetch["start_s"] >= 0).all() and (fetch["end_s"] > fetch["start_s"]).all()
    if num_workers == 0:
        assert set(fetch["actor"]) == {"main"}
        assert (fetch["start_s"] >= wait["start_s"] - 1e-6).all()  # inside its own wait
    else:
        assert set(fetch["actor"]) == {"worker-0", "worker-1"}


def test_dataloader_captures_too_many_workers_warning():
    res = dataloader.run(dataloader.Params(num_workers=NCPU + 2, items=64, warmup_epochs=1, repeats=1))
    row = res.rows[0]
    assert "suggested max number of worker" in row["worker_warning"]
    assert row["oversubscribed"] is True


def test_dataloader_io_dataset_benefits_from_workers():
    kw = dict(dataset="io", items=64, batch_size=8, io_latency_s=0.005, warmup_epochs=1, repeats=1)
    zero = dataloader.run(dataloader.Params(num_workers=0, **kw)).rows[0]
    four = dataloader.run(dataloader.Params(num_workers=4, **kw)).rows[0]
    assert zero["wall_s"] >= 64 * 0.005
    assert zero["wall_s"] / four["wall_s"] > 1.8


# ------------------------------------------------------------------ intraop


def test_intraop_matmul_gflops_definition():
    p = intraop.Params(workload="matmul", threads=1, matmul_size=128, iterations=4, warmup=1, repeats=2, min_window_s=0)
    for row in intraop.run(p).rows:
        assert row["calls"] == 4
        assert row["gflop_per_s"] == pytest.approx(2 * 128**3 * 4 / row["wall_s"] / 1e9)
        assert row["torch_threads"] == 1
        assert row["interop_threads"] == 1


def test_intraop_windows_as_short_as_the_calls_grow_to_the_minimum():
    """4 calls of a 128^2 matmul take well under 0.1 s on any CPU: the window runs as many as
    fill min_window_s (counted before the first window), and the metric counts the calls it ran."""
    p = intraop.Params(workload="matmul", threads=1, matmul_size=128, iterations=4, warmup=1, repeats=2)
    rows = intraop.run(p).rows
    for row in rows:
        assert row["calls"] > 4
        assert row["gflop_per_s"] == pytest.approx(2 * 128**3 * row["calls"] / row["wall_s"] / 1e9)
    # the calls were sized to min_window_s from the fastest call timed; the windows land near it,
    # within the 40% the machine's speed moves between jobs and well inside 3x either way
    assert 1 / 3 < np.median([r["wall_s"] for r in rows]) / p.min_window_s < 3


def test_intraop_calls_per_window_from_the_fastest_call():
    """A first call the host slowed (30 ms, then 2 ms calls) must not shorten the windows: the
    count comes from the fastest call timed (0.2 s / about 2 ms), not from their mean (16 ms,
    13 calls), which a job's other workers setting up beside it inflated."""
    naps = iter([0.03] + [0.002] * 1000)
    p = intraop.Params(workload="tiny", iterations=1, warmup=0, min_window_s=0.2)
    assert intraop.calls_per_window(lambda: time.sleep(next(naps)), p) >= 40  # fastest <= 5 ms


def test_intraop_window_count_rises_after_a_faster_window():
    """A count taken while the host was slow grows once a window runs faster than it assumed,
    so the windows after it fill min_window_s; it never falls."""
    p = intraop.Params(workload="tiny", threads=1, iterations=1, warmup=0, min_window_s=0.05)
    with Meter(10) as meter:
        runner = intraop.Runner(p, meter)
        runner.calls = 2  # as if counted while another process held the CPUs
        first = runner.once().row
        second = runner.once().row
    assert first["calls"] == 2 and second["calls"] > 2
    assert runner.calls >= second["calls"]


@pytest.mark.parametrize(
    "workload, threads, untimed",
    [("matmul", 1, 0), ("matmul", 2, 2), ("tiny", 1, 0), ("matmul_bf16", 1, 2)],
)
def test_intraop_warms_up_where_a_thread_switch_slows_the_first_calls(workload, threads, untimed):
    """A window of 2 or more threads runs ``warmup`` untimed calls after its thread count is set
    (the pool wakes); a float32 window at one thread runs none (its first calls after a switch
    ran at 0.97-1.03x settled ones, benchmarks/warmup.py); the bfloat16 matmul at one thread runs
    them (its first ran 37% slow on an AMX Xeon)."""
    p = intraop.Params(workload=workload, threads=threads, matmul_size=32, iterations=3, warmup=2, min_window_s=0)
    with Meter(10) as meter:
        runner = intraop.Runner(p, meter)
        runner.once()  # the first window counts its calls (calls_per_window)
        made, fn = [], runner.fn
        runner.fn = lambda: (made.append(1), fn())
        row = runner.once().row
    assert len(made) == row["calls"] + untimed == 3 + untimed


@pytest.mark.parametrize("workload", ["mlp", "tiny"])
def test_intraop_training_steps(workload):
    kw = dict(workload=workload, threads=2, batch_size=8, iterations=3, warmup=1, repeats=1, min_window_s=0)
    row = intraop.run(intraop.Params(**kw)).rows[0]
    batch = 8 if workload == "mlp" else 4
    assert row["samples_per_s"] == pytest.approx(batch * 3 / row["wall_s"])
    assert row["torch_threads"] == 2
    assert row["oversubscribed"] is (2 > NCPU)


# ------------------------------------------------------------------ jit


@pytest.mark.parametrize("mode", ["eager", "script", "trace"])
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_jit_modes_match_eager(model, mode):
    res = jit.run(jit.Params(model=model, mode=mode, iterations=3, warmup_calls=2, repeats=2))
    assert len(res.rows) == 2
    row = res.rows[0]
    assert row["status"] == "ok"
    assert row["allclose"] is True
    assert row["max_abs_diff"] < 1e-4
    assert row["first_call_s"] > 0
    assert row["latency_ms"] == pytest.approx(1000 * row["wall_s"] / 3)


def test_jit_compile_skipped_without_compiler(tmp_path):
    # inductor reads $CXX when it is imported, so this needs a fresh process (as in a job)
    env = {**os.environ, "CXX": "/nonexistent/c++"}
    out = tmp_path / "point"
    subprocess.run(
        [sys.executable, "-m", "lab.point", "jit", "--mode", "compile", "--iterations", "2", "--out", str(out)],
        check=True,
        capture_output=True,
        env=env,
    )
    m = pd.read_csv(out / "metrics.csv")
    assert list(m["status"]) == ["skipped"]
    assert "C++ compiler" in m["reason"][0]


@pytest.mark.slow
@pytest.mark.side_run("jit_compile")
def test_jit_compile_measures_the_first_call_cold_then_with_the_cache_filled(side_runs):
    """A compile job in two worker processes (tests/side_runs.py's ``run_jit_compile``, beside the
    other side runs): the first finds the job's compile cache empty, the second finds it filled;
    each says which in its own column, and the job leaves no cache. What it asserts holds by
    orders of magnitude (compiling takes seconds, a call milliseconds), contended or not."""
    run = side_runs["jit_compile"].value()
    if "skipped" in run:
        pytest.skip(run["skipped"])
    assert run["proc"][0] == 0, run["proc"][1]
    m = pd.read_csv(run["out"] / "metrics.csv")
    point = m[m["role"] == "point"].groupby("worker")[["first_call_s", "first_call_warm_s"]].first()
    cold, warm = point.loc[0, "first_call_s"], point.loc[1, "first_call_warm_s"]
    assert np.isnan(point.loc[0, "first_call_warm_s"]) and np.isnan(point.loc[1, "first_call_s"])  # cold, then not
    assert 0 < warm < cold, (cold, warm)
    compiled = m[m["role"] == "point"]
    assert cold > 10 * compiled["latency_ms"].median() / 1000  # compiling dwarfs one call
    assert compiled["allclose"].all()  # the compiled model's output equals eager's
    assert not list(run["tmp"].glob("job-*"))  # the job's scratch (its compile cache) is gone


def test_job_scratch_is_fresh_named_removed_and_swept(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "job-left-by-a-killed-job").mkdir()
    (tmp_path / "other").mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "pipeline-cache"))
    with job_scratch() as first:
        assert os.environ[JOB_SCRATCH] == str(first) and first.parent == tmp_path and not any(first.iterdir())
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(first / "inductor")  # every job compiles cold
        (first / "f").write_text("x")
    assert JOB_SCRATCH not in os.environ and not first.exists()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "pipeline-cache")  # put back
    assert (tmp_path / "job-left-by-a-killed-job").exists()  # without the lock, nothing is swept
    with job_scratch(sweep=True) as second:
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([second.name, "other"])
    assert [p.name for p in tmp_path.iterdir()] == ["other"]


# ------------------------------------------------------------------ interleaving and self-check


def test_interleave_alternates_point_and_baseline():
    p = gil.Params(workload="io", mode="threads", workers=2, io_iterations=5, warmup=0, repeats=4)
    res = gil.run(p, gil.Params(workload="io", mode="sequential", workers=2, io_iterations=5, warmup=0, repeats=4))
    rows = sorted(res.rows, key=lambda r: r["window_start_unix"])
    assert [r["role"] for r in rows] == ["point", "baseline", "baseline", "point"] * 2
    assert {r["_params"]["mode"] for r in rows if r["role"] == "baseline"} == {"sequential"}
    assert all("_params" not in r for r in rows if r["role"] == "point")
    base = [r["wall_s"] for r in rows if r["role"] == "baseline"]
    point = [r["wall_s"] for r in rows if r["role"] == "point"]
    # sleeping threads overlap (about 50 ms), sequential sleeps add up (about 100 ms). Medians:
    # one late wake-up under load made a threads window take 57 ms of 60 in a CI run
    assert np.median(base) / np.median(point) > 1.5, (base, point)


def test_windows_after_work_that_leaves_openmp_threads_spinning_wait_for_them(monkeypatch):
    """A point of 2 intra-op threads under libgomp's default wait policy: its threads spin
    after each window (lab.results.SPIN_SETTLE_S), so the next window (its 1-thread baseline)
    and the next probe reading start only after a rest; a 1-thread window is followed at once.
    Under OMP_WAIT_POLICY=PASSIVE no window waits. The rests are recorded, not timed: a loaded
    machine can stall any gap past 10 ms."""
    from dataclasses import dataclass

    from lab import results
    from lab.rounds import Rounds

    monkeypatch.setattr(results.RunResult, "add_window", lambda self, *args, **kwargs: None)

    @dataclass(frozen=True)
    class P:
        threads: int

    log = []
    monkeypatch.setattr(results.time, "sleep", lambda s: log.append(f"rest {s:g} s"))

    class Fake:
        def __init__(self, name):
            self.name = name

        def once(self):
            log.append(self.name)
            return results.Measured(None, {"x": 1.0}, [])

    class Probe:
        def measure(self, levels):
            log.append("probe")

    def events(policy):
        if policy is None:
            monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
        else:
            monkeypatch.setenv("OMP_WAIT_POLICY", policy)
        log.clear()
        runners = [("point", P(2), Fake("point")), ("baseline", P(1), Fake("baseline"))]
        results._measure_rounds(runners, Rounds(4, probe_ms=5.0), Probe(), 2)
        return list(log)

    rest = f"rest {results.SPIN_SETTLE_S:g} s"
    even = [rest, "probe", "point", rest, "baseline"]  # the warm-ups ran the point: a rest first
    odd = ["probe", "baseline", "point"]  # its rest comes before the next round's probe
    assert events(None) == even + odd + even + odd
    assert events("passive") == ["probe", "point", "baseline", "probe", "baseline", "point"] * 2
    assert results.may_spin(P(2)) is False and results.may_spin(P(1)) is False  # PASSIVE still set
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert results.may_spin(P(2)) and not results.may_spin(P(1)) and not results.may_spin(P((1, 2)))


def test_cli_baseline_rows_carry_baseline_params(tmp_path):
    out = tmp_path / "point"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.point",
            "intraop",
            "--workload",
            "matmul",
            "--threads",
            "2",
            "--matmul-size",
            "64",
            "--iterations",
            "2",
            "--repeats",
            "2",
            "--baseline",
            "threads=1",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    m = pd.read_csv(out / "metrics.csv")
    assert sorted(zip(m["role"], m["threads"], m["torch_threads"])) == [
        ("baseline", 1, 1),
        ("baseline", 1, 1),
        ("point", 2, 2),
        ("point", 2, 2),
    ]
    bad = subprocess.run(
        [sys.executable, "-m", "lab.point", "intraop", "--baseline", "nosuch=1", "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "nosuch=1" in bad.stderr


def test_the_idle_windows_floor_lasts_its_window_at_any_rate():
    from lab.selfcheck import wake_and_read

    for hz, measured in ((40, True), (2, False)):  # 2 Hz: no wake-up fits 0.3 s
        t = time.monotonic()
        ms = wake_and_read(0.3, hz)
        took = time.monotonic() - t
        assert 0.3 <= took < 0.45, (hz, took)  # the window's length, not one period of 0.5 s
        assert (ms > 0) if measured else np.isnan(ms), (hz, ms)


#: How many times the least a sampler does per sample (wake up, read /proc/stat and
#: /proc/self/stat) the sampler may cost. Measured side by side in the same windows on the
#: 2-vCPU AMX Xeon VM: 2.2-4.9 times, at 10 Hz (2.5-4.2 ms against 0.85-1.6 ms) and at 40 Hz
#: (1.0-1.6 ms against 0.21-0.45 ms). The whole-machine scan of the edge counters (all of
#: /proc/*/stat) leaking into every sample would cost several times that.
SAMPLER_OVER_FLOOR_MAX = 8.0


def test_selfcheck_sampler_reads_known_load_and_costs_little():
    from lab import selfcheck

    res = selfcheck.run(
        selfcheck.Params(load="busy", duration_s=0.5, repeats=2),
        selfcheck.Params(load="idle", duration_s=0.5, repeats=2),
    )
    busy = [r for r in res.rows if r["role"] == "point"]
    idle = [r for r in res.rows if r["role"] == "baseline"]
    for r in busy:
        # the sampler's series agrees with the process's own CPU-time accounting (this holds
        # under load too; that it equals 100 / CPUs on an idle machine is a fidelity check)
        assert abs(r["sampler_tree_pct"] - r["cpu_util_pct"]) <= 10, r
        # the fidelity check's reference: the loop's own process_time, the same CPU time by another clock
        assert abs(r["process_cpu_pct"] - r["cpu_util_pct"]) <= 3, r
        assert r["cpu_util_pct"] <= 100 / NCPU + 5
        assert r["samples"] >= 4
    for r in idle:
        assert r["sampler_tree_pct"] < 5
        # its cost per sample, judged against what this machine charged in the same window for
        # waking at the same rate to read two /proc files (the goal, 1 ms, is a fidelity check)
        per_sample_ms = 10 * r["sampler_cpu_pct"] / selfcheck.Params().sample_hz
        assert 0 < r["wake_read_ms"] and per_sample_ms <= SAMPLER_OVER_FLOOR_MAX * r["wake_read_ms"], r


def test_thread_mismatch_fails_naming_both_values(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # a runtime that ignores the request
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)
    with pytest.raises(RuntimeError, match=r"requested 3 intra-op threads but torch.get_num_threads\(\) reports 7"):
        set_torch_threads(3)


def test_baseline_override_is_validated_and_nan_refused():
    from lab.params import parse_overrides

    with pytest.raises(ValueError, match="mode must be one of"):
        parse_overrides(gil.Params, ["mode=bogus"])
    with pytest.raises(ValueError, match="workers must be of type int"):
        parse_overrides(gil.Params, ["workers=abc"])
    with pytest.raises(ValueError, match="--baseline 'mode=threads': mode is given twice"):
        parse_overrides(gil.Params, ["mode=sequential", "mode=threads"])  # not: the last one wins
    with pytest.raises(ValueError, match="sample_hz=nan"):
        gil.Params(sample_hz=float("nan"))


def test_workers_die_with_their_parent(tmp_path):
    # a job killed mid-run must not leave its training processes behind
    import signal

    import psutil

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lab.point",
            "multiprocessing",
            "--processes",
            "2",
            "--steps",
            "100000",
            "--repeats",
            "1",
            "--warmup-steps",
            "0",
            "--out",
            str(tmp_path / "mp"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parent = psutil.Process(proc.pid)
    deadline = time.time() + 60
    while len(parent.children(recursive=True)) < 3 and time.time() < deadline:  # 2 workers + sampler
        time.sleep(0.2)
    children = parent.children(recursive=True)
    assert len(children) >= 2
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [p.cmdline() for p in alive]


def test_bf16_matmul_is_skipped_without_native_bf16_and_measured_on_request(monkeypatch):
    import re

    # the probe agrees with the CPU flags the kernel reports
    flags = set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).split())
    assert intraop.native_bf16()[0] == bool(flags & {"avx512_bf16", "amx_tile"})
    small = dict(workload="matmul_bf16", matmul_size=64, iterations=2, warmup=0, repeats=1)
    monkeypatch.setattr(intraop, "native_bf16", lambda: (False, "avx512_bf16: no, amx_tile: no"))
    res = intraop.run(intraop.Params(**small))
    assert [r["status"] for r in res.rows] == ["skipped"]
    assert "no native bfloat16 on this CPU (avx512_bf16: no, amx_tile: no)" in res.rows[0]["reason"]
    assert "intraop.bf16: any" in res.rows[0]["reason"]  # how to measure it anyway
    for params in (intraop.Params(**small, bf16="any"), intraop.Params(**small, threads=2)):
        if params.bf16 == "native":
            monkeypatch.setattr(intraop, "native_bf16", lambda: (True, "avx512_bf16: yes, amx_tile: no"))
        rows = intraop.run(params).rows
        assert [r["status"] for r in rows] == ["ok"] and rows[0]["dtype"] == "bfloat16"
        assert rows[0]["gflop_per_s"] > 0
    assert (
        intraop.run(intraop.Params(workload="matmul", matmul_size=64, iterations=2, repeats=1)).rows[0]["dtype"]
        == "float32"
    )


def test_points_far_above_the_cpus_are_skipped_with_the_reason(tmp_path):
    from lab.params import oversubscription_skip

    mp = mp_exp

    assert gil.Params(mode="sequential", workers=8).cpus_requested() == 1
    assert gil.Params(mode="processes", workers=8).cpus_requested() == 8
    assert mp.Params(processes=4, threads=2).cpus_requested() == 8
    assert dataloader.Params(num_workers=4, threads=1).cpus_requested() == 5
    assert intraop.Params(threads=3).cpus_requested() == jit.Params(threads=3).cpus_requested() == 3
    assert oversubscription_skip(mp.Params(processes=4, threads=2), 4, ncpu=2) is None  # 8 <= 4 x 2
    why = oversubscription_skip(mp.Params(processes=4, threads=2), 4, ncpu=1)
    assert why == "asks for 8 CPUs at once but this host has 1 available; max_oversubscription 4 allows up to 4"
    assert oversubscription_skip(mp.Params(processes=64, threads=2), None, ncpu=1) is None  # no limit
    # through the command line: nothing is run, the point is recorded as skipped
    workers = 2 * NCPU + 1
    out = tmp_path / "p"
    proc = subprocess.run(
        [sys.executable, "-m", "lab.point", "gil", "--mode", "threads", "--workers", str(workers)]
        + ["--max-oversubscription", "2", "--out", str(out), "--baseline", "mode=sequential"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.returncode == 0, proc.stderr
    m = pd.read_csv(out / "metrics.csv")
    assert list(m["status"]) == ["skipped"] and list(m["role"]) == ["point"]
    assert m["reason"].iloc[0] == (
        f"asks for {workers} CPUs at once but this host has {NCPU} available; max_oversubscription 2 "
        f"allows up to {2 * NCPU}"
    )
    assert (out / "job.json").exists() and len(pd.read_csv(out / "samples.csv")) == 0


def test_sampler_is_unbiased_on_one_cpu(tmp_path):
    """On one CPU a busy loop fills whole 10 ms ticks: a 25 ms interval reads 80% or 120%. The
    sampler used to clip 120% to 100% and read 89% for a loop the kernel gave 97%; carrying the
    excess into the next interval keeps its mean on the kernel's CPU time."""
    first = min(os.sched_getaffinity(0))
    out = tmp_path / "sc"
    proc = subprocess.run(
        [sys.executable, "-m", "lab.selfcheck", "--load", "busy", "--repeats", "3"]
        + ["--duration-s", "0.5", "--sample-hz", "40", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
        preexec_fn=lambda: os.sched_setaffinity(0, {first}),
    )
    assert proc.returncode == 0, proc.stderr
    m = pd.read_csv(out / "metrics.csv")
    assert (m["available_cpus"] == 1).all() and len(m) == 3
    gap = (m["sampler_tree_pct"] - m["process_cpu_pct"]).abs()
    assert gap.median() <= 3, m[["sampler_tree_pct", "process_cpu_pct"]]


def test_a_point_without_its_declared_metric_or_with_an_undeclared_column_is_refused_before_any_file():
    """A run() whose rows lack the declared metric column, or hold a column nobody declared,
    fails the job at once, naming the columns, instead of an analysis error after every point
    was measured (or a column no document describes)."""
    from dataclasses import dataclass

    from lab.params import Declared, param
    from lab.results import RunResult, check_rows

    @dataclass(frozen=True)
    class Params(Declared):
        size_kb: int = param(64, min=1, help="block size", unit="KiB")

    declared = {"mb_per_s": None}
    rows = [{"repeat": 0, "role": "point", "status": "ok", "wall_s": 0.1, "mb_per_sec": 5.0}]
    with pytest.raises(ValueError, match="without the declared metric column 'mb_per_s'.*mb_per_sec"):
        check_rows("hashers", RunResult(rows=rows), Params, "mb_per_s", declared)
    ok = {"repeat": 0, "role": "point", "status": "ok", "wall_s": 0.1, "mb_per_s": 5.0, "size_kb": 64, "worker": 0}
    ok["delivered_cpus"] = 1.9
    check_rows("hashers", RunResult(rows=[ok]), Params, "mb_per_s", declared)  # parameters and the lab's own
    with pytest.raises(ValueError, match=r"undeclared columns \(spare\); declare each in EXPERIMENT.columns"):
        check_rows("hashers", RunResult(rows=[ok | {"spare": 1}]), Params, "mb_per_s", declared)
    check_rows("hashers", RunResult.skipped("asks for too many CPUs"), Params, "mb_per_s", declared)  # not measured


def test_only_a_fork_runner_runs_warm_up_epochs_and_a_forkserver_runner_starts_its_server(monkeypatch):
    """Spawn keeps nothing warm between epochs (new interpreters every epoch) and forkserver
    keeps only its server, which its runner starts directly: an epoch would have its workers
    import torch (3 s of a job before its first window). Fork runs its warm-up epochs."""
    import multiprocessing.forkserver

    from experiments.startmethod import measure

    calls, servers = [], []

    def epoch(self):
        calls.append(self.params.start_method)
        return measure.Epoch(0.0, [0.001, 0.002], 0.003)

    monkeypatch.setattr(measure.Runner, "epoch", epoch)
    monkeypatch.setattr(multiprocessing.forkserver, "ensure_running", lambda: servers.append(1))
    for method in ("fork", "spawn", "forkserver"):
        measure.Runner(measure.Params(start_method=method, warmup_epochs=2, batches=10), meter=None)
    assert calls == ["fork", "fork"]
    assert servers == [1]
    assert measure.warmup_epochs(measure.Params(start_method="forkserver", warmup_epochs=3)) == 0


def test_a_dataloader_warm_up_epoch_is_short_and_the_measured_ones_whole():
    """The warm-up epoch stops after 2 batches per worker (it starts them; a whole epoch of the
    io data was 13 s of the default run outside windows) and ends as an epoch does, so the
    measured epochs that follow see every item, in RandomSampler's order for the same seed."""
    import torch
    from torch.utils.data import RandomSampler

    p = dataloader.Params(dataset="tensor", num_workers=2, items=320, batch_size=32, repeats=1)
    none = dataloader.Params(**{**p.__dict__, "num_workers": 0})
    assert dataloader.warmup_batches(p) == 4 and dataloader.warmup_batches(none) == 2
    sampler = dataloader.WarmupSampler(320, torch.Generator().manual_seed(0))
    same = list(RandomSampler(range(320), generator=torch.Generator().manual_seed(0)))
    sampler.limit = 4 * 32
    assert len(sampler) == 128 and list(sampler) == same[:128]
    sampler.limit = None
    assert len(sampler) == 320 and sorted(sampler) == list(range(320))
    row = dataloader.run(p).rows[0]  # after the short warm-up, the measured epoch has all 10 batches
    assert row["batches_per_s"] * row["wall_s"] == pytest.approx(10)
    assert row["samples_per_s"] * row["wall_s"] == pytest.approx(320)
