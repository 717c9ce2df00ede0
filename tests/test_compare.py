"""Comparing hosts on fixture host directories with known answers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import write_point

from analysis.__main__ import main as analysis_main
from analysis.compare import compare_hosts, compare_values, load_host, min_two_sided_p
from analysis.load import DataError
from lab import registry
from report.__main__ import main as report_main

SEQ = [10.0, 10.2, 9.8, 10.1, 9.9]


def _host(root, name, cpus, points, version=1, experiment="gil"):
    """results/<name> with host.json and an experiment summarised by the real analysis CLI.

    ``points``: (point dict, tasks/s replicates, or the string ``"skipped"`` for one skipped row)."""
    d = root / name
    d.mkdir(parents=True)
    (d / "host.json").write_text(
        json.dumps({"host": name, "available_cpus": cpus, "schema_version": version, "cpu_model": f"CPU <{name}>"})
    )
    skipped = [{"status": "skipped", "reason": "not here", "wall_s": "", "tasks_per_s": ""}]
    paths = [
        write_point(
            root / f"{name}-points",
            experiment,
            p,
            skipped if tps == "skipped" else [{"wall_s": 2 / t, "tasks_per_s": t} for t in tps],
        )
        for p, tps in points
    ]
    args = [
        "summarise",
        "--experiment",
        experiment,
        "--out-dir",
        str(d / experiment),
        "--host-json",
        str(d / "host.json"),
    ]
    assert analysis_main([*args, *map(str, paths)]) == 0
    return d


def _gil(mode, workers=2, **extra):
    return {"workload": "cpu", "mode": mode, "workers": workers, **extra}


@pytest.fixture
def two_hosts(tmp_path):
    a = _host(
        tmp_path,
        "two-cpu",
        2,
        [
            (_gil("sequential"), SEQ),
            (_gil("threads"), SEQ),
            (_gil("processes"), [2 * v for v in SEQ]),
            ({"workload": "io", "mode": "sequential", "workers": 2}, SEQ),
        ],
    )
    b = _host(
        tmp_path,
        "one-cpu",
        1,
        [
            (_gil("sequential"), SEQ),  # same distribution: no difference
            (_gil("threads"), [v / 2 for v in SEQ]),  # half as fast
            (_gil("processes"), SEQ),  # 1 CPU: processes gain nothing
            (_gil("sequential", workers=4), SEQ),  # not in two-cpu's grid
        ],
    )
    return a, b


def test_ratios_significance_and_grid_mismatch(two_hosts):
    a, b = two_hosts
    hosts = [load_host(a, ["gil", "jit"]), load_host(b, ["gil", "jit"])]
    t = compare_hosts(hosts, "two-cpu", ["gil", "jit"])
    c = t["comparison"].set_index(["host", "point"])
    proc = c.loc[("one-cpu", "interpreter=default workload=cpu mode=processes workers=2")]
    assert proc["status"] == "compared"
    assert proc["ratio"] == pytest.approx(0.5)  # 10 / 20
    assert proc["ratio_per_cpu"] == pytest.approx(1.0)  # per available CPU the hosts are equal
    assert proc["p_value"] == pytest.approx(2 / 252)  # exact, 5 vs 5 fully separated
    assert proc["verdict"] == "slower" and proc["ratio_ci_high"] < 1
    seq = c.loc[("one-cpu", "interpreter=default workload=cpu mode=sequential workers=2")]
    assert seq["ratio"] == pytest.approx(1.0) and seq["verdict"] == "no significant difference"
    assert seq["p_value"] > 0.5
    assert c.loc[("two-cpu", "interpreter=default workload=cpu mode=sequential workers=2"), "status"] == "baseline"
    only_b = c.loc[("one-cpu", "interpreter=default workload=cpu mode=sequential workers=4")]
    assert only_b["status"] == "not comparable" and "measured on one-cpu only" in only_b["reason"]
    only_a = c.loc[("one-cpu", "interpreter=default workload=io mode=sequential workers=2")]
    assert only_a["status"] == "not comparable" and "measured on two-cpu only" in only_a["reason"]
    jit = t["comparison"][t["comparison"]["experiment"] == "jit"]
    assert set(jit["status"]) == {"not comparable"} and len(jit) == 2
    assert "jit was not run on one-cpu" in " ".join(jit["reason"])
    env = t["environment"].set_index("field")
    assert env.loc["available CPUs", "two-cpu"] == 2 and env.loc["available CPUs", "one-cpu"] == 1
    assert bool(env.loc["available CPUs", "differs"]) and not bool(env.loc["schema version", "differs"])
    # own speedups: processes 2x on two-cpu, 1x on one-cpu (separate-job baselines here)
    assert c.loc[("two-cpu", "interpreter=default workload=cpu mode=processes workers=2"), "speedup"] == pytest.approx(
        2.0
    )
    assert c.loc[("one-cpu", "interpreter=default workload=cpu mode=processes workers=2"), "speedup"] == pytest.approx(
        1.0
    )
    best = t["best"].set_index(["host", "group"])
    assert best.loc[("two-cpu", "interpreter=default workload=cpu workers=2"), "best"] == "mode=processes"
    assert bool(best.loc[("two-cpu", "interpreter=default workload=cpu workers=2"), "shifts"])


def test_other_parameters_and_schema_version_make_points_incomparable(tmp_path):
    a = _host(tmp_path, "a", 2, [(_gil("sequential", cpu_iterations=1000), SEQ)])
    b = _host(tmp_path, "b", 2, [(_gil("sequential", cpu_iterations=2000), SEQ)])
    c = _host(tmp_path, "c", 2, [(_gil("sequential", cpu_iterations=1000), SEQ)], version=2)
    t = compare_hosts([load_host(d, ["gil"]) for d in (a, b, c)], "a", ["gil"])["comparison"].set_index("host")
    assert t.loc["b", "status"] == "not comparable"
    assert "cpu_iterations 2000 vs 1000" in t.loc["b", "reason"]
    assert "schema version 2 on c, 1 on a" in t.loc["c", "reason"]


def test_significance_needs_enough_replicates():
    assert min_two_sided_p(3, 3) == pytest.approx(0.1)
    r = compare_values(np.array([1.0, 1.1, 1.2]), np.array([2.0, 2.1, 2.2]))
    assert r["ratio"] == pytest.approx(2.1 / 1.1)
    assert r["verdict"] == "no significant difference" and "3 vs 3 give p >= 0.1" in r["reason"]


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda d: (d / "host.json").unlink(), "host.json: missing"),
        (lambda d: (d / "host.json").write_text("{not json"), "host.json: not valid JSON"),
        (lambda d: (d / "host.json").write_text("[]"), "host.json: no 'available_cpus' field"),
        (lambda d: (d / "gil" / "replicates.csv").write_text(""), "replicates.csv: file is empty"),
        (
            lambda d: (d / "host.json").write_text('{"available_cpus": "two"}'),
            "host.json: 'available_cpus' is 'two': a count of CPUs",
        ),
        (lambda d: (d / "host.json").write_text('{"available_cpus": 0}'), "'available_cpus' is 0"),
        (
            lambda d: (d / "gil" / "replicates.csv").write_bytes((d / "gil" / "replicates.csv").read_bytes()[:-40]),
            "replicates.csv: the last line is cut off",
        ),
        (lambda d: (d / "gil" / "summary.csv").unlink(), "summary.csv: missing while its sibling exists"),
        (lambda d: (d / "gil" / "findings.json").write_text("{not json"), "findings.json: not a JSON file"),
        (
            lambda d: (d / "gil" / "findings.json").write_text('{"experiment": "gil", "findings": "x"}'),
            r"findings.json: findings = 'x' is not valid",
        ),
        (
            lambda d: (d / "gil" / "summary.csv").write_text("workload,mode\ncpu,threads\n"),
            "summary.csv, column 'workers': missing column",
        ),
    ],
)
def test_broken_host_directory_names_the_file(two_hosts, breakage, message):
    a, _ = two_hosts
    breakage(a)
    with pytest.raises(DataError, match=message):
        load_host(a, ["gil"])


def test_compare_hosts_refuses_bad_requests(two_hosts):
    a, b = two_hosts
    hosts = [load_host(a, ["gil"]), load_host(b, ["gil"])]
    with pytest.raises(ValueError, match="baseline host 'nope' is not one of"):
        compare_hosts(hosts, "nope", ["gil"])
    with pytest.raises(ValueError, match="need at least 2 hosts"):
        compare_hosts(hosts[:1], "two-cpu", ["gil"])


def test_cli_and_report(two_hosts, tmp_path, capsys):
    a, b = two_hosts
    out = tmp_path / "compare"
    args = ["compare", "--baseline", "two-cpu", "--experiments", "gil", "--out-dir", str(out), str(a), str(b)]
    assert analysis_main(args) == 0
    assert (
        analysis_main(
            ["compare-figure", "gil", "--compare-dir", str(out), "--out", str(out / "figures/compare_gil.png")]
        )
        == 0
    )
    assert (out / "figures" / "compare_gil.png").read_bytes()[:4] == b"\x89PNG"
    html, md = out / "report.html", out / "report.md"
    assert report_main(["--compare-dir", str(out), "--html", str(html), "--md", str(md)]) == 0
    text = html.read_text()
    assert "CPU &lt;one-cpu&gt;" in text and "<one-cpu>" not in text  # data is escaped
    assert "0.50x (" in text and "slower" in text and "measured on one-cpu only" in text
    assert 'src="data:image/png;base64,' in text
    assert "| interpreter=default workload=cpu mode=processes workers=2 | one-cpu |" in md.read_text()
    assert "versions of the lab's file formats" not in text  # one version: no note
    # a broken host is a one-line error naming the file, exit status 1
    (b / "host.json").write_text("{")
    assert analysis_main(args) == 1
    assert f"{b / 'host.json'}: not valid JSON" in capsys.readouterr().err
    pd.read_csv(out / "comparison.csv")  # the earlier output is intact


def test_hosts_of_two_schema_versions_are_named_once_at_the_top(two_hosts, tmp_path):
    a, b = two_hosts
    host = json.loads((b / "host.json").read_text())
    (b / "host.json").write_text(json.dumps({k: v for k, v in host.items() if k != "schema_version"}))
    out = tmp_path / "compare"
    assert (
        analysis_main(
            ["compare", "--baseline", "two-cpu", "--experiments", "gil", "--out-dir", str(out), str(a), str(b)]
        )
        == 0
    )
    reasons = pd.read_csv(out / "comparison.csv").query("host == 'one-cpu'")["reason"]
    assert "results schema version none recorded on one-cpu, 1 on two-cpu" in reasons.tolist(), reasons.tolist()
    assert not reasons.str.contains("None").any(), reasons.tolist()
    figure = ["compare-figure", "gil", "--compare-dir", str(out), "--out", str(out / "figures/compare_gil.png")]
    assert analysis_main(figure) == 0
    html, md = out / "report.html", out / "report.md"
    assert report_main(["--compare-dir", str(out), "--html", str(html), "--md", str(md)]) == 0
    for text in (html.read_text(), md.read_text()):
        head = text.split("Contents")[0]  # stated once, before the sections
        assert "different versions of the lab's file formats (two-cpu: 1, one-cpu: none recorded;" in head


def test_two_runs_of_one_machine_compare_as_measured_and_say_how_the_speed_moved(tmp_path):
    """The same machine measured twice while its speed moved: in the second run the capacity
    probe read one CPU at half the speed and the sequential loop ran at half the tasks/s. The
    ratio is given as measured (0.5x), with no figure at equal core speed (taking the probe's
    speed out put 19 measured pairs of runs further apart: benchmarks/rate_transfer.py); the
    environment table gives each run's probe readings and flags the move."""
    dirs = []
    for name, speed, delivered in (("run1", 4e7, 2.0), ("run2", 2e7, 1.5)):
        d = tmp_path / name
        d.mkdir()
        (d / "host.json").write_text(json.dumps({"host": name, "available_cpus": 2, "schema_version": 1}))
        cap = {"capacity_1cpu_per_s": speed, "cpus_asked": 1, "cpus_delivered": 1.0, "delivered_cpus": delivered}
        rows = [{"wall_s": 2 / t, "tasks_per_s": t, **cap} for t in (v * speed / 4e7 for v in SEQ)]
        path = write_point(tmp_path / f"{name}-pts", "gil", _gil("sequential"), rows)
        args = ["summarise", "--experiment", "gil", "--out-dir", str(d / "gil"), "--host-json", str(d / "host.json")]
        assert analysis_main([*args, str(path)]) == 0
        dirs.append(load_host(d, ["gil"]))
    t = compare_hosts(dirs, "run1", ["gil"])
    r = t["comparison"].set_index("host").loc["run2"]
    assert r["ratio"] == pytest.approx(0.5) and "ratio_norm" not in t["comparison"].columns
    env = t["environment"].set_index("field")
    speed = env.loc[[f for f in env.index if f.startswith("one CPU's speed")][0]]
    assert (speed["run1"], speed["run2"], bool(speed["differs"])) == ("40.0 (40.0-40.0)", "20.0 (20.0-20.0)", True)
    cpus = env.loc[[f for f in env.index if f.startswith("CPUs delivered")][0]]
    assert (cpus["run1"], cpus["run2"], bool(cpus["differs"])) == ("2.00 (2.00-2.00)", "1.50 (1.50-1.50)", True)


