"""Analysis on fixture CSVs with known answers, and refusal of malformed input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import gil_fixture, write_point

from analysis.__main__ import main as analysis_main
from analysis.hooks import findings
from analysis.load import DataError, load_experiment
from analysis.stats import median_ci, ratio_ci, summarise


def test_summary_known_values(tmp_path):
    reps = load_experiment(gil_fixture(tmp_path), "gil")
    s = summarise(reps, "gil").set_index(["workload", "mode"])
    seq = s.loc[("cpu", "sequential")]
    assert seq["n"] == 4
    assert seq["median"] == pytest.approx(2.5)
    assert seq["q1"] == pytest.approx(1.75)  # numpy linear interpolation of 1,2,3,4
    assert seq["q3"] == pytest.approx(3.25)
    assert seq["iqr_pct"] == pytest.approx(60.0)
    assert bool(seq["noisy"]) is True
    assert s.loc[("cpu", "threads"), "speedup"] == pytest.approx(1.0)
    assert s.loc[("cpu", "processes"), "speedup"] == pytest.approx(2.0)
    assert s.loc[("cpu", "processes"), "parallel_efficiency"] == pytest.approx(1.0)
    assert s.loc[("cpu", "sequential"), "parallel_efficiency"] == pytest.approx(1.0)
    assert s.loc[("io", "threads"), "speedup"] == pytest.approx(2.0)
    assert bool(s.loc[("cpu", "processes"), "best"]) is True
    assert bool(s.loc[("cpu", "threads"), "best"]) is False
    assert bool(s.loc[("cpu", "threads"), "noisy"]) is False
    # the CI of a ratio of constants over 1..4 brackets the point estimate
    lo, hi = s.loc[("cpu", "processes"), ["speedup_ci_low", "speedup_ci_high"]]
    assert lo <= 2.0 <= hi
    assert lo >= 5 / 4 - 1e-9 and hi <= 5 / 1 + 1e-9


def test_intervals():
    x = np.array([10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0])
    assert median_ci(x) == (10.0, 16.0)  # 7 values: [min, max] covers 98.4%, [x2, x6] only 87.5%
    assert median_ci(np.append(x, [17.0, 18.0])) == (11.0, 17.0)  # 9 values: [x2, x8], 96.1%
    for n in (1, 3, 5):  # no pair of order statistics covers 95%
        assert all(np.isnan(median_ci(np.arange(1.0, n + 1))))
    assert median_ci(np.array([2.0] * 6)) == (2.0, 2.0)
    lo, hi = ratio_ci(x * 2, x)
    assert lo < 2.0 < hi or lo == hi == 2.0


def test_findings_numbers_come_from_data(tmp_path):
    s = summarise(load_experiment(gil_fixture(tmp_path), "gil"), "gil")
    f = findings("gil", s, {"available_cpus": 2})
    text = " ".join(f["findings"])
    assert "2 threads gave 1.00x" in text
    assert "2 processes gave 2.00x" in text
    (seed,) = f["tables"]  # the seed article's timings beside this machine's ratios
    assert seed["columns"][1] == "seed article (4-core Intel i5-4460, Python 3.5), 2 tasks"
    rows = {r[0]: r for r in seed["rows"]}
    assert rows["cpu"][1] == "71.47 s vs 72.08 s = 0.99x"  # 71.47 / 72.08
    assert rows["io"][1] == "42.10 s vs 22.01 s = 1.91x"
    assert rows["io"][2].startswith("2.00x")  # this fixture's io threads over sequential


def test_dataloader_best_point_not_assumed_monotonic(tmp_path):
    paths = []
    for nw, sps in {0: 2000.0, 1: 400.0, 2: 600.0}.items():
        rows = [{"wall_s": 1.0, "samples_per_s": sps, "data_stall_pct": 10.0, "first_epoch_s": 1.0}] * 6
        paths.append(write_point(tmp_path, "dataloader", {"dataset": "tensor", "num_workers": nw}, rows))
    s = summarise(load_experiment(paths, "dataloader"), "dataloader")
    assert s.loc[s["best"], "num_workers"].tolist() == [0]
    text = " ".join(findings("dataloader", s, {"available_cpus": 2})["findings"])
    assert "best num_workers = 0" in text
    assert "More workers were slower (num_workers = 1: 0.20x (95% CI 0.20-0.20))" in text


def test_intraop_metric_per_workload(tmp_path):
    paths = [
        write_point(
            tmp_path,
            "intraop",
            {"workload": "matmul", "threads": t},
            [{"wall_s": 1, "gflop_per_s": g, "samples_per_s": ""}] * 2,
        )
        for t, g in ((1, 50.0), (2, 90.0))
    ]
    s = summarise(load_experiment(paths, "intraop"), "intraop")
    assert set(s["metric"]) == {"gflop_per_s"}
    row = s[s["threads"] == 2].iloc[0]
    assert row["speedup"] == pytest.approx(1.8)
    assert row["parallel_efficiency"] == pytest.approx(0.9)


def test_a_thread_count_whose_work_kept_one_cpu_busy_says_so(tmp_path):
    """Measured cause of a 50% parallel efficiency: the 2-thread point's windows kept 1 CPU
    of 2 busy (cpu_util_pct 50), so its work ran on fewer threads than it was given; a point
    that kept both busy gets no such note, nor does one whose idle CPU something else measured
    explains (another process took it, or the probe saw fewer cores delivered)."""

    def point(workload, t, g, util, **extra):
        row = {"wall_s": 1, "gflop_per_s": g, "samples_per_s": "", "cpu_util_pct": util, **extra}
        return write_point(tmp_path, "intraop", {"workload": workload, "threads": t}, [row] * 2)

    def bf16_finding(**extra):
        paths = [point("matmul_bf16", 1, 1200.0, 50.0), point("matmul_bf16", 2, 1210.0, 50.2, **extra)]
        paths += [point("matmul", 1, 160.0, 50.0), point("matmul", 2, 310.0, 97.0)]
        s = summarise(load_experiment(paths, "intraop"), "intraop")
        return findings("intraop", s, {"available_cpus": 2})["findings"][:2]

    fp32, bf16 = bf16_finding()
    assert "parallel efficiency 50%: its windows kept 1.00 CPUs busy of the 2 its threads could use" in bf16
    assert "parallel efficiency 97%" in fp32 and "kept" not in fp32
    other = {"interference_pct": 95.0, "top_other": "stress", "top_other_pid": 7, "top_other_cpu_pct": 95.0}
    for extra in (other, {"cpus_delivered": 1.2}):
        bf16 = bf16_finding(**extra)[1]
        assert "parallel efficiency 50%" in bf16 and "kept" not in bf16, extra


def test_bf16_findings_and_a_skipped_workload_panel(tmp_path):
    from experiments.intraop.analysis import intraop_scaling
    from lab.contract import Context

    def point(workload, t, g, **extra):
        row = {"wall_s": 1, "gflop_per_s": g, "samples_per_s": "", **extra}
        return write_point(tmp_path, "intraop", {"workload": workload, "threads": t}, [row] * 2)

    reason = "no native bfloat16 on this CPU (avx512_bf16: no, amx_tile: no)"
    skipped = [point("matmul_bf16", t, "", status="skipped", reason=reason, wall_s="") for t in (1, 2)]
    fp32 = [point("matmul", t, g) for t, g in ((1, 50.0), (2, 90.0))]
    s = summarise(load_experiment(fp32 + skipped, "intraop"), "intraop")
    text = " ".join(findings("intraop", s, {"available_cpus": 2})["findings"])
    assert f"matmul_bf16: not measured (skipped): {reason}." in text
    bf16 = s[s["workload"] == "matmul_bf16"]
    assert not bf16["best"].any() and (bf16["speedup_source"].fillna("") == "").all()  # nothing measured or claimed
    assert "bfloat16 over float32" not in text
    fig = intraop_scaling(Context({"available_cpus": 2}, summary=s))
    panel = fig.axes[1]
    assert panel.get_title() == "n x n matmul, bfloat16" and "not measured: skipped" in panel.texts[0].get_text()
    measured = [point("matmul_bf16", t, g) for t, g in ((1, 150.0), (2, 270.0))]
    s = summarise(load_experiment(fp32 + measured, "intraop"), "intraop")
    text = " ".join(findings("intraop", s, {"available_cpus": 2})["findings"])
    # best of each: 270 / 90 GFLOP/s
    assert "bfloat16 over float32 matmul, each at its best thread count: 3.00x (270 GFLOP/s against 90 GFLOP/s;" in text


@pytest.mark.parametrize(
    "content, expected",
    [
        ("", "file is empty"),
        ("host,experiment,workload,mode,workers,repeat,status,wall_s,cpu_util_pct,tasks_per_s\n", "no rows"),
        (
            "host,experiment,workload,mode,repeat,status,wall_s,cpu_util_pct,tasks_per_s\nh,gil,cpu,threads,0,ok,1,50,2\n",
            "column 'workers'",
        ),
        (
            "host,experiment,workload,mode,workers,repeat,status,wall_s,cpu_util_pct,tasks_per_s\n"
            "h,gil,cpu,threads,2,0,ok,1,50,2\nh,gil,cpu,threads,2,1,ok,abc,50,2\n",
            "row 2, column 'wall_s': non-numeric value 'abc'",
        ),
        (
            "host,experiment,workload,mode,workers,repeat,status,wall_s,cpu_util_pct,tasks_per_s\n"
            "h,gil,cpu,threads,2,0,ok,1,50,\n",
            "row 1, column 'tasks_per_s': NaN",
        ),
        (
            "host,experiment,workload,mode,workers,repeat,status,wall_s,cpu_util_pct,tasks_per_s\n"
            "h,gil,cpu,threads,2,0,ok,1,50,2\nh,gil,cpu,threads,2,0,ok,1,50,2\n",
            "row 2, column 'repeat': duplicated replicate",
        ),
        (
            "host,experiment,workload,mode,workers,repeat,status,wall_s,cpu_util_pct,tasks_per_s\n"
            "h,gil,cpu,threads,2,0,weird,1,50,2\n",
            "row 1, column 'status'",
        ),
    ],
)
def test_malformed_input_is_refused_with_file_row_column(tmp_path, content, expected):
    path = tmp_path / "metrics.csv"
    path.write_text(content)
    with pytest.raises(DataError) as err:
        load_experiment([path], "gil")
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_cli_summarise_and_figures(tmp_path, capsys):
    paths = gil_fixture(tmp_path / "in")
    spans = pd.DataFrame(
        [
            {
                "repeat": 0,
                "actor": f"thread-{i}",
                "kind": "cpu",
                "start_s": 0.1 * k,
                "end_s": 0.1 * k + 0.1,
                "cpu_s": 0.05,
                "chunk": k,
                "task": i,
            }
            for i in range(2)
            for k in range(5)
        ]
    )
    for p in paths:
        spans.to_csv(p.with_name("spans.csv"), index=False)
    host = tmp_path / "host.json"
    host.write_text(json.dumps({"available_cpus": 2}))
    out = tmp_path / "out"
    assert (
        analysis_main(
            ["summarise", "--experiment", "gil", "--out-dir", str(out), "--host-json", str(host), *map(str, paths)]
        )
        == 0
    )
    for name in ("replicates.csv", "summary.csv", "spans.csv", "samples.csv", "findings.json"):
        assert (out / name).exists(), name
    assert len(pd.read_csv(out / "replicates.csv")) == 24
    assert {"workload", "mode", "workers", "actor"} <= set(pd.read_csv(out / "spans.csv").columns)
    (tmp_path / "gil").symlink_to(out)
    for fig in ("gil_speedup", "gil_timeline", "gil_cores"):
        png = tmp_path / f"{fig}.png"
        assert analysis_main(["figure", fig, "--host-dir", str(tmp_path), "--out", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "bad.csv"
    bad.write_text("")
    assert analysis_main(["summarise", "--experiment", "gil", "--out-dir", str(out), str(bad)]) == 1
    assert f"{bad}: file is empty" in capsys.readouterr().err
    # a point's spans.csv of 0 bytes was cut (the lab writes its header always): named, not read as no spans
    paths[0].with_name("spans.csv").write_text("")
    summary_before = (out / "summary.csv").read_bytes()
    argv = ["summarise", "--experiment", "gil", "--out-dir", str(out), "--host-json", str(host), *map(str, paths)]
    assert analysis_main(argv) == 1
    assert f"{paths[0].with_name('spans.csv')}: file is empty" in capsys.readouterr().err
    assert (out / "summary.csv").read_bytes() == summary_before  # nothing written over


def test_every_figure_of_an_experiment_with_no_point_measured_says_why(tmp_path):
    """Every point skipped (here: more CPUs asked than max_oversubscription allows): each of the
    experiment's figures is a panel with the status and the reason, not a failed job."""
    from lab import registry

    why = "asks for 100000000 CPUs at once but this host has 2 available; max_oversubscription 4 allows up to 8"
    skipped = [{"status": "skipped", "reason": why, "wall_s": "", "tasks_per_s": ""}]
    point = write_point(tmp_path / "in", "gil", {"workload": "io", "mode": "threads", "workers": 100000000}, skipped)
    host = tmp_path / "host.json"
    host.write_text(json.dumps({"available_cpus": 2}))
    args = ["summarise", "--experiment", "gil", "--out-dir", str(tmp_path / "gil"), "--host-json", str(host)]
    assert analysis_main([*args, str(point)]) == 0
    for fig in registry.get("gil").spec.all_figures:
        png = tmp_path / f"{fig}.png"
        assert analysis_main(["figure", fig, "--host-dir", str(tmp_path), "--out", str(png)]) == 0, fig
        assert png.stat().st_size > 10_000


