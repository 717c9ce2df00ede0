"""Analysis on fixture CSVs with known answers, and refusal of malformed input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import gil_fixture, write_point

from analysis.__main__ import main as analysis_main
from analysis.findings import findings
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


def test_bootstrap_intervals():
    x = np.array([10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0])
    lo, hi = median_ci(x)
    assert 10 <= lo <= 13 <= hi <= 16
    assert median_ci(np.array([3.0])) == (pytest.approx(np.nan, nan_ok=True), pytest.approx(np.nan, nan_ok=True))
    assert median_ci(np.array([2.0, 2.0, 2.0])) == (2.0, 2.0)
    lo, hi = ratio_ci(x * 2, x)
    assert lo < 2.0 < hi or lo == hi == 2.0


def test_findings_numbers_come_from_data(tmp_path):
    s = summarise(load_experiment(gil_fixture(tmp_path), "gil"), "gil")
    f = findings("gil", s, {"available_cpus": 2})
    text = " ".join(f["findings"])
    assert "2 threads gave 1.00x" in text
    assert "2 processes gave 2.00x" in text
    seed = {r["workload"]: r for r in f["seed_comparison"]}
    assert seed["cpu"]["seed_speedup"] == pytest.approx(71.47 / 72.08)
    assert seed["io"]["seed_speedup"] == pytest.approx(42.10 / 22.01)
    assert seed["io"]["speedup"] == pytest.approx(2.0)


def test_dataloader_best_point_not_assumed_monotonic(tmp_path):
    paths = []
    for nw, sps in {0: 2000.0, 1: 400.0, 2: 600.0}.items():
        rows = [{"wall_s": 1.0, "samples_per_s": sps, "data_stall_pct": 10.0, "first_epoch_s": 1.0}] * 3
        paths.append(write_point(tmp_path, "dataloader", {"dataset": "tensor", "num_workers": nw}, rows))
    s = summarise(load_experiment(paths, "dataloader"), "dataloader")
    assert s.loc[s["best"], "num_workers"].tolist() == [0]
    text = " ".join(findings("dataloader", s, {"available_cpus": 2})["findings"])
    assert "best num_workers = 0" in text
    assert "More workers were slower (num_workers = 1: 0.20x)" in text


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
    for fig in ("gil_speedup", "gil_timeline"):
        png = tmp_path / f"{fig}.png"
        assert (
            analysis_main(["figure", fig, "--experiment-dir", str(out), "--host-json", str(host), "--out", str(png)])
            == 0
        )
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "bad.csv"
    bad.write_text("")
    assert analysis_main(["summarise", "--experiment", "gil", "--out-dir", str(out), str(bad)]) == 1
    assert f"{bad}: file is empty" in capsys.readouterr().err