def test_hosts_without_the_probe_read_none_and_are_not_flagged(two_hosts):
    """Hosts whose points ran no capacity probe read None in the probe's rows, not flagged."""
    a, b = two_hosts
    env = compare_hosts([load_host(a, ["gil"]), load_host(b, ["gil"])], "two-cpu", ["gil"])["environment"]
    rows = env[env["field"].str.contains("capacity probe")]
    assert len(rows) == 2 and rows[["two-cpu", "one-cpu"]].isna().all().all() and not rows["differs"].any()


def test_an_experiment_no_host_ran_is_listed_once_not_drawn(two_hosts, tmp_path):
    """jit is in the comparison but neither host ran it: one line names it; no empty section,
    table or figure stands for it."""
    a, b = two_hosts
    out = tmp_path / "compare"
    args = ["compare", "--baseline", "two-cpu", "--experiments", "gil", "jit", "--out-dir", str(out), str(a), str(b)]
    assert analysis_main(args) == 0
    fig = ["compare-figure", "gil", "--compare-dir", str(out), "--out", str(out / "figures/compare_gil.png")]
    assert analysis_main(fig) == 0  # jit's figure is never read
    html, md = out / "report.html", out / "report.md"
    assert report_main(["--compare-dir", str(out), "--html", str(html), "--md", str(md)]) == 0
    title = registry.get("jit").prose["title"]
    for text in (html.read_text(), md.read_text()):
        assert f"Not run on any compared host, so not compared: {title}." in text.replace("\\", "")
        assert text.count(title) == 1  # not in the contents either
    assert '<section id="jit">' not in html.read_text() and '<section id="gil">' in html.read_text()