def test_interleaved_baseline_gives_the_speedup(tmp_path):
    # the threads job measured its own sequential baseline at 1 task/s; the sequential job,
    # measured at another time, saw 4 tasks/s: the speedup must use the interleaved one
    rows = [{"role": "point", "wall_s": 1.0, "tasks_per_s": 2.0}] * 3
    rows += [{"role": "baseline", "mode": "sequential", "wall_s": 2.0, "tasks_per_s": 1.0}] * 3
    p1 = write_point(tmp_path, "gil", {"workload": "cpu", "mode": "threads", "workers": 2}, rows)
    for i, r in enumerate(pd.read_csv(p1).to_dict("records")):
        assert r["repeat"] == i  # helper numbers rows; fix repeats per role below
    df = pd.read_csv(p1)
    df["repeat"] = [0, 1, 2, 0, 1, 2]
    df.to_csv(p1, index=False)
    p2 = write_point(
        tmp_path,
        "gil",
        {"workload": "cpu", "mode": "sequential", "workers": 2},
        [{"wall_s": 0.5, "tasks_per_s": 4.0}] * 3,
    )
    s = summarise(load_experiment([p1, p2], "gil"), "gil").set_index("mode")
    assert s.loc["threads", "speedup"] == pytest.approx(2.0)
    assert s.loc["threads", "speedup_source"] == "interleaved"
    assert s.loc["threads", "baseline_median"] == pytest.approx(1.0)
    assert s.loc["threads", "median"] == pytest.approx(2.0)
    assert s.loc["sequential", "speedup"] == pytest.approx(1.0)
    assert s.loc["sequential", "speedup_source"] == "baseline"


def _interleaved(tmp_path, mode: str, ratios: list[float]) -> object:
    """A gil point measured against its interleaved sequential baseline (1 task/s), one round a ratio."""
    rows = [{"role": "point", "wall_s": 1.0 / r, "tasks_per_s": r} for r in ratios]
    rows += [{"role": "baseline", "mode": "sequential", "wall_s": 1.0, "tasks_per_s": 1.0}] * len(ratios)
    path = write_point(tmp_path, "gil", {"workload": "cpu", "mode": mode, "workers": 2}, rows)
    df = pd.read_csv(path)
    df["repeat"] = [*range(len(ratios)), *range(len(ratios))]
    df.to_csv(path, index=False)
    return path


