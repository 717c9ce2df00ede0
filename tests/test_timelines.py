"""Timelines, per-core heatmaps, the job schedule and their Chrome trace export, on fixture
data with known values."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from analysis import hooks, schedule, timelines
from analysis.__main__ import main as analysis_main
from analysis.figures import all_figures, drawing
from analysis.runinfo import job_intervals, job_label, run_timing, vm_events
from analysis.trace import experiment_trace, jobs_trace, validate_trace
from lab import registry


def _summary(experiment: str, rows: list[dict]) -> pd.DataFrame:
    base = {"status": "ok", "best": False, "speedup": np.nan}
    return pd.DataFrame([{**base, **r} for r in rows]).assign(experiment=experiment)


def _gil_data():
    """Two CPU-bound threads sharing the GIL: each on CPU half of every 0.1 s chunk."""
    spans, samples = [], []
    for mode, actors in (("sequential", ["main"]), ("threads", ["thread-0", "thread-1"])):
        for a in actors:
            for k in range(4):
                share = 1.0 if mode == "sequential" else 0.5
                spans.append(
                    {
                        "interpreter": "default",
                        "workload": "cpu",
                        "mode": mode,
                        "workers": 2,
                        "repeat": 0,
                        "role": "point",
                        "actor": a,
                        "kind": "cpu",
                        "start_s": 0.1 * k,
                        "end_s": 0.1 * k + 0.1,
                        "cpu_s": 0.1 * share,
                        "chunk": k,
                    }
                )
        for t in (0.1, 0.2, 0.3, 0.4):
            for series, v in (("tree", 50.0), ("system", 55.0), ("cpu0", 100.0), ("cpu1", 10.0)):
                samples.append(
                    {
                        "interpreter": "default",
                        "workload": "cpu",
                        "mode": mode,
                        "workers": 2,
                        "repeat": 0,
                        "role": "point",
                        "t_s": t,
                        "series": series,
                        "busy_pct": v,
                    }
                )
    # a baseline window and a later repeat that the charts must not pick
    spans.append({**spans[0], "role": "baseline", "actor": "main", "start_s": 5.0, "end_s": 6.0})
    spans.append({**spans[0], "repeat": 1, "start_s": 7.0, "end_s": 8.0})
    summary = _summary("gil", [{"workload": "cpu", "mode": m, "workers": 2} for m in ("threads", "sequential")])
    return pd.DataFrame(spans), pd.DataFrame(samples), summary


def test_timeline_points_per_experiment():
    gil = _summary(
        "gil",
        [
            {"interpreter": "default", "workload": w, "mode": m, "workers": n}
            for w in ("io", "cpu")
            for m in ("processes", "sequential")
            for n in (4, 2)
        ],
    )
    assert hooks.timeline_points("gil", gil) == [
        {"interpreter": "default", "workload": "cpu", "mode": "sequential", "workers": 2},
        {"interpreter": "default", "workload": "cpu", "mode": "processes", "workers": 2},
    ]
    mp = _summary(
        "multiprocessing",
        [
            {"processes": 1, "threads": 1, "omp_wait_policy": "default"},
            {"processes": 2, "threads": 1, "omp_wait_policy": "default", "best": True},
            {"processes": 2, "threads": 2, "omp_wait_policy": "default"},
            {"processes": 4, "threads": 2, "omp_wait_policy": "default", "status": "failed"},  # not ok: never chosen
            {"processes": 1, "threads": 1, "omp_wait_policy": "passive"},
            {"processes": 2, "threads": 1, "omp_wait_policy": "passive", "best": True},
            {"processes": 2, "threads": 2, "omp_wait_policy": "passive"},
        ],
    )
    # the default policy's 1 x 1, best and most threads, then the most threads under passive
    assert hooks.timeline_points("multiprocessing", mp) == [
        {"processes": 1, "threads": 1, "omp_wait_policy": "default"},
        {"processes": 2, "threads": 1, "omp_wait_policy": "default"},
        {"processes": 2, "threads": 2, "omp_wait_policy": "default"},
        {"processes": 2, "threads": 2, "omp_wait_policy": "passive"},
    ]
    dl = _summary(
        "dataloader",
        [
            {"dataset": "io", "num_workers": 0, "speedup": 1.0},
            {"dataset": "io", "num_workers": 2, "speedup": 1.9},
            {"dataset": "io", "num_workers": 4, "speedup": 3.5},
            {"dataset": "tensor", "num_workers": 0, "speedup": 1.0},
            {"dataset": "tensor", "num_workers": 2, "speedup": 0.3},
            {"dataset": "tensor", "num_workers": 4, "speedup": 0.2},
        ],
    )
    assert hooks.timeline_points("dataloader", dl) == [
        {"dataset": "tensor", "num_workers": 0},
        {"dataset": "tensor", "num_workers": 2},
        {"dataset": "io", "num_workers": 0},
        {"dataset": "io", "num_workers": 4},
    ]
    with_timelines = ", ".join(n for n, e in registry.experiments().items() if e.spec.timeline)
    with pytest.raises(ValueError, match=f"intraop.*timelines exist for {with_timelines}$"):
        hooks.timeline_points("intraop", dl)


def test_window_selects_repeat_zero_of_the_point_role():
    spans, samples, _ = _gil_data()
    sp, sa = timelines.window(spans, samples, {"workload": "cpu", "mode": "sequential", "workers": 2})
    assert len(sp) == 4 and sp["end_s"].max() == pytest.approx(0.4)
    assert set(sa["series"]) == {"tree", "system", "cpu0", "cpu1"} and len(sa) == 16


def test_timeline_and_heatmap_draw_the_chosen_windows():
    spans, samples, summary = _gil_data()
    fig = timelines.timeline(
        "gil", spans, samples, summary, {"available_cpus": 2}, hooks.timeline_points("gil", summary)
    )
    titles = [sf._suptitle.get_text() for sf in fig.subfigs[1:]]
    assert titles == [
        "interpreter=default workload=cpu mode=sequential workers=2: window of 0.4 s (median of 2 rounds),"
        " 4 CPU samples in means over 0.1 s",
        "interpreter=default workload=cpu mode=threads workers=2: window of 0.4 s, 4 CPU samples in means over 0.1 s",
    ]
    gantt = fig.subfigs[2].axes[0]
    assert [t.get_text() for t in gantt.get_yticklabels()] == ["thread-0", "thread-1"]
    # per thread 4 light wall bars + 4 dark fills whose height is half the bar: on CPU 50%
    from matplotlib.collections import LineCollection, PolyCollection

    fills = [c for c in gantt.collections if c.get_alpha() is None and isinstance(c, PolyCollection)]
    heights = {round(path.get_extents().height, 6) for c in fills for path in c.get_paths()}
    assert heights == {0.4}
    # each span after a row's first starts with a thin line: 3 per thread of 4 back-to-back spans
    marks = [c for c in gantt.collections if isinstance(c, LineCollection)]
    assert sorted(len(c.get_segments()) for c in marks) == [3, 3]
    util = fig.subfigs[2].axes[1]
    assert util.get_xlim()[1] == pytest.approx(0.404)  # same time axis as the Gantt rows
    heat = timelines.core_heatmap("gil", samples, summary, {"available_cpus": 2}, hooks.timeline_points("gil", summary))
    mesh = heat.axes[0].collections[0]
    assert mesh.get_array().reshape(2, -1)[:, 0].tolist() == [100.0, 10.0]  # cpu0 row, cpu1 row


def test_util_bins_merge_samples_into_means_over_a_tenth_of_a_second():
    # 25 ms samples of one process whose 10 ms ticks fall 2, 3, 2, 3 ... into them: 40% and 60%
    t = [0.025 * (i + 1) for i in range(9)]
    s = pd.DataFrame({"t_s": t, "busy_pct": [40.0, 60.0] * 4 + [80.0]})
    edges, busy = timelines.util_bins(s)
    # the 25 ms left at the end (under half a bin) join the bin before: it ends at the last sample
    assert edges == pytest.approx([0.0, 0.1, 0.225])
    assert busy == pytest.approx([50.0, (0.1 * 50.0 + 0.025 * 80.0) / 0.125])
    # 60 ms left at the end (over half a bin) are a bin of their own
    edges, busy = timelines.util_bins(pd.DataFrame({"t_s": [0.05, 0.1, 0.13, 0.16], "busy_pct": [50.0, 50, 90, 70]}))
    assert edges == pytest.approx([0.0, 0.1, 0.16]) and busy == pytest.approx([50.0, 80.0])
    # uneven intervals weigh by their length: CPU time over the bin / its length
    edges, busy = timelines.util_bins(pd.DataFrame({"t_s": [0.02, 0.12], "busy_pct": [100.0, 0.0]}))
    assert edges == pytest.approx([0.0, 0.12]) and busy == pytest.approx([100 * 0.02 / 0.12])


def test_utilisation_strip_shows_both_lines_where_they_are_equal():
    # every busy CPU is the job's: the two series read the same, and both must still show (the
    # job's line once vanished under the machine's, drawn after it, and seemed to end early)
    t = [0.05, 0.1, 0.15, 0.2]
    sa = pd.concat(
        [pd.DataFrame({"t_s": t, "busy_pct": [50.0] * 4, "series": series}) for series in ("tree", "system")]
    )
    ax = Figure().subplots()
    timelines._utilisation(ax, sa, 2)
    system, tree = ax.patches  # drawing order: the machine beneath, the job's processes on top
    assert system.get_label() == "CPU busy: whole machine" and tree.get_label() == "CPU busy: this job's processes"
    assert system.get_linewidth() > 2 * tree.get_linewidth()  # the wide line shows either side of the narrow one
    assert list(system.get_data().values) == list(tree.get_data().values) == [50.0, 50.0]


def test_job_intervals_phases_and_windows():
    jobs = [
        {
            "experiment": "gil",
            "job_start_unix": 100.0,
            "lock_wait_s": 1.0,
            "lock_acquired_unix": 102.0,
            "lock_released_unix": 110.0,
            "job_end_unix": 110.5,
        },
        {
            "experiment": "selfcheck",
            "job_start_unix": 90.0,
            "lock_wait_s": 0.0,
            "lock_acquired_unix": 90.5,
            "lock_released_unix": 95.0,
            "job_end_unix": 95.2,
        },
    ]
    metrics = [
        pd.DataFrame({"window_start_unix": [103.0, 105.0], "window_end_unix": [104.0, 106.5]}),
        pd.DataFrame({"window_start_unix": [91.0], "window_end_unix": [92.0]}),
    ]
    labels = [job_label("results/h/gil/workload~cpu/mode~threads/job.json"), job_label("results/h/selfcheck/job.json")]
    assert labels == ["gil workload=cpu mode=threads", "selfcheck"]
    t = job_intervals(labels, jobs, metrics)
    assert t["job"].tolist()[0] == "selfcheck"  # ordered by start
    g = t[t["job"] == labels[0]].set_index("phase")
    assert g.loc["startup", ["start_unix", "end_unix"]].tolist() == [100.0, 101.0]
    assert g.loc["lock_wait", ["start_unix", "end_unix"]].tolist() == [101.0, 102.0]
    assert g.loc["run", ["start_unix", "end_unix"]].tolist() == [102.0, 110.0]
    assert g.loc["write", "end_unix"] == 110.5
    assert (g.loc["window", "end_unix"] - g.loc["window", "start_unix"]).tolist() == [1.0, 1.5]
    assert "lock_wait" not in set(t[t["job"] == "selfcheck"]["phase"])  # zero-length phases dropped
    with pytest.raises(ValueError, match="need one each"):
        job_intervals(labels, jobs, metrics[:1])
    fig = schedule.job_schedule(t, {"host": "h"})
    # phase 90.0-110.5 s; windows 3.5 s = 17%; jobs busy 10.5 + 5.2 s, so 4.8 s between them
    title = "2 measurement jobs in 20 s: 17% inside measured windows, 5 s between jobs"
    assert fig.axes[0].get_title(loc="left") == title
    # the host facts collected before the first job: the phase starts there, as run.json's does
    fig = schedule.job_schedule(t, {"host": "h", "collected_unix": 80.0})
    later = "2 measurement jobs in 30 s: 11% inside measured windows, 15 s between jobs"
    assert fig.axes[0].get_title(loc="left") == later
    assert run_timing(jobs, metrics, {"collected_unix": 80.0})["measurement_phase_s"] == 30.5
    trace = jobs_trace(t, "h")
    assert validate_trace(trace) == len(t) + 1 + 2 * 2  # events + process name + 2 metadata per job


def test_experiment_trace_is_valid_and_exact():
    spans, samples, _ = _gil_data()
    trace = experiment_trace("gil", spans, samples)
    n = validate_trace(trace)
    ev = trace["traceEvents"]
    x = [e for e in ev if e["ph"] == "X"]
    assert len(x) == 12  # 4 sequential + 8 threads spans; baseline and repeat 1 left out
    first = next(e for e in x if e["args"]["chunk"] == 1 and e["pid"] == 1)
    assert first["ts"] == pytest.approx(100_000) and first["dur"] == pytest.approx(100_000)  # microseconds
    assert first["args"]["cpu_s"] == pytest.approx(0.1)
    names = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {
        (1, "gil interpreter=default workload=cpu mode=sequential workers=2"),
        (2, "gil interpreter=default workload=cpu mode=threads workers=2"),
    }
    counters = [e for e in ev if e["ph"] == "C" and e["name"] == "CPU busy %"]
    assert len(counters) == 8 and counters[0]["args"] == {"tree": 50.0, "system": 55.0}
    assert n == len(ev)
    json.dumps(trace, allow_nan=False)  # strict JSON: no NaN


@pytest.mark.parametrize(
    "event, message",
    [
        ({"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0}, "missing \\['dur'\\]"),
        ({"ph": "X", "name": "a", "pid": "1", "tid": 1, "ts": 0, "dur": 1}, "pid must be an integer"),
        ({"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": -1, "dur": 1}, "ts must be a finite number >= 0"),
        ({"ph": "C", "name": "c", "pid": 1, "ts": 0, "args": {"v": float("nan")}}, "counter values"),
        ({"ph": "B", "name": "a", "pid": 1, "tid": 1, "ts": 0}, "ph 'B' is not one of"),
        ({"ph": "M", "name": "process_name", "pid": 1, "args": {}}, "metadata needs"),
    ],
)
def test_validate_trace_rejects_bad_events(event, message):
    with pytest.raises(ValueError, match=message):
        validate_trace({"traceEvents": [event]})
    with pytest.raises(ValueError, match="traceEvents"):
        validate_trace([event])


def _vm_jobs(event_unix: float | None, read: bool = True) -> list[dict]:
    """Three job.json records that each read the kernel log (``read``) and saw the VM fork at
    ``event_unix`` (seconds apart on their clocks), or could not read it."""
    if not read:
        return [{"capacity": {"vm_events": [], "unreadable": {"vm_events": "no readable /dev/kmsg (EPERM)"}}}] * 3
    events = [] if event_unix is None else [{"unix": event_unix + d, "event": "VM fork (vmgenid)"} for d in (0.0,)]
    return [
        {"capacity": {"vm_events": [dict(e, unix=e["unix"] + 0.3 * i) for e in events], "unreadable": {}}}
        for i in range(3)
    ]


def test_a_vm_fork_splits_the_runs_capacity_into_before_and_after():
    from report.trust import capacity_paragraph, capacity_rows

    cap = pd.DataFrame(
        {"start_unix": [100.0, 110.0, 120.0, 150.0, 160.0], "capacity_1cpu_per_s": [60e6, 62e6, 61e6, 67e6, 68e6]}
    )
    vm = vm_events(_vm_jobs(140.0), cap, 95.0, 170.0)
    assert vm["unreadable"] == "" and len(vm["events"]) == 1  # three readings of one record
    e = vm["events"][0]
    assert e["at_s"] == pytest.approx(45.0) and e["single_before"] == 61e6 and e["single_after"] == 67.5e6
    text = capacity_paragraph({}, vm)
    assert "45 s into the measurement phase" in text and "61.0 M" in text and "67.5 M/s after it (+11%)" in text
    row = dict(capacity_rows({}, {"vm_events": vm}))["The VM restored from a snapshot or cloned (kernel log)"]
    assert row == "45 s into the measurement phase: VM fork (vmgenid)"
    # outside the phase: none; no job could read the log: its reason; job.json from before: said so
    assert vm_events(_vm_jobs(40.0), cap, 95.0, 170.0) == {"events": [], "unreadable": ""}
    assert "EPERM" in vm_events(_vm_jobs(None, read=False), cap, 95.0, 170.0)["unreadable"]
    assert "not recorded" in vm_events([{"capacity": {}}], cap, 95.0, 170.0)["unreadable"]
    assert capacity_paragraph({}, vm_events(_vm_jobs(None), cap, 95.0, 170.0)) == ""
    old = dict(capacity_rows({}, {}))["The VM restored from a snapshot or cloned (kernel log)"]
    assert old.startswith("unreadable: not recorded")  # a run.json from before the lab read the log
    # the chart marks it where it happened: minutes after the first job's window
    full = cap.assign(delivered_cpus=2.0, available_cpus=2, experiment="gil", probe_s=0.1)
    fig = schedule.run_capacity(full, {}, {"vm_events": vm})
    marks = [
        ln.get_xdata()[0]
        for ax in fig.axes
        for ln in ax.lines
        if ln.get_linestyle() == "--" and ln.get_color() == "#D55E00"
    ]
    assert marks == [pytest.approx(40.0 / 60)] * 2


def test_every_figure_has_a_drawing_function():
    from analysis.figures import HOST_FIGURES

    assert all(callable(drawing(name)) for name in all_figures() if name not in HOST_FIGURES)
    assert all(callable(draw) for draw, _ in HOST_FIGURES.values())
    assert isinstance(schedule.job_schedule(pd.DataFrame(columns=["job"]), {}), Figure)


def test_cli_trace_and_stall_figure(tmp_path):
    spans, samples, summary = _gil_data()
    host = tmp_path / "host"
    (host / "gil").mkdir(parents=True)
    spans.to_csv(host / "gil" / "spans.csv", index=False)
    samples.to_csv(host / "gil" / "samples.csv", index=False)
    out = host / "traces" / "gil.json"
    out.parent.mkdir()
    assert analysis_main(["trace", "gil", "--host-dir", str(host), "--out", str(out)]) == 0
    assert validate_trace(json.loads(out.read_text())) > 12
    dl = _summary(
        "dataloader",
        [
            {
                "dataset": "io",
                "num_workers": nw,
                "data_stall_pct": v,
                "data_stall_pct_ci_low": v - 2,
                "data_stall_pct_ci_high": v + 3,
            }
            for nw, v in ((0, 95.0), (2, 40.0))
        ],
    )
    from lab.contract import Context

    fig = drawing("dataloader_stall")(Context({"available_cpus": 2}, summary=dl))
    line = fig.axes[0].lines[0]
    assert line.get_ydata().tolist() == [95.0, 40.0]


@pytest.mark.parametrize("experiment", ["gil", "multiprocessing", "dataloader"])
def test_charts_draw_a_placeholder_when_no_point_completed(experiment):
    keys = {
        "gil": {"workload": "cpu", "mode": "threads", "workers": 2},
        "multiprocessing": {"processes": 1, "threads": 1, "omp_wait_policy": "default"},
        "dataloader": {"dataset": "io", "num_workers": 0},
    }[experiment]
    summary = _summary(experiment, [{**keys, "status": "failed"}])
    empty = pd.DataFrame(columns=[*keys, "repeat", "role", "actor", "kind", "start_s", "end_s"])
    points = hooks.timeline_points(experiment, summary)
    for fig in (
        timelines.timeline(experiment, empty, empty, summary, {"available_cpus": 2}, points),
        timelines.core_heatmap(experiment, empty, summary, {"available_cpus": 2}, points),
    ):
        assert "no point of" in fig.axes[0].texts[0].get_text()


def test_timelines_draw_the_round_of_median_length():
    from analysis.timelines import median_repeat

    rows = [
        {"workload": "cpu", "repeat": r, "role": "point", "t_s": t, "series": "tree", "busy_pct": 50.0}
        for r, end in ((0, 0.5), (1, 0.1), (2, 0.3))
        for t in (end / 2, end)
    ]
    samples = pd.DataFrame(rows)
    assert median_repeat(samples, {"workload": "cpu"}) == (2, 3)  # 0.1, 0.3, 0.5: the 0.3 s round
    more = pd.concat([samples, samples[samples["repeat"] == 1].assign(repeat=3, t_s=[0.1, 0.2])])
    assert median_repeat(more, {"workload": "cpu"}) == (3, 4)  # the lower median of 0.1, 0.2, 0.3, 0.5
    assert median_repeat(samples, {"workload": "io"}) == (0, 0)
    # rounds with spans are the candidates where only some have them (the workload's epoch)
    spans = pd.DataFrame([{"workload": "cpu", "repeat": 0, "role": "point", "start_s": 0.0, "end_s": 0.5}])
    assert median_repeat(samples, {"workload": "cpu"}, spans=spans) == (0, 1)
    assert median_repeat(samples.iloc[0:0], {"workload": "cpu"}, spans=pd.DataFrame()) == (0, 0)