def test_an_experiment_no_host_ran_listed_first_keeps_best_true_or_false(tmp_path):
    """Listed before the one they ran (the default list puts workload first), its rows without
    ``best`` must not turn the column into floats: 1.0 in comparison.csv stopped the figure."""
    grid = [(_gil(m), SEQ) for m in ("sequential", "threads")]  # the same grid: every gil row has its best
    a, b = _host(tmp_path, "a", 2, grid), _host(tmp_path, "b", 2, grid)
    out = tmp_path / "compare"
    args = ["compare", "--baseline", "a", "--experiments", "jit", "gil", "--out-dir", str(out), str(a), str(b)]
    assert analysis_main(args) == 0
    assert set(pd.read_csv(out / "comparison.csv", dtype=str)["best"].dropna()) == {"True", "False"}
    fig = ["compare-figure", "gil", "--compare-dir", str(out), "--out", str(out / "figures/compare_gil.png")]
    assert analysis_main(fig) == 0


def test_a_failed_point_does_not_poison_the_others(tmp_path):
    """A supervisor failure record (keys only, no other parameters) must not make the other
    points' parameters look different (2000000 vs 2000000.0 after a CSV round trip)."""
    a = _host(tmp_path, "a", 2, [(_gil(m, cpu_iterations=2000000), SEQ) for m in ("sequential", "threads")])
    b = _host(tmp_path, "b", 2, [(_gil(m, cpu_iterations=2000000), SEQ) for m in ("sequential", "threads")])
    reps = pd.read_csv(b / "gil" / "replicates.csv")
    threads = reps["mode"] == "threads"
    keys = ["host", "experiment", "workload", "mode", "workers", "repeat", "role", "metric"]
    failure = {**reps[threads].iloc[0][keys].to_dict(), "status": "failed", "reason": "crashed"}
    pd.concat([reps[~threads], pd.DataFrame([failure])]).to_csv(b / "gil" / "replicates.csv", index=False)
    summary = pd.read_csv(b / "gil" / "summary.csv")
    summary.loc[summary["mode"] == "threads", ["status", "median", "n"]] = ["failed", np.nan, 0]
    summary.to_csv(b / "gil" / "summary.csv", index=False)
    t = compare_hosts([load_host(a, ["gil"]), load_host(b, ["gil"])], "a", ["gil"])["comparison"]
    t = t[t["host"] == "b"].set_index("point")
    assert t.loc["interpreter=default workload=cpu mode=sequential workers=2", "status"] == "compared"
    assert t.loc["interpreter=default workload=cpu mode=threads workers=2", "reason"] == "status failed on b, ok on a"