def test_without_the_baseline_among_the_points_only_a_measured_lead_is_best(tmp_path):
    """The sequential baseline not swept (``mode: [threads, processes]``): a point whose interval
    holds 1 is not best for its higher median; one whose interval clears 1 is."""
    noisy = [0.6, 1.9, 0.7, 2.2, 0.8, 2.0]
    paths = [
        _interleaved(tmp_path, "threads", [0.9, 1.0, 1.1, 0.95, 1.05, 1.0]),
        _interleaved(tmp_path, "processes", noisy),
    ]
    s = summarise(load_experiment(paths, "gil"), "gil").set_index("mode")
    assert s.loc["processes", "speedup_ci_low"] <= 1 and not s["best"].any()
    clear = _interleaved(tmp_path / "clear", "processes", [1.8, 1.9, 1.85, 1.95, 1.9, 1.88])
    s = summarise(load_experiment([paths[0], clear], "gil"), "gil").set_index("mode")
    assert s.loc["processes", "best"] and not s.loc["threads", "best"]


def test_fidelity_verdicts(tmp_path):
    from analysis.hooks import checks

    gil = pd.DataFrame(
        [
            {
                "workload": "cpu",
                "mode": "threads",
                "workers": 2,
                "speedup": 0.98,
                "speedup_ci_low": 0.9,
                "speedup_ci_high": 1.0,
            },
            {
                "workload": "io",
                "mode": "threads",
                "workers": 2,
                "speedup": 1.5,
                "speedup_ci_low": 1.4,
                "speedup_ci_high": 1.6,
            },
            {
                "workload": "cpu",
                "mode": "processes",
                "workers": 2,
                "speedup": 1.9,
                "speedup_ci_low": 1.8,
                "speedup_ci_high": 2.0,
            },
        ]
    )
    intra = pd.DataFrame(
        [{"workload": "matmul", "threads": 2, "speedup": 1.2, "speedup_ci_low": 1.1, "speedup_ci_high": 1.3}]
    )
    sc = pd.DataFrame(
        [{"load": "busy", "role": "point", "sampler_tree_pct": 49.0, "process_cpu_pct": 50, "sampler_cpu_pct": 3.0}] * 3
        + [{"load": "idle", "role": "baseline", "sampler_tree_pct": 0.1, "process_cpu_pct": 0, "sampler_cpu_pct": 0.4}]
        * 3
    )
    t = checks({"gil": gil, "intraop": intra}, sc, ncpu=2, sample_hz=10).set_index("check")
    assert t.loc["CPU-bound Python: 2 threads over sequential", "verdict"] == "pass"
    assert t.loc["I/O-bound sleep loop: 2 threads over sequential", "verdict"] == "warn"  # 1.5 < 1.8
    assert t.loc["CPU-bound Python: 2 processes over sequential", "verdict"] == "pass"  # 1.9 >= 1.4
    assert t.loc["matmul GFLOP/s: 2 threads over 1", "verdict"] == "warn"  # 1.2 < 1.5
    assert t.loc["sampler: one busy-looping process", "verdict"] == "pass"
    assert t.loc["sampler's own cost at 10 Hz", "verdict"] == "pass"
    assert "ms per sample" not in t.loc["sampler's own cost at 10 Hz", "reason"]  # no floor measured: no clause
    # at 0.1 Hz the 0.5 s windows hold no sample: the busy-loop check says so, and the cost of the
    # reads at the windows' edges (0.02%) is judged against 0.1% of a CPU, not 0.01%
    slow = sc.assign(sampler_tree_pct=[np.nan] * 6, sampler_cpu_pct=[3.0] * 3 + [0.0225] * 3)
    t = checks({}, slow, ncpu=2, sample_hz=0.1).set_index("check")
    assert t.loc["sampler: one busy-looping process", "verdict"] == "n/a"
    assert (
        "took no sample in the self-check's windows at 0.1 Hz: raise sample_hz or selfcheck.duration_s"
        in (t.loc["sampler: one busy-looping process", "reason"])
    )
    row = t.loc["sampler's own cost at 0.1 Hz"]
    assert row["verdict"] == "pass" and row["expected"] == "< 0.1% of one CPU (1 ms per sample, and 0.1% at the least)"
    assert checks({}, slow.assign(sampler_cpu_pct=0.3), ncpu=2, sample_hz=0.1).iloc[-1]["verdict"] == "warn"
    # 4% of a CPU at 10 Hz is 4 ms per sample: over the goal, and given beside the machine's floor
    floor = sc.assign(sampler_cpu_pct=[3.0] * 3 + [4.0] * 3, wake_read_ms=[np.nan] * 3 + [1.2, 1.5, 1.3])
    row = checks({}, floor, ncpu=2, sample_hz=10).set_index("check").loc["sampler's own cost at 10 Hz"]
    assert row["verdict"] == "warn" and row["measured"] == 4.0
    assert row["reason"].endswith(
        ": 4.00 ms per sample, 3.1 times what waking 10 times a second to read two /proc files cost this"
        " machine (1.30 ms per wake-up, measured beside it)"
    ), row["reason"]
    # a VM that gave the loop 54% of a CPU: the sampler is judged against the kernel's account
    stolen = sc.assign(sampler_tree_pct=[29.0] * 3 + [0.1] * 3, process_cpu_pct=[27.0] * 3 + [0.0] * 3)
    row = (
        checks({"gil": gil, "intraop": intra}, stolen, ncpu=2, sample_hz=10)
        .set_index("check")
        .loc["sampler: one busy-looping process"]
    )
    assert row["verdict"] == "pass" and "54% of a CPU" in row["reason"], row.to_dict()
    wrong = sc.assign(sampler_tree_pct=[38.0] * 3 + [0.1] * 3)  # 12 points off the kernel's 50%
    row = (
        checks({"gil": gil, "intraop": intra}, wrong, ncpu=2, sample_hz=10)
        .set_index("check")
        .loc["sampler: one busy-looping process"]
    )
    assert row["verdict"] == "warn" and row["measured"] == 38.0
    # under a CPU quota the throttling is the measured cause, named with its cgroup
    quota = {"available_cpus": 1, "cgroup_quota_cpus": 0.5, "cgroup_quota_cgroup": "/job"}
    throttled = stolen.assign(throttled_s=0.3, interference_pct=1.0, steal_pct=0.0)
    row = checks({}, throttled, ncpu=2, sample_hz=10, host=quota).set_index("check")
    reason = row.loc["sampler: one busy-looping process", "reason"]
    assert "the CPU quota throttled it 0.30 s per window (a CPU quota of 0.50 CPU" in reason and "/job" in reason
    assert reason.endswith(", in this check's own windows)")  # not the run's median steal in the trust table
    none = checks({}, None, ncpu=2, sample_hz=10)
    assert set(none["verdict"]) == {"n/a"}
    # on 1 CPU there is no thread count to scale to: n/a, and the reason says so
    one = checks({"intraop": intra}, sc, ncpu=1, sample_hz=10).set_index("check")
    row = one.loc["matmul GFLOP/s: 1 thread over 1"]
    assert row["verdict"] == "n/a" and row["reason"].startswith("1 available CPU"), row.to_dict()
    # where the physics is wrong the checks warn: a sampler that reads nothing of a busy loop,
    # and CPU-bound threads that scale under a GIL build (the GIL was measured on)
    blind = sc.assign(sampler_tree_pct=[0.0] * 6)
    scaled = gil.assign(speedup=[1.9, 1.5, 1.9], speedup_ci_low=[1.8, 1.4, 1.8], speedup_ci_high=[2.0, 1.6, 2.0])
    t = checks({"gil": scaled.assign(gil_enabled=True)}, blind, ncpu=2, sample_hz=10).set_index("check")
    assert t.loc["sampler: one busy-looping process", "verdict"] == "warn"
    assert t.loc["CPU-bound Python: 2 threads over sequential", "verdict"] == "warn"