def test_a_group_without_measurements_has_no_best(tmp_path):
    cpu = [(_gil("sequential"), SEQ), (_gil("processes"), [2 * v for v in SEQ])]
    io = [({"workload": "io", "mode": m, "workers": 2}, SEQ) for m in ("sequential", "threads")]
    a = _host(tmp_path, "a", 2, cpu + io)
    b = _host(tmp_path, "b", 2, cpu + [(p, "skipped") for p, _ in io])
    summary = pd.read_csv(b / "gil" / "summary.csv")
    assert not summary.loc[summary["workload"] == "io", "best"].any()  # not the skipped baseline
    best = compare_hosts([load_host(a, ["gil"]), load_host(b, ["gil"])], "a", ["gil"])["best"]
    best = best.set_index(["host", "group"])["best"]
    assert best[("b", "interpreter=default workload=io workers=2")] == "none (skipped)"
    io, cpu = "interpreter=default workload=io workers=2", "interpreter=default workload=cpu workers=2"
    assert best[("a", io)] == "mode=sequential"  # equal throughput: nothing beat it
    assert best[("b", cpu)] == best[("a", cpu)] == "mode=processes"


def test_ties_never_beat_the_exact_floor():
    r = compare_values(np.array([1.0, 1.0, 1.0]), np.array([2.0, 2.0, 2.0]))
    assert r["verdict"] == "no significant difference" and "3 vs 3" in r["reason"]