def test_the_gil_check_judges_threads_at_the_sequential_loop_s_pace_where_the_headline_gives_it():
    """2 GIL-bound threads measured 1.16x (95% CI 0.88-1.32), 0.99x (0.985-1.007) at the
    sequential loop's pace by their chunks' CPU time (quick run o1-1, the AVX-512 EPYC VM): the
    check judges the 0.99x its headline gives, and says the measured figure; the same measured
    row without that figure warns, since 1.16x is above what the GIL allows."""
    from analysis.hooks import checks

    threads = {"workload": "cpu", "mode": "threads", "workers": 2, "cpus_asked": 2, "cpus_delivered": 1.97}
    threads |= {"speedup": 1.16, "speedup_ci_low": 0.88, "speedup_ci_high": 1.32, "parallel_efficiency": 0.58}
    paced = threads | {"speedup_norm": 0.99, "speedup_norm_ci_low": 0.985, "speedup_norm_ci_high": 1.007}
    paced["speedup_norm_source"] = "in-window"
    name = "CPU-bound Python: 2 threads over sequential"
    row = checks({"gil": pd.DataFrame([paced])}, None, ncpu=2, sample_hz=10).set_index("check").loc[name]
    assert (row["verdict"], row["measured"], row["ci_low"]) == ("pass", 0.99, 0.985), row.to_dict()
    assert "judged at the sequential loop's pace (1.16x measured" in row["reason"], row["reason"]
    row = checks({"gil": pd.DataFrame([threads])}, None, ncpu=2, sample_hz=10).set_index("check").loc[name]
    assert (row["verdict"], row["measured"]) == ("warn", 1.16), row.to_dict()
    # a judged figure outside the range warns with a reason about that figure, not the measured one's CI
    low = paced | {"speedup": 1.0, "speedup_ci_low": 0.95, "speedup_ci_high": 1.05, "speedup_norm": 0.6}
    low |= {"speedup_norm_ci_low": 0.58, "speedup_norm_ci_high": 0.62}
    row = checks({"gil": pd.DataFrame([low])}, None, ncpu=2, sample_hz=10).set_index("check").loc[name]
    assert (row["verdict"], row["measured"]) == ("warn", 0.6), row.to_dict()
    assert row["reason"].startswith("judged at the sequential loop's pace (1.00x measured)")
    assert "0.95-1.05" not in row["reason"] and "measurement noise" not in row["reason"], row["reason"]


def test_run_timing():
    from analysis.runinfo import run_timing

    jobs = [{"job_start_unix": 100.0, "job_end_unix": 104.0}, {"job_start_unix": 104.5, "job_end_unix": 110.0}]
    metrics = [pd.DataFrame({"wall_s": [1.0, 1.0]}), pd.DataFrame({"wall_s": [2.0, float("nan")]})]
    t = run_timing(jobs, metrics, {"collected_unix": 98.0})
    assert t["measurement_phase_s"] == pytest.approx(12.0)
    assert t["measured_s"] == pytest.approx(4.0)
    assert t["measured_share_pct"] == pytest.approx(100 * 4 / 12)
    assert t["overhead_per_job_s"] == pytest.approx((9.5 - 4.0) / 2)
    assert t["upfront_s"] == 0.0 and t["measuring_share_pct"] == pytest.approx(t["measured_share_pct"])
    # a timed up-front measurement (jit's setup and first call) counts once per runner: per
    # worker process and role, whatever the number of its rows
    jit = pd.DataFrame(
        {
            "wall_s": [0.5] * 4,
            "role": ["point", "baseline"] * 2,
            "worker": [0, 0, 1, 1],
            "upfront_s": [2.0, 0.1, 1.0, 0.1],
        }
    )
    t = run_timing(jobs, [*metrics, jit], {"collected_unix": 98.0})
    assert t["upfront_s"] == pytest.approx(3.2) and t["measured_s"] == pytest.approx(6.0)
    assert t["measuring_share_pct"] == pytest.approx(100 * 9.2 / 12)
    assert t["overhead_per_job_s"] == pytest.approx((9.5 - 6.0 - 3.2) / 2)


def test_paired_speedup_survives_drift(tmp_path):
    # the machine ran 4x faster in round 2 for both windows of the round: per-round ratios
    # stay 2, the ratio of medians does not
    rows = [{"role": "point", "wall_s": 1.0, "tasks_per_s": v} for v in (1.0, 1.0, 4.0) * 2]
    rows += [{"role": "baseline", "mode": "sequential", "wall_s": 1.0, "tasks_per_s": v} for v in (0.5, 0.5, 2.0) * 2]
    p = write_point(tmp_path, "gil", {"workload": "io", "mode": "threads", "workers": 2}, rows)
    df = pd.read_csv(p)
    df["repeat"] = list(range(6)) * 2
    df.to_csv(p, index=False)
    s = summarise(load_experiment([p], "gil"), "gil").iloc[0]
    assert s["speedup"] == pytest.approx(2.0)
    assert s["speedup_ci_low"] == pytest.approx(2.0) and s["speedup_ci_high"] == pytest.approx(2.0)
    assert s["speedup_ratio_of_medians"] == pytest.approx(2.0)  # medians 1.0 / 0.5
    # the machine's fast phase covered baseline windows 1 and 2 but only point window 2:
    # the ratio of medians is fooled (1.0 / 2.0), the paired median is not (2, 0.5, 2 -> 2)
    df["tasks_per_s"] = [1.0, 1.0, 4.0] * 2 + [0.5, 2.0, 2.0] * 2
    df.to_csv(p, index=False)
    s = summarise(load_experiment([p], "gil"), "gil").iloc[0]
    assert s["speedup"] == pytest.approx(2.0)
    assert s["speedup_ratio_of_medians"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "row, expected",
    [
        ("h,gil,cpu,threads,2,0,ok,1,50,0", "column 'tasks_per_s': must be > 0"),
        ("h,gil,cpu,threads,2,0,ok,1,50,-2", r"column 'tasks_per_s': must be > 0, got -2\.0$"),  # not np.float64(-2.0)
        ("h,gil,cpu,threads,2,0,ok,1,250,2", "column 'cpu_util_pct': must be between 0 and 100"),
        ("h,gil,cpu,threads,2,x,ok,1,50,2", "column 'repeat': repeat must be a whole number"),
        ("h,jit,cpu,threads,2,0,ok,1,50,2", "column 'experiment'"),
    ],
)
def test_implausible_values_are_refused(tmp_path, row, expected):
    path = tmp_path / "metrics.csv"
    path.write_text(
        "host,experiment,workload,mode,workers,repeat,status,wall_s,cpu_util_pct,tasks_per_s\n" + row + "\n"
    )
    with pytest.raises(DataError, match=expected):
        load_experiment([path], "gil")