def test_a_broken_host_is_not_comparable_and_the_rest_are_compared(two_hosts, tmp_path, capsys):
    """At a cluster's scale one broken host directory must not sink the others' comparison: it
    is listed with the reason, on the console too, and the rest are compared."""
    a, b = two_hosts
    c = _host(tmp_path, "broken", 4, [(_gil("sequential"), SEQ)])
    reps = pd.read_csv(c / "gil" / "replicates.csv").drop(columns=["value"])
    reps.to_csv(c / "gil" / "replicates.csv", index=False)
    out = tmp_path / "compare"
    args = ["compare", "--baseline", "two-cpu", "--experiments", "gil", "--out-dir", str(out), str(a), str(b), str(c)]
    assert analysis_main(args) == 0
    err = capsys.readouterr().err
    assert f"not comparable: broken: {c / 'gil' / 'replicates.csv'}, column 'value': missing column" in err
    meta = json.loads((out / "hosts.json").read_text())
    assert [h["name"] for h in meta["hosts"]] == ["two-cpu", "one-cpu"]
    (broken,) = meta["not_comparable"]
    assert broken["name"] == "broken" and "column 'value'" in broken["reason"]
    assert (pd.read_csv(out / "comparison.csv")["status"] == "compared").any()
    assert (
        analysis_main(
            ["compare-figure", "gil", "--compare-dir", str(out), "--out", str(out / "figures/compare_gil.png")]
        )
        == 0
    )
    html = out / "report.html"
    assert report_main(["--compare-dir", str(out), "--html", str(html), "--md", str(out / "report.md")]) == 0
    assert "could not be read: not compared" in html.read_text() and "column &#39;value&#39;" in html.read_text()
    # the baseline itself broken: the first readable host is the baseline, and it is said
    args[2] = "broken"
    assert analysis_main(args) == 0
    assert "baseline host broken could not be read; two-cpu is the baseline" in capsys.readouterr().err
    args[2] = "zzz"  # a baseline that is no host at all
    assert analysis_main(args) == 0
    assert "baseline host zzz is not among the hosts (" in capsys.readouterr().err


def test_a_host_measured_before_a_key_existed_is_compared_where_it_can_be(tmp_path):
    """multiprocessing gained ``omp_wait_policy`` (a ``later_keys`` key): an older host's tables
    lack it. They load, the key reads "not recorded", and its points are listed as one host's
    only instead of being matched with the default policy's (which the older run may not have
    had); a missing key that is not declared later stays an error (the test above)."""
    new = _mp_host(tmp_path, "new", {"omp_wait_policy": "default"})
    old = _mp_host(tmp_path, "old", {})
    got = load_host(old, ["multiprocessing"])
    assert set(got.summaries["multiprocessing"]["omp_wait_policy"]) == {"not recorded"}
    rows = compare_hosts([load_host(new, ["multiprocessing"]), got], "new", ["multiprocessing"])["comparison"]
    theirs = rows[(rows["host"] == "old") & rows["point"].str.contains("omp_wait_policy=not recorded")]
    assert len(theirs) == 2 and (theirs["status"] == "not comparable").all()
    assert (theirs["reason"] == "point measured on old only (not in new's grid)").all(), theirs.to_dict("records")


def _mp_host(root, name, extra: dict):
    d = root / name / "multiprocessing"
    d.mkdir(parents=True)
    (root / name / "host.json").write_text(json.dumps({"host": name, "available_cpus": 2, "schema_version": 3}))
    paths = [
        write_point(
            root / f"{name}-points",
            "multiprocessing",
            {"processes": p, "threads": 1, **extra},
            [{"wall_s": 1.0, "samples_per_s": 1000.0 * p, "oversubscribed": False}] * 6,
        )
        for p in (1, 2)
    ]
    if not extra:  # written as an older lab wrote them: no column for the later key
        for path in paths:
            df = pd.read_csv(path)
            df.assign(omp_wait_policy="default").to_csv(path, index=False)
    args = [
        "summarise",
        "--experiment",
        "multiprocessing",
        "--out-dir",
        str(d),
        "--host-json",
        str(root / name / "host.json"),
    ]
    assert analysis_main([*args, *map(str, paths)]) == 0
    if not extra:
        for f in ("replicates.csv", "summary.csv"):
            pd.read_csv(d / f).drop(columns="omp_wait_policy").to_csv(d / f, index=False)
    return root / name


def test_fewer_than_two_hosts_is_one_line_saying_what_to_do(tmp_path, capsys):
    args = ["compare", "--baseline", "a", "--experiments", "gil", "--out-dir", str(tmp_path / "c")]
    assert analysis_main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: need at least 2 hosts to compare, got []: run the pipeline on another machine")
    assert not (tmp_path / "c").exists()


def test_too_few_hosts_because_one_is_unreadable_says_so(two_hosts, tmp_path, capsys):
    """One of two host directories incomplete (its summary.csv deleted): the error blamed a
    missing machine ("run the pipeline on another machine") while the cause stood only in the
    line above; it names the directory that could not be read."""
    a, b = two_hosts
    (a / "gil" / "summary.csv").unlink()
    args = ["compare", "--baseline", b.name, "--experiments", "gil", "--out-dir", str(tmp_path / "c"), str(a), str(b)]
    assert analysis_main(args) == 1
    err = capsys.readouterr().err
    assert f"not comparable: {a.name}: {a / 'gil' / 'summary.csv'}: missing while its sibling exists" in err
    assert f"error: need at least 2 hosts to compare; 1 could be read ({b.name}), and {a.name} could not" in err
    assert "run the pipeline on another machine" not in err and not (tmp_path / "c").exists()