def test_a_metrics_file_cut_at_a_line_end_is_named_against_its_job_json(tmp_path):
    """A tester cut a point's file to its first rows, at a line's end: the table reads, so the
    rounds its job.json says the job measured tell it: named, not summarised as fewer rounds."""
    import json

    head = "host,experiment,workload,mode,workers,repeat,role,status,wall_s,cpu_util_pct,tasks_per_s\n"
    rows = [f"h,gil,cpu,threads,2,{r},{role},ok,1,50,2\n" for r in range(3) for role in ("point", "baseline")]
    path = tmp_path / "metrics.csv"
    job = {"rounds": {"done": 3}, "baseline": {"mode": "sequential"}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    path.write_text(head + "".join(rows))
    assert len(load_experiment([path], "gil")) == 6  # whole: read
    path.write_text(head + "".join(rows[:5]))  # the last baseline row gone
    with pytest.raises(DataError, match="2 rows with role 'baseline', but the job.json beside it says its job"):
        load_experiment([path], "gil")
    path.write_text(head + "".join(rows[:2]))
    with pytest.raises(DataError, match="1 rows with role 'point'.* measured 3 rounds: the file was cut short"):
        load_experiment([path], "gil")
    (tmp_path / "job.json").write_text(json.dumps({"rounds": None}))  # a job that chose its own rounds
    assert len(load_experiment([path], "gil")) == 2


def test_points_of_two_hosts_are_not_summarised_together(tmp_path):
    head = "host,experiment,workload,mode,workers,repeat,status,wall_s,cpu_util_pct,tasks_per_s\n"
    one, two = tmp_path / "a.csv", tmp_path / "b.csv"
    one.write_text(head + "h1,gil,cpu,threads,2,0,ok,1,50,2\n")
    two.write_text(head + "h2,gil,cpu,threads,4,0,ok,1,50,2\n")
    with pytest.raises(DataError, match=f"host 'h2', where {one} is host 'h1': summarise each host's points apart"):
        load_experiment([one, two], "gil")
    assert len(load_experiment([one], "gil")) == 1


def test_fidelity_explains_a_capacity_shortfall_from_utilisation():
    from analysis.hooks import checks

    gil = pd.DataFrame(
        [
            {
                "workload": "cpu",
                "mode": "processes",
                "workers": 2,
                "speedup": 0.93,
                "speedup_ci_low": 0.9,
                "speedup_ci_high": 1.0,
                "cpu_util_pct": 75.0,
            }
        ]
    )
    row = (
        checks({"gil": gil}, None, ncpu=2, sample_hz=10)
        .set_index("check")
        .loc["CPU-bound Python: 2 processes over sequential"]
    )
    assert row["verdict"] == "warn"
    assert "1.50 CPUs of 2 (75% busy)" in row["reason"] and "about 46% of a core" in row["reason"]


def test_points_outside_key_directories_are_summarised_with_their_spans(tmp_path):
    """Metrics files anywhere (no <key>~<value> directories): the spans take the point's keys
    from its metrics rows."""
    import shutil

    paths = []
    for i, p in enumerate(gil_fixture(tmp_path / "keyed")):
        flat = tmp_path / "flat" / f"p{i}"
        flat.mkdir(parents=True)
        shutil.copy(p, flat / "metrics.csv")
        (flat / "spans.csv").write_text("repeat,role,actor,kind,start_s,end_s\n0,point,main,cpu,0.0,0.1\n")
        paths.append(flat / "metrics.csv")
    out = tmp_path / "out"
    assert analysis_main(["summarise", "--experiment", "gil", "--out-dir", str(out), *map(str, paths)]) == 0
    spans = pd.read_csv(out / "spans.csv")
    assert len(spans) == 6 and set(zip(spans["workload"], spans["mode"])) == {
        (w, m) for w in ("cpu", "io") for m in ("sequential", "threads", "processes")
    }


def test_the_capacity_line_counts_one_cpu_in_the_singular():
    from analysis.schedule import capacity_text

    d = {"single_min": 20.4e6, "single_max": 43.6e6, "single_drift_pct": 114.0, "jobs": 36}
    d |= {"delivered_min": 1.0, "delivered_max": 1.0, "delivered_median": 1.0}
    assert "over the 36 jobs that ran the probe; 1 CPU delivered 1.00-1.00 cores" in capacity_text({**d, "cpus": 1})
    assert "; 2 CPUs delivered" in capacity_text({**d, "cpus": 2})
    assert "20.4-43.6 M loop iterations/s (the fastest job 114% above the slowest) over" in capacity_text(
        d | {"cpus": 2}
    )
    middle = capacity_text(d | {"cpus": 2, "single_q1": 30.06e6, "single_q3": 31.0e6})
    assert "over the 36 jobs that ran the probe, the middle half of them at 30.1-31.0 M/s; 2 CPUs" in middle


def _mp_point(root, processes: int, threads: int, policy: str, ratios: list[float], cpu: float, wait: float = 1.0):
    """A multiprocessing point measured against its interleaved 1 x 1 (1,000 samples/s) under
    the same wait policy, one round per ratio; its windows ``cpu`` % busy, a task waiting for a
    CPU in ``wait`` % of each (its baseline's: 2%)."""
    over = processes * threads > 2
    point = {"role": "point", "cpu_util_pct": cpu, "cpu_wait_pct": wait, "oversubscribed": over}
    rows = [{**point, "wall_s": 1.0 / r, "samples_per_s": 1000.0 * r} for r in ratios]
    base = {"role": "baseline", "processes": 1, "threads": 1, "wall_s": 1.0, "samples_per_s": 1000.0}
    rows += [{**base, "cpu_util_pct": 50.0, "cpu_wait_pct": 2.0, "oversubscribed": False}] * len(ratios)
    point = {"processes": processes, "threads": threads, "omp_wait_policy": policy}
    path = write_point(root, "multiprocessing", point, rows)
    df = pd.read_csv(path)
    df["repeat"] = [*range(len(ratios)), *range(len(ratios))]
    df.to_csv(path, index=False)
    return path


def _mp_summary(root, passive_2x2: list[float]):
    spread = [0.96, 0.98, 1.0, 1.0, 1.02, 1.04, 0.99, 1.01]
    paths = []
    for policy, one_by_two, two_by_two, cpu12, cpu22, wait22 in (
        ("default", 1.0, 0.3, 96.0, 97.0, 96.0),
        ("passive", 0.4, None, 46.0, 88.0, 41.0),
    ):
        if policy == "default":  # the workflow runs other policies only where a process has threads that wait
            ones = [
                {"role": "point", "wall_s": 1.0, "samples_per_s": 1000.0 * s, "oversubscribed": False} for s in spread
            ]
            one = {"processes": 1, "threads": 1, "omp_wait_policy": policy}
            paths.append(write_point(root, "multiprocessing", one, ones))
        paths.append(_mp_point(root, 1, 2, policy, [one_by_two * s for s in spread], cpu12))
        two = [two_by_two * s for s in spread] if two_by_two else passive_2x2
        paths.append(_mp_point(root, 2, 2, policy, two, cpu22, wait22))
    return summarise(load_experiment(paths, "multiprocessing"), "multiprocessing")


def test_the_wait_policy_finding_names_the_measured_cause_of_oversubscription(tmp_path):
    """Passive clearly faster where threads outnumber the CPUs (spinning was the cost), clearly
    slower where each has a CPU (wake-ups); the intervals decide "clearly", and where they
    overlap the finding says no clear difference."""
    from analysis.findings import bound

    s = _mp_summary(tmp_path / "a", [1.3 * x for x in (0.96, 0.98, 1.0, 1.0, 1.02, 1.04, 0.99, 1.01)])
    out = findings("multiprocessing", s, {"available_cpus": 2})
    (line,) = [f for f in out["findings"] if f.startswith("OpenMP wait policy passive")]
    assert "1 x 2: 0.40x (95% CI" in line and "at 46% CPU against 1.00x (95% CI" in line
    assert "clearly slower: 2.5x below the default's speedup over 1 x 1: every thread had a CPU" in line
    assert "2 x 2, oversubscribed: 1.30x (95% CI" in line and "at 88% CPU against 0.30x" in line
    assert "clearly faster: 4.3x the default's speedup over 1 x 1: with 4 threads on 2 CPUs, threads that spin" in line
    # the cause measured: the kernel's CPU pressure over each point's own windows, not its baseline's
    assert "CPU pressure: threads waited for a CPU 96% of the time under the default, 41% under passive)" in line
    first, head = out["headlines"]
    assert (
        first["answer"].startswith("no clear winner")
        and "; with OMP_WAIT_POLICY=passive: 2 x 2 at 1.30x" in first["answer"]
    )
    assert head["question"] == "What does oversubscription's cost come from?"
    assert head["answer"].startswith("at 2 x 2, OMP_WAIT_POLICY=passive 1.30x")
    # the screen shows rerun intervals, which may overlap: the CIs that decided are named
    rows = s[(s["processes"] == 2) & (s["threads"] == 2)].set_index("omp_wait_policy")
    cis = [
        f"{bound(r['speedup_ci_low'])}-{bound(r['speedup_ci_high'])}"
        for r in (rows.loc["passive"], rows.loc["default"])
    ]
    assert f"(passive clearly faster: their 95% CIs {cis[0]} against {cis[1]})" in head["answer"]
    # the best split and the oversubscription line read the default policy only
    assert any(f.startswith("Oversubscribed (2 x 2 = 4 threads") and "0.30x" in f for f in out["findings"])

    wide = _mp_summary(tmp_path / "b", [0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.28, 0.32])  # overlaps default's 0.3x
    out = findings("multiprocessing", wide, {"available_cpus": 2})
    (line,) = [f for f in out["findings"] if f.startswith("OpenMP wait policy passive")]
    assert "2 x 2, oversubscribed:" in line and line.endswith("no clear difference.")
    assert "(no clear difference)" in out["headlines"][-1]["answer"]


def test_windows_that_reached_the_cap_are_named_with_the_steps_they_got_done():
    """A multiprocessing window stopped at ``max_window_s`` is said to be so, with the steps its
    windows got done of the work they had; a point whose windows all finished is not named, and
    results from before the cap (no ``steps_done``) give no such sentence."""
    from experiments.multiprocessing.analysis import capped_findings

    def rows(processes, threads, role, done, status="ok"):
        point = {"processes": processes, "threads": threads, "omp_wait_policy": "default", "steps": 150}
        return [{**point, "role": role, "status": status, "steps_done": d, "max_window_s": 2.0} for d in done]

    reps = pd.DataFrame(
        rows(2, 2, "point", [52, 233, 101, 143, 114, 300])
        + rows(1, 1, "baseline", [150] * 6)
        + rows(2, 1, "point", [300] * 6)
        + rows(2, 2, "point", [float("nan")], status="failed")
    )
    (line,) = capped_findings(reps)
    assert line == (
        "Windows that reached the 2 s cap (`max_window_s`) ended there with their work unfinished, and"
        " samples/s counts the steps done: 2 x 2: 5 of its 6 windows, 52-233 of 300 steps (2 processes x 150) done."
    )
    every = capped_findings(reps[reps["steps_done"] < 300])  # every window of 2 x 2 reached the cap
    assert every[0].endswith("2 x 2: all 5 windows, 52-233 of 300 steps (2 processes x 150) done.")
    same = capped_findings(reps[reps["steps_done"].isin([52, 300])])  # one capped window: one count, not 52-52
    assert same[0].endswith("2 x 2: 1 of its 2 windows, 52 of 300 steps (2 processes x 150) done.")
    assert capped_findings(reps[reps["processes"] == 1]) == []
    assert capped_findings(reps.drop(columns=["steps_done"])) == []
    assert capped_findings(None) == []
    # the first screen's oversubscription answer says it beside the point's figure
    from experiments.multiprocessing.analysis import _cap_note, _capped_x

    split = {"processes": 2, "threads": 2, "omp_wait_policy": "default"}
    assert _cap_note(reps, split) == "5 of 6 windows stopped at the 2 s cap"
    assert _cap_note(reps[reps["steps_done"] < 300], split) == "all 5 windows stopped at the 2 s cap"
    assert _cap_note(reps, split | {"threads": 1}) == "" and _cap_note(None, split) == ""
    row = split | {"speedup": 0.26, "speedup_ci_low": 0.1, "speedup_ci_high": 0.5}
    row |= {"speedup_rerun_low": 0.067, "speedup_rerun_high": 0.63}
    assert _capped_x(reps, row) == "0.26x (95% rerun interval 0.067-0.63; 5 of 6 windows stopped at the 2 s cap)"
    assert _capped_x(reps, row | {"threads": 1}) == "0.26x (95% rerun interval 0.067-0.63)"


def test_the_throughput_chart_marks_the_points_whose_windows_reached_the_cap(tmp_path):
    """A black x on each point with a capped window, at its wait policy's x offset, and the
    legend says what it means; no mark where no window reached the cap."""
    from experiments.multiprocessing.analysis import multiprocessing_throughput
    from lab.contract import Context

    s = _mp_summary(tmp_path, [1.3 * x for x in (0.96, 0.98, 1.0, 1.0, 1.02, 1.04, 0.99, 1.01)])
    point = {"role": "point", "status": "ok", "steps": 150, "max_window_s": 2.0}
    reps = pd.DataFrame(
        [{**point, "processes": 2, "threads": 2, "omp_wait_policy": "passive", "steps_done": d} for d in (52, 300)]
        + [{**point, "processes": 1, "threads": 2, "omp_wait_policy": "default", "steps_done": 150}]
    )

    def marks(replicates):
        fig = multiprocessing_throughput(Context({"available_cpus": 2}, summary=s, replicates=replicates))
        ax = fig.axes[0]
        crosses = [c for c in ax.collections if c.get_label().startswith("window reached max_window_s")]
        return crosses, ax.get_legend_handles_labels()[1]

    crosses, labels = marks(reps)
    (cross,) = crosses
    row = s[(s["processes"] == 2) & (s["threads"] == 2) & (s["omp_wait_policy"] == "passive")].iloc[0]
    assert cross.get_offsets().tolist() == [[2 * 1.03, row["speedup"]]]  # passive: the second policy's offset
    assert "window reached max_window_s (2 s): work unfinished" in labels
    crosses, labels = marks(reps[reps["steps_done"] == 300])
    assert crosses == [] and not any("max_window_s" in label for label in labels)


def test_the_rerun_interval_is_the_ci_widened_on_the_log_scale_by_the_replication_factor_of_its_rounds():
    """For a CI symmetric on the log scale, low' = s (low / s)^f(n), high' likewise, for the
    speedup and the speedup on whole cores, with f(n) = sqrt(2) t(n - 1, 0.975) / z(0.975):
    1.414 x 2.571 / 1.960 = 1.855 at 6 rounds (Student's t table, 5 degrees of freedom), toward
    sqrt(2) with more rounds; a baseline's stays 1, a point without an interval gets none."""
    from analysis.rerun import add_rerun, rerun_factor

    s = pd.DataFrame(
        {
            "n": [6, 6, 30],
            "speedup": [1.0, 1.5, 2.0],
            "speedup_ci_low": [1.0, 1.5 / 1.25, np.nan],
            "speedup_ci_high": [1.0, 1.5 * 1.25, np.nan],
            "speedup_norm": [1.0, 1.8, 2.0],
            "speedup_norm_ci_low": [1.0, 1.6, 2.0 / 1.05],
            "speedup_norm_ci_high": [1.0, 2.0, 2.0 * 1.05],
        }
    )
    add_rerun(
        s,
        ["speedup", "speedup_ci_low", "speedup_ci_high"],
        ["speedup_norm", "speedup_norm_ci_low", "speedup_norm_ci_high"],
    )
    f6, f30 = rerun_factor(6), rerun_factor(30)
    assert f6 == pytest.approx(np.sqrt(2) * 2.5706 / 1.95996, rel=1e-4) and np.sqrt(2) < f30 < f6
    assert f30 == pytest.approx(np.sqrt(2) * 2.0452 / 1.95996, rel=1e-4)  # t(29, 0.975) = 2.045
    assert np.isnan(rerun_factor(1))
    assert s.loc[0, ["speedup_rerun_low", "speedup_rerun_high"]].tolist() == [1.0, 1.0]
    assert s.loc[1, "speedup_rerun_low"] == pytest.approx(1.5 / 1.25**f6)
    assert s.loc[1, "speedup_rerun_high"] == pytest.approx(1.5 * 1.25**f6)
    assert (
        s.loc[1, "speedup_rerun_low"]
        < s.loc[1, "speedup_ci_low"]
        < s.loc[1, "speedup_ci_high"]
        < s.loc[1, "speedup_rerun_high"]
    )
    assert np.isnan(s.loc[2, "speedup_rerun_low"]) and np.isnan(s.loc[2, "speedup_rerun_high"])
    assert s.loc[2, "speedup_norm_rerun_low"] == pytest.approx(2.0 / 1.05**f30)


def test_the_rerun_interval_is_symmetric_on_the_log_scale_where_the_ci_is_not():
    """Run p1-1's 2 CPU-bound processes read 1.926x on whole cores, 95% CI 1.913-1.933 from 9
    rounds; the rerun read 1.940x. Widening each side alone gave 1.905-1.937, which left the rerun
    out; a rerun and this run are two draws of one estimator, so their log difference is symmetric
    and its half-width pools the two sides: f(9) sqrt((a^2 + b^2) / 2) on both sides, here
    1.909-1.943, which holds the rerun and the CI, and is no wider than the wider side alone."""
    from analysis.rerun import rerun_factor, rerun_interval

    s, lo, hi = 1.9256, 1.9130, 1.9327
    low, high = (float(x) for x in rerun_interval(s, lo, hi, 9))
    a, b = np.log(s / lo), np.log(hi / s)
    h = rerun_factor(9) * np.sqrt((a * a + b * b) / 2)
    assert (low, high) == pytest.approx((s * np.exp(-h), s * np.exp(h)))
    assert np.log(s / low) == pytest.approx(np.log(high / s))
    assert low < lo < hi < high and low <= 1.940 <= high
    assert (low, high) == pytest.approx((1.909, 1.943), abs=5e-4)
    assert np.log(high / s) < rerun_factor(9) * a  # the wide side is not widened as far as alone
    # a CI that does not hold its estimate, non-positive values or a single round: no interval
    for args in ((1.5, 1.6, 1.8, 6), (1.5, 0.0, 1.8, 6), (1.5, 1.2, 1.8, 1)):
        assert np.isnan(rerun_interval(*args)).all()


def test_a_scaling_check_claims_no_share_above_the_probe_reading():
    """2 threads at 1.83x where the probe read 1.24 CPUs delivered: the check does not say the
    point reached 148% of what the machine gave; it names the gap (the probe read less than the
    work got). The verdict is judged as before, against 70% of the reading; a point within the
    reading gets its share."""
    from analysis.fidelity import scaling_check

    def row(speedup, got):
        return pd.DataFrame(
            [{"mode": "threads", "speedup": speedup, "speedup_ci_low": speedup - 0.1, "speedup_ci_high": speedup + 0.1}]
        ).assign(cpus_delivered=got)

    over = scaling_check(row(1.83, 1.24), {"mode": "threads"}, "sha256", 2, 0.7, "it releases the GIL", "short")
    assert over["verdict"] == "pass" and over["expected"] == ">= 0.87x (70% of the 1.24 CPUs delivered)"
    assert "the point ran 1.83x, above the 1.24 of 2 CPUs the capacity probe read as delivered" in over["reason"]
    assert "of that" not in over["reason"]
    within = scaling_check(row(1.25, 1.3), {"mode": "threads"}, "sha256", 2, 0.7, "it releases the GIL", "short")
    assert within["expected"] == ">= 0.91x (70% of the 1.30 CPUs delivered)"
    assert "the point reached 96% of that" in within["reason"]


def test_an_interval_bound_keeps_the_digits_that_matter():
    """Two decimals; three where two would read 1.00 for a bound that is not 1; two significant
    digits below 0.1, so that a ratio's lower bound of 0.009 does not read 0.00, and never in
    exponent form (an oversubscribed split on an AMD EPYC VM read "4e-05-34.49")."""
    from analysis.findings import bound

    values = (1.234, 0.998, 1.0, 0.0093, 0.05, 0.1, 4.1e-05)
    assert [bound(v) for v in values] == ["1.23", "0.998", "1.00", "0.0093", "0.05", "0.10", "0.000041"]


def test_an_interval_far_above_the_others_is_drawn_capped_with_its_bound_written():
    """An oversubscribed split on an AMD EPYC VM read 0.11x (95% CI 0.00041-6.34) beside
    speedups of 1-1.9x: drawn in full, its bar set the axis at 6.5 and squashed the rest. The
    axis now ends at 1.3 x the larger of the ideal and the largest speedup; the bar stops there
    with an arrowhead and its bound beside it."""
    import matplotlib.pyplot as plt

    from analysis.plotting import speedup_line, speedup_top

    sub = pd.DataFrame(
        {"speedup": [1.0, 1.87, 0.11], "speedup_ci_low": [1.0, 1.72, 0.00041], "speedup_ci_high": [1.0, 2.1, 6.34]}
    ).assign(noisy=False)
    top = speedup_top(sub, 2)
    assert top == pytest.approx(2.6)
    fig, ax = plt.subplots()
    speedup_line(ax, [1, 2, 3], sub, "#000000", top=top)
    ax.set_ylim(0, top)
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["to 6.34"]
    bars = [seg for coll in ax.collections for seg in coll.get_segments()]
    assert max(seg[:, 1].max() for seg in bars) == pytest.approx(top)  # no bar drawn past the axis
    plt.close(fig)


def test_a_bar_legend_shows_each_colour_plain_and_says_once_what_hatching_means():
    """gil's chart drew its legend from the first bar of each mode: where that bar was a noisy
    point, "threads" and "processes" read hatched in one panel and plain in the next, as if the
    colour meant noisy. Each label now gets a plain patch in its colour, and a hatched white
    "noisy" patch follows only where a bar is hatched."""
    import matplotlib.pyplot as plt

    from analysis.plotting import bar_legend, hatch_noisy

    fig, (ax1, ax2) = plt.subplots(1, 2)
    for ax, noisy in ((ax1, [True, False]), (ax2, [False, False])):
        for i, (label, colour) in enumerate((("threads", "#0072B2"), ("processes", "#E69F00"))):
            sub = pd.DataFrame({"noisy": [noisy[i], None]})
            hatch_noisy(ax.bar([i, i + 2], [1.0, 2.0], color=colour, label=label), sub)
        bar_legend(ax)
    first, second = (ax.get_legend() for ax in (ax1, ax2))
    assert [t.get_text() for t in first.get_texts()] == ["threads", "processes", "noisy"]
    assert [t.get_text() for t in second.get_texts()] == ["threads", "processes"]
    patches = first.get_patches()
    assert [p.get_hatch() for p in patches] == [None, None, "//"]
    assert patches[0].get_facecolor()[:3] == pytest.approx((0.0, 0x72 / 255, 0xB2 / 255))
    assert [b.get_hatch() for b in ax1.patches] == ["//", None, None, None]  # only the noisy bar, not the NaN one
    # diamonds beside two modes' bars (gil's 2 processes and its GIL-bound threads) share one legend entry
    ax2.errorbar([0.2], [1.0], yerr=[[0.1], [0.1]], fmt="D", color="black", label="on whole cores")
    ax2.bar([4], [1.0], label="sequential")
    ax2.errorbar([4.2], [1.0], yerr=[[0.1], [0.1]], fmt="D", color="black", label="on whole cores")
    bar_legend(ax2)
    want = ["threads", "processes", "sequential", "on whole cores"]  # the bars first
    assert [t.get_text() for t in ax2.get_legend().get_texts()] == want
    plt.close(fig)


def test_the_intraop_chart_marks_its_oversubscribed_points_as_multiprocessing_does():
    """4 intra-op threads on 2 CPUs are oversubscribed: the scaling chart marks them with the
    orange square and legend entry the multiprocessing chart uses, and marks no other point."""
    from experiments.intraop.analysis import intraop_scaling
    from lab.contract import Context

    rows = [
        {"workload": "matmul", "threads": t, "speedup": v, "speedup_ci_low": v * 0.9, "speedup_ci_high": v * 1.1}
        for t, v in ((1, 1.0), (2, 1.8), (4, 1.5))
    ]
    s = pd.DataFrame(rows).assign(
        metric="gflop_per_s", noisy=False, baseline_median=80.0, oversubscribed=lambda d: d["threads"] > 2
    )
    fig = intraop_scaling(Context({"available_cpus": 2}, summary=s))
    ax = fig.axes[0]
    (square,) = [c for c in ax.collections if c.get_label().startswith("oversubscribed")]
    assert square.get_offsets().tolist() == [[4.0, 1.5]]
    (legend,) = fig.legends  # one for the figure, not one a panel (a new user read the same three times)
    said = [t.get_text() for t in legend.get_texts()]
    assert said == ["oversubscribed (threads > available CPUs)", "ideal (linear)", "2 CPUs available"], said
    # beneath the panels: inside, the ideal and CPU-count lines left it no free corner and it sat
    # on them (a new user's reading, 2026-12-07)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box, area = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert box.y1 < area.y0 and box.y0 > 0, (box, area)


def test_the_dataloader_chart_marks_the_points_whose_threads_waited():
    """CPU-heavy workers that outnumber the CPUs and made threads wait are marked; sleeping
    workers, as many, are not: the square follows the measured flag, not the count."""
    from experiments.dataloader.analysis import dataloader_throughput
    from lab.contract import Context

    rows = [
        {"dataset": ds, "num_workers": w, "speedup": v, "speedup_ci_low": v * 0.95, "speedup_ci_high": v * 1.05}
        for ds, w, v in (("cpu", 0, 1.0), ("cpu", 2, 1.3), ("io", 0, 1.0), ("io", 2, 1.9))
    ]
    s = pd.DataFrame(rows).assign(
        metric="samples_per_s",
        median=100.0,
        noisy=False,
        baseline_median=100.0,
        speedup_source="interleaved",
        oversubscribed=lambda d: (d["dataset"] == "cpu") & (d["num_workers"] > 0),
    )
    fig = dataloader_throughput(Context({"available_cpus": 2}, summary=s))
    cpu, io = fig.axes[:2]
    (square,) = [c for c in cpu.collections if c.get_label().startswith("oversubscribed")]
    assert square.get_offsets().tolist() == [[2.0, 1.3]]
    label = "oversubscribed (workers + threads > available CPUs)"
    assert label in [t.get_text() for t in cpu.get_legend().get_texts()]
    assert not [c for c in io.collections if c.get_label().startswith("oversubscribed")]
    assert not [line for ax in fig.axes for line in ax.lines if line.get_marker() == "D"]  # none on whole cores
    # the CPU-heavy workers at 1.3x where the probe saw 1.6 of 2 CPUs delivered: 1.63x on whole cores
    whole = s["speedup"].where(s["num_workers"] == 0, s["speedup"] * 1.25)  # a baseline's is its own 1
    probed = s.assign(cpus_asked=2.0, cpus_delivered=1.6, speedup_norm=whole)
    probed = probed.assign(
        speedup_norm_ci_low=probed["speedup_norm"] * 0.97, speedup_norm_ci_high=probed["speedup_norm"] * 1.03
    )
    fig = dataloader_throughput(Context({"available_cpus": 2}, summary=probed))
    (diamond,) = [line for line in fig.axes[0].lines if line.get_marker() == "D"]
    assert diamond.get_ydata()[0] == pytest.approx(1.3 * 1.25) and diamond.get_xdata()[0] > 2.0
    assert any("Black diamond" in t.get_text() for t in fig.texts)


def test_a_long_footnote_wraps_inside_the_figure_instead_of_widening_it():
    """multiprocessing's footnote ran 330 characters on one line: saved with bbox_inches="tight",
    the image grew to its length and the chart sat in its left 80%. Wrapped to the figure's
    width, it ends inside the figure, and every word is kept."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.plotting import note

    words = [f"word{i}" for i in range(120)]  # digits: wider than most text
    for width in (4, 6, 15):
        fig, ax = plt.subplots(figsize=(width, 3), dpi=100)
        note(fig, " ".join(words))
        fig.canvas.draw()
        text = fig.texts[-1]
        assert text.get_window_extent(fig.canvas.get_renderer()).x1 <= fig.bbox.width, width
        assert text.get_text().split() == words
        plt.close(fig)


@pytest.mark.parametrize(
    "cells",
    [
        ["1.5", " 2 ", "", "nan", "NaN", "-0.0", "1e-05", "1.5e+20", "inf", "-inf", "+3", ".5", "7."],
        ["12", "-4", "+0", "00012", "12345678901234567890"],
        ["True", "False", ""],
        ["true", "0", "1", " FALSE "],
        ["1_000", "NAN", "infinity", "0x10", "\u0663", "1.5.2", "abc"],
        ["nan", "", "nan"],
        [],
    ],
)
def test_the_typed_loaders_python_cells_read_as_pandas_reads_them(cells):
    """The loader reads a cell of a plain number with float() and a column's text in Python (a
    thousand times less per column than pandas' string methods); pandas.to_numeric reads every
    other cell. Each column kind reads as the pandas-only path did: same values, same dtype, same
    error (the fast path declines what float() and pandas.to_numeric would read differently)."""
    from analysis import tables

    raw = pd.Series(cells, dtype=object)

    def pandas_numbers(raw):  # the loader's pandas path, as it was before the Python one
        blank = raw.str.strip().isin(["", "nan", "NaN"])
        values = pd.to_numeric(raw.where(~blank, np.nan), errors="coerce")
        return values.astype(float), ~blank & values.isna()

    values, bad = pandas_numbers(raw)
    for kind in (tables.FLOAT, tables.INT):
        if bad.any() or (kind == tables.INT and (values.notna() & (values != np.floor(values))).any()):
            with pytest.raises(tables.DataError, match=r"row \d+, column 'c'"):
                tables._convert(raw, kind, "t.csv", "c")
            continue
        got = tables._convert(raw, kind, "t.csv", "c")
        want = values if kind == tables.FLOAT else values.astype("int64" if values.notna().all() else "Int64")
        pd.testing.assert_series_equal(got, want, check_exact=True)
    text = raw.str.strip().str.lower()
    mapped = text.map({"true": True, "1": True, "false": False, "0": False})
    if (text.ne("") & mapped.isna()).any():
        with pytest.raises(tables.DataError, match="expected True or False"):
            tables._convert(raw, tables.BOOL, "t.csv", "c")
    else:
        want = mapped.astype(bool) if mapped.notna().all() else mapped.astype("boolean")
        pd.testing.assert_series_equal(tables._convert(raw, tables.BOOL, "t.csv", "c"), want, check_exact=True)
    cells_ = raw[raw.str.strip().ne("")].str.strip()
    nan = cells_.str.lower().eq("nan")
    if cells_.empty:
        kind = tables.FLOAT
    elif cells_.isin(["True", "False"]).all():
        kind = tables.BOOL
    elif cells_.str.match(tables._WHOLE).all():
        kind = tables.INT
    else:
        kind = tables.FLOAT if (pd.to_numeric(cells_.mask(nan), errors="coerce").notna() | nan).all() else tables.STR
    assert tables.infer(raw) == kind


def test_the_sampler_checks_without_a_self_check_say_so():
    """No self-check in the run (``python -m analysis fidelity`` without one): both sampler rows
    are n/a, and the expected text says why instead of printing "nan% +- 10 points"."""
    from analysis.fidelity import sampler_checks

    rows = sampler_checks(None, 2, 40.0)
    assert [r["verdict"] for r in rows] == ["n/a", "n/a"]
    assert rows[0]["expected"] == "no self-check in this run" and rows[0]["reason"] == "not measured in this run"


@pytest.mark.parametrize("facts", [{}, {"host": "h", "cpu_model": "x"}])
def test_a_host_json_that_is_no_fingerprint_stops_the_analysis_in_one_line(tmp_path, capsys, facts):
    """A tester's host.json of ``{}`` passed the analysis and then broke a chart in a traceback:
    the summary now stops on it, naming the file and the missing field, and writes nothing."""
    paths = gil_fixture(tmp_path / "pts")
    host = tmp_path / "host.json"
    host.write_text(json.dumps(facts))
    args = ["summarise", "--experiment", "gil", "--out-dir", str(tmp_path / "gil"), "--host-json", str(host)]
    assert analysis_main([*args, *map(str, paths)]) != 0
    err = capsys.readouterr().err
    assert f"{host}: no 'available_cpus' field: not a host fingerprint" in err and "Traceback" not in err
    assert not (tmp_path / "gil").exists()


def test_rows_of_another_point_under_a_points_directory_are_named(tmp_path):
    """A tester set workers=3 in every row of a file under workers~2: it was summarised as a point
    the directory does not hold. The point's rows must match its path; the baseline's need not."""
    head = "host,experiment,workload,mode,workers,repeat,role,status,wall_s,cpu_util_pct,tasks_per_s\n"
    d = tmp_path / "gil" / "workload~cpu" / "mode~threads" / "workers~2"
    d.mkdir(parents=True)
    path = d / "metrics.csv"
    rows = "h,gil,cpu,threads,2,0,point,ok,1,50,2\nh,gil,cpu,sequential,2,0,baseline,ok,1,50,2\n"
    path.write_text(head + rows)
    assert len(load_experiment([path], "gil")) == 2
    path.write_text(head + rows.replace("threads,2,0,point", "threads,3,0,point"))
    with pytest.raises(DataError, match=r"row 1, column 'workers': workers 3 in a row of the point under workers~2"):
        load_experiment([path], "gil")
    cols = head.replace("role,", "")  # a tester's file without its role column: the baseline's rows
    path.write_text(cols + "".join(r.replace(",point", "").replace(",baseline", "") + "\n" for r in rows.splitlines()))
    with pytest.raises(DataError, match=r"row 2, .*mode~threads: the file is not this point's \(it has no role column"):
        load_experiment([path], "gil")