def test_compare_chart_labels_legend_and_ticks(two_hosts, tmp_path):
    from analysis.figures import compare_chart, short_labels

    a, b = two_hosts
    out = tmp_path / "compare"
    assert (
        analysis_main(
            ["compare", "--baseline", "two-cpu", "--experiments", "gil", "--out-dir", str(out), str(a), str(b)]
        )
        == 0
    )
    comparison, meta = pd.read_csv(out / "comparison.csv"), json.loads((out / "hosts.json").read_text())
    fig = compare_chart(comparison, "gil", meta)
    top, bottom = fig.subfigs
    # every point shares interpreter=default and workers=... except one-cpu's workers=4 point,
    # which no host measured against a baseline: the labels keep what differs
    ticks = [t.get_text() for t in top.axes[0].get_yticklabels()]
    assert ticks and all("interpreter=default" not in t for t in ticks)
    assert "every point: interpreter=default" in top._suptitle.get_text()
    # the hosts' CPUs differ (2 and 1): the per-CPU diamond is drawn and named
    labels = [t.get_text() for t in bottom.legends[0].get_texts()]
    assert "one-cpu / two-cpu per available CPU" in labels
    assert "one-cpu / two-cpu (faster or slower)" in labels
    assert len([t for t in top.axes[1].get_xticklabels() if t.get_text()]) >= 3  # never a lone "1x"
    # one host against itself under two labels: no diamond on top of every circle, no empty
    # "faster or slower" entry
    meta_same = {**meta, "hosts": [{**h, "available_cpus": 2} for h in meta["hosts"]]}
    same = comparison.assign(verdict="no significant difference")
    labels = [t.get_text() for t in compare_chart(same, "gil", meta_same).subfigs[1].legends[0].get_texts()]
    assert labels == ["two-cpu (2 CPUs)", "one-cpu (2 CPUs)", "one-cpu / two-cpu (no clear difference)"]
    close = same.assign(ratio=1.0, ratio_ci_low=0.988, ratio_ci_high=1.013)  # within 2%: finer ticks
    axis = compare_chart(close, "gil", meta_same).subfigs[0].axes[1]
    assert [t.get_text() for t in axis.get_xticklabels() if t.get_text()] == ["0.99x", "1x", "1.01x"]
    assert short_labels(["a=1 b=2", "a=1 b=3"]) == (["b=2", "b=3"], "a=1")
    assert short_labels(["a=1", "a=1"]) == (["a=1", "a=1"], "")  # nothing would be left: keep them
    assert short_labels(["a=1 b=2"]) == (["a=1 b=2"], "")


def test_a_baseline_host_without_the_experiment_keeps_each_hosts_own_figures(two_hosts, tmp_path):
    """The baseline host did not run gil: no ratio can be formed, but each other host's row keeps
    what it says of itself (median, interval, unit, its own speedup): a tester found them blank."""
    a, _ = two_hosts
    empty = tmp_path / "no-gil"
    empty.mkdir()
    (empty / "host.json").write_text(json.dumps({"host": "no-gil", "available_cpus": 2, "schema_version": 1}))
    t = compare_hosts([load_host(a, ["gil"]), load_host(empty, ["gil"])], "no-gil", ["gil"])
    c = t["comparison"].set_index(["host", "point"])
    proc = c.loc[("two-cpu", "interpreter=default workload=cpu mode=processes workers=2")]
    assert proc["status"] == "not comparable" and proc["reason"] == "gil missing on the baseline host no-gil"
    assert proc["speedup"] == pytest.approx(2.0) and proc["metric"] == "tasks_per_s"
    assert proc["median"] == pytest.approx(2 * np.median(SEQ))
    assert proc["median_per_cpu"] == pytest.approx(np.median(SEQ))
    assert np.isnan(proc["ratio"])
