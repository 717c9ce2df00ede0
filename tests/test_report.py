"""Report rendering from analysis outputs: sections, offline HTML, escaping, Markdown."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import gil_fixture, write_point
from markupsafe import escape

from analysis.__main__ import main as analysis_main
from lab import registry
from report.__main__ import main as report_main
from report.build import SECTIONS
from report.render import html_text


def _text(fig: str) -> dict:
    """Caption and alt text of a figure: its experiment's report.yaml, or the report's own."""
    owner = registry.figures().get(fig)
    return registry.get(owner).prose["figures"][fig] if owner else SECTIONS["figures"][fig]


def _host(tmp_path, label="fixture"):
    host = {
        "host": label,
        "cpu_model": "Test <b>CPU</b> & co",
        "available_cpus": 2,
        "logical_cpus": 2,
        "physical_cores": 2,
        "python_version": "3.11.7",
        "torch_version": "2.13.0",
        "torch_parallel": {"aten_parallel_backend": "OpenMP", "at_num_threads": 2},
        "torch_parallel_info": "ATen/Parallel:\n\tat::get_num_threads() : 2",
        "load_avg_1_5_15": [0.1, 0.2, 0.3],
        "isa": {"avx2": True, "avx512f": False},
    }
    (tmp_path / "host.json").write_text(json.dumps(host))
    return tmp_path / "host.json"


@pytest.fixture
def host_dir(built_host_dir, tmp_path):
    """results/<host> with gil (fixture data) and jit (one point skipped with a marked-up reason):
    a copy of the module's one analysed directory, which a test may change."""
    return Path(shutil.copytree(built_host_dir, tmp_path / "fixture"))


@pytest.fixture(scope="module")
def built_host_dir(tmp_path_factory):
    """The analysed directory :func:`host_dir` copies (analysis, figures and traces: seconds)."""
    tmp_path = tmp_path_factory.mktemp("report")
    d = tmp_path / "fixture"
    d.mkdir()
    host = _host(d)
    gil_paths = gil_fixture(tmp_path / "points")
    for p in gil_paths:
        p.with_name("spans.csv").write_text(
            "repeat,actor,kind,start_s,end_s,cpu_s\n0,thread-0,cpu,0.0,0.1,0.05\n0,thread-1,cpu,0.0,0.1,0.05\n"
        )
    jit_paths = [
        write_point(
            tmp_path / "points",
            "jit",
            {"model": "mlp", "mode": m},
            [
                {
                    "wall_s": w,
                    "samples_per_s": 64 / w,
                    "latency_ms": 1000 * w,
                    "setup_s": 0.01,
                    "first_call_s": 0.02,
                    "allclose": True,
                    "max_abs_diff": 0.0,
                }
                for w in (0.001, 0.0011)
            ],
        )
        for m in ("eager", "script")
    ]
    jit_paths.append(
        write_point(
            tmp_path / "points",
            "jit",
            {"model": "mlp", "mode": "compile"},
            [{"status": "skipped", "reason": "no <script>alert(1)</script> compiler"}],
        )
    )
    for exp, paths in (("gil", gil_paths), ("jit", jit_paths)):
        assert (
            analysis_main(
                [
                    "summarise",
                    "--experiment",
                    exp,
                    "--out-dir",
                    str(d / exp),
                    "--host-json",
                    str(host),
                    *map(str, paths),
                ]
            )
            == 0
        )
        for fig in registry.get(exp).spec.all_figures:
            assert analysis_main(["figure", fig, "--host-dir", str(d), "--out", str(d / "figures" / f"{fig}.png")]) == 0
    gil_summary = d / "gil" / "summary.csv"
    assert (
        analysis_main(
            [
                "fidelity",
                "--host-json",
                str(host),
                str(gil_summary),
                "--sample-hz",
                "10",
                "--out",
                str(d / "fidelity.csv"),
            ]
        )
        == 0
    )
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"experiment": "gil", "job_start_unix": 1.0, "job_end_unix": 3.0}))
    (tmp_path / "metrics.csv").write_text("wall_s\n0.5\n")
    runinfo = ["runinfo", "--host-json", str(host), "--out", str(d / "run.json"), "--jobs-csv", str(d / "jobs.csv")]
    assert analysis_main([*runinfo, str(job)]) == 0
    assert (
        analysis_main(["figure", "job_schedule", "--host-dir", str(d), "--out", str(d / "figures/job_schedule.png")])
        == 0
    )
    for name in ("gil", "jobs"):
        assert analysis_main(["trace", name, "--host-dir", str(d), "--out", str(d / "traces" / f"{name}.json")]) == 0
    return d


def test_report_renders_every_section(host_dir):
    html, md = host_dir / "report.html", host_dir / "report.md"
    assert (
        report_main(["--host-dir", str(host_dir), "--experiments", "gil", "jit", "--html", str(html), "--md", str(md)])
        == 0
    )
    text = html.read_text()
    for exp in ("gil", "jit"):
        assert f'<section id="{exp}">' in text
        assert f'href="#{exp}"' in text  # table of contents
    figures = [*registry.get("gil").spec.all_figures, *registry.get("jit").spec.all_figures, "job_schedule"]
    assert text.count("<img ") == len(figures) == 5
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'<img src="([^"]+)"', text))
    assert not re.search(r'src="(https?:)?//', text), "the HTML must not load anything from the network"
    assert not re.search(r"<link[^>]+href=", text) and "@import" not in text
    # every figure has its own caption and alt text; timelines link their Chrome traces
    for fig in figures:
        caption = html_text(" ".join(_text(fig)["caption"].split()))
        assert f'<figure id="fig-{fig}">' in text and f"<figcaption>{caption}</figcaption>" in text, fig
        assert f'alt="{escape(_text(fig)["alt"])}"' in text, fig
    assert '<a href="traces/gil.json">' in text and '<a href="traces/jobs.json">' in text
    assert "traces/jit.json" not in text  # jit records no spans: no trace
    assert "2 threads gave 1.00x" in text  # a finding computed from the fixture data
    assert "71.47 s vs 72.08 s" in text  # the seed article's published timings
    assert "skipped" in text
    assert '<section id="trust">' in text and "CPU-bound Python: 2 threads over sequential" in text
    assert "25% of it inside measured windows" in text  # 0.5 s of a 2 s measurement phase
    mdtext = md.read_text()
    assert "![" in mdtext and "(figures/gil_timeline.png)" in mdtext
    assert "(figures/job_schedule.png)" in mdtext and "[traces/gil.json](traces/gil.json)" in mdtext
    assert "## GIL: threads, processes and pure-Python code" in mdtext
    # the tables' columns are explained once, under the first; the next points back to it
    explained = "the CI widened on the log scale by"
    assert mdtext.count(explained) == 1 and mdtext.index(explained) < mdtext.index("## TorchScript")
    refer = "One row per configuration point; its median, speedup and rerun columns read as under the first table"
    assert f"{refer} ([GIL: threads, processes and pure-Python code, across interpreters](#gil))." in mdtext
    assert text.count("widened on the log scale by\n  sqrt(2)") == 1 and text.count("read as under the first") == 1


def test_every_figure_has_caption_and_alt_text():
    for fig in [*registry.figures(), "job_schedule"]:
        text = _text(fig)
        assert len(text["caption"]) > 40 and len(text["alt"]) > 30, fig


def test_report_escapes_markup_from_data(host_dir):
    html = host_dir / "report.html"
    report_main(
        ["--host-dir", str(host_dir), "--experiments", "jit", "--html", str(html), "--md", str(host_dir / "r.md")]
    )
    text = html.read_text()
    assert "<script>alert(1)</script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "Test &lt;b&gt;CPU&lt;/b&gt; &amp; co" in text


def _rendered_markdown(text: str) -> str:
    """report.md as a CommonMark renderer with GitHub's tables and strikethrough shows it."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)


def test_markdown_report_escapes_markup_from_data(host_dir):
    """Markdown's own escaping (a backslash), not HTML's: rendered, the data reads as it was
    (no tag, no '&lt;' shown as text); in the file, no HTML entity at all."""
    md = host_dir / "r.md"
    report_main(
        ["--host-dir", str(host_dir), "--experiments", "jit", "--html", str(host_dir / "r.html"), "--md", str(md)]
    )
    text = md.read_text()
    assert not re.search(r"(?<!\\)<(script|b)>", text)  # every tag from data made inert
    assert "&lt;" not in text and "&gt;" not in text and "&amp;" not in text
    assert "\\<script>alert(1)\\</script>" in text and "Test \\<b>CPU\\</b> & co" in text
    page = _rendered_markdown(text)
    assert "<script>" not in page and "<b>CPU" not in page
    assert "no &lt;script&gt;alert(1)&lt;/script&gt; compiler" in page  # the text itself, shown
    assert "Test &lt;b&gt;CPU&lt;/b&gt; &amp; co" in page
    assert "&amp;lt;" not in page and "&amp;gt;" not in page  # nothing escaped twice


@pytest.mark.parametrize(
    "data",
    [
        "t<a>b",
        "x >= 1.40x & y",
        "`python t<x.py` | grep ok",
        "num_workers~2 ~3~ *not bold* _not em_ [not](link) #1 __getitem__",
        "> 1. - not a block",
        "1. not a list",
        "- not a list either",
        "C:\\path\\* and a lone ` tick",
    ],
)
def test_markdown_escaping_shows_data_as_it_is(data):
    """In a table cell, in a list item (where a line starts: md_block) and in a code span: the
    rendered page shows the data's own characters (the code span's own backticks aside), with
    no markup made from them."""
    from report.render import md_block, md_code, md_text

    page = _rendered_markdown(f"| a | b |\n|---|---|\n| {md_text(data)} | {md_code(data)} |\n\n- {md_block(data)}\n")
    cells = re.findall(r"<td>(.*?)</td>", page)
    item = re.findall(r"<li>(.*?)</li>", page)[0]
    shown = str(escape(data))
    plain = lambda html: re.sub(r"</?code>", "", html).replace("`", "")  # noqa: E731
    assert plain(cells[0]) == plain(item) == shown.replace("`", ""), (cells, item)
    assert cells[1] == f"<code>{shown}</code>"
    assert not re.search(r"<(em|strong|a|del|h\d|blockquote|ol|ul)\b", page.split("<ul>")[0] + item)


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        ("set `max_window_s` higher", "set <code>max_window_s</code> higher"),
        ("`a<b` & `` x`y ``", "<code>a&lt;b</code> &amp; <code>x`y</code>"),
        ("a lone ` tick <i>", "a lone ` tick &lt;i&gt;"),
    ],
)
def test_html_shows_code_spans_as_code_and_the_rest_as_text(data, shown):
    """The HTML page renders a finding's code spans as <code> (the Markdown report does by its
    syntax) instead of showing the backticks, and escapes everything, code included."""
    from report.render import environment

    assert environment().from_string("{{ t | spans }}", globals={}).render(t=data) == shown


def test_findings_with_code_spans_render_as_code_in_html(host_dir):
    findings = host_dir / "jit" / "findings.json"
    items = json.loads(findings.read_text())
    items["findings"] = ["Raise `max_window_s` to <b>2</b>"]
    findings.write_text(json.dumps(items))
    html = host_dir / "r.html"
    report_main(
        ["--host-dir", str(host_dir), "--experiments", "jit", "--html", str(html), "--md", str(host_dir / "r.md")]
    )
    page = html.read_text()
    assert "Raise <code>max_window_s</code> to &lt;b&gt;2&lt;/b&gt;" in page and "`max_window_s`" not in page


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: d.update(findings="oops"), "findings = 'oops' is not valid ('oops' is not of type 'array')"),
        (lambda d: d.update(headlines=[{"q": 1}]), "headlines.0 = {'q': 1} is not valid ('question' is a required"),
        (lambda d: d.update(findings=["ok", 2]), "findings.1 = 2 is not valid (2 is not of type 'string'); allowed: a"),
        (lambda d: d.update(tables=[{"rows": 1}]), "tables.0 = {'rows': 1} is not valid ('caption' is a required"),
        (lambda d: d.pop("findings"), "(top level) = {"),
    ],
)
def test_a_findings_file_of_the_wrong_shape_is_named_in_one_line(host_dir, capsys, edit, said):
    """A hand-edited findings.json stopped the report with a template's TypeError or KeyError;
    it is checked against schemas/findings.schema.yaml and named, with the key and what belongs
    there, before anything renders, and the report's outputs are left as they were."""
    findings = host_dir / "jit" / "findings.json"
    items = json.loads(findings.read_text())
    edit(items)
    findings.write_text(json.dumps(items))
    html, md = host_dir / "r.html", host_dir / "r.md"
    with pytest.raises(SystemExit) as stop:
        report_main(["--host-dir", str(host_dir), "--experiments", "jit", "--html", str(html), "--md", str(md)])
    err = capsys.readouterr().err
    assert stop.value.code == 1 and f"error: {findings}: {said}" in err
    # how to write it again without measuring, with the run's own host label (not this machine's)
    assert "--rerun-triggers mtime --forcerun analyse" in err and "host=fixture" in err, err
    assert not html.exists() and not md.exists()


def test_one_available_cpu_reads_in_the_singular(host_dir):
    host = json.loads((host_dir / "host.json").read_text()) | {"available_cpus": 1}
    (host_dir / "host.json").write_text(json.dumps(host))
    md, html = host_dir / "r.md", host_dir / "r.html"
    report_main(["--host-dir", str(host_dir), "--experiments", "jit", "--html", str(html), "--md", str(md)])
    for text in (md.read_text(), html.read_text()):
        assert "co, 1 CPU available." in text and "1 available CPUs" not in text and "1 CPUs" not in text


def test_the_shells_python_gil_is_reported_as_not_applied():
    """PYTHON_GIL=1 in the shell that ran Snakemake: the interpreters start with -I, so a
    free-threaded label without python_gil ran with the GIL off; the environment table says so,
    and how to set it per label."""
    from report.build import user_env_rows

    env = {"variables": {"OMP_NUM_THREADS": "2", "PYTHON_GIL": "1"}, "torch_threads": 2, "torch_interop_threads": 2}
    interps = [
        {"label": "default", "ok": True, "free_threaded": False, "gil_enabled": True},
        {"label": "3.13t", "ok": True, "free_threaded": True, "gil_enabled": False},
    ]
    rows = dict(user_env_rows(env, interps))
    assert rows["Thread variables of your shell"] == "OMP_NUM_THREADS=2"
    said = rows["PYTHON_GIL of your shell"]
    assert said.startswith("PYTHON_GIL=1 was set and not applied: the measured interpreters start with -I")
    assert "(3.13t GIL off)" in said and "python_gil: 1" in said
    assert "PYTHON_GIL of your shell" not in dict(user_env_rows({"variables": {}}, interps))


def test_a_models_own_precision_figure_comes_before_an_operators():
    """The workload measured bfloat16 on the user's model: that line leads the question of
    precision, and the matmul's line follows it, saying whose figure to go by."""
    from report.trust import _scoped

    lines = [
        {"question": "What should I change?", "answer": "a", "anchor": "workload"},
        {"question": "bf16 for your model?", "answer": "1.80x", "topic": "precision", "scope": "model"},
        {"question": "threads?", "answer": "2", "anchor": "intraop"},
        {"question": "bf16 for a matmul?", "answer": "4.30x", "topic": "precision", "scope": "operator"},
    ]
    out = _scoped(lines)
    assert [h["question"] for h in out] == [
        "What should I change?",
        "bf16 for your model?",
        "bf16 for a matmul?",
        "threads?",
    ]
    assert out[2]["answer"] == "4.30x (your model's own figure is the line above)"
    alone = _scoped([lines[3]])  # no model figure: the operator's line as it is
    assert alone[0]["answer"] == "4.30x"


def test_the_matmul_bf16_headline_names_its_operator():
    import pandas as pd

    from experiments.intraop.analysis import headlines
    from lab.contract import Context

    rows = []
    for w, gflops in (("matmul", 90.0), ("matmul_bf16", 390.0)):
        rows.append({"workload": w, "threads": 1, "median": gflops, "speedup": 1.0, "best": True, "status": "ok"})
        rows[-1] |= {"speedup_ci_low": 1.0, "speedup_ci_high": 1.0, "reason": "", "speedup_source": "baseline"}
    summary = pd.DataFrame(rows)
    out = headlines(Context({}, summary=summary, replicates=pd.DataFrame({"matmul_size": [1024, 1024]})))
    (bf16,) = [h for h in out if h.get("topic") == "precision"]
    assert bf16["question"] == "Does bfloat16 pay on this CPU, for a 1024x1024 float matmul?"
    assert (
        bf16["answer"].startswith("for a 1024x1024 float matmul only: bfloat16 4.33x") and bf16["scope"] == "operator"
    )


def test_the_summary_table_gives_each_speedup_its_rerun_interval(host_dir):
    """The column "a rerun (95%)" holds summary.csv's rerun interval of every point with a
    speedup interval, and stays empty for the baseline (speedup 1 by definition). The speedup
    cell writes the speedup as the findings do (1.90x in both, not 1.9x in the table)."""
    from analysis.findings import fmt_x
    from report.build import summary_table

    summary = pd.read_csv(host_dir / "gil" / "summary.csv")
    table = summary_table(summary, "gil")
    col = table["columns"].index("a rerun (95%)")
    assert table["columns"][col - 1] == "speedup (95% CI)"
    for (_, r), row in zip(summary.iterrows(), table["rows"]):
        if r["speedup_source"] == "baseline" or not np.isfinite(r["speedup_rerun_low"]):
            assert row[col] == ""
        else:
            assert row[col] == f"{r['speedup_rerun_low']:.2f}-{r['speedup_rerun_high']:.2f}"
            assert row[col - 1] == fmt_x(r).replace("95% CI ", ""), (row[col - 1], fmt_x(r))
            assert r["speedup_rerun_low"] <= r["speedup_ci_low"] <= r["speedup_ci_high"] <= r["speedup_rerun_high"]
    assert any(row[col] for row in table["rows"])


def test_a_baseline_kept_as_best_says_no_point_cleared_it():
    """Where no point's CI clears the baseline, the baseline row is flagged best (keep it); the
    flag says so, since beside "no clear winner" a bare "best" on the sequential row reads as a
    contradiction. A point that cleared it is plainly best."""
    from report.build import _flags

    spec = registry.get("gil").spec
    base = pd.Series({"best": True, "speedup_source": "baseline", "noisy": False, "contended": False})
    point = base.copy()
    point["speedup_source"] = "interleaved"
    assert _flags(spec, base) == "best (the baseline: no point clearly faster)"
    assert _flags(spec, point) == "best"


def test_an_oversubscribed_flag_gives_the_wait_the_kernel_measured():
    """The flags column says how much of the time threads waited for a CPU (``cpu_wait_pct``)
    where the kernel measured it, and the bare flag where it did not (no PSI, older files)."""
    from report.build import _flags

    spec = registry.get("dataloader").spec
    row = pd.Series({"oversubscribed": True, "cpu_wait_pct": 48.7, "best": False, "noisy": False})
    assert _flags(spec, row) == "oversubscribed (threads waited for a CPU 49% of the time)"
    assert _flags(spec, row.drop("cpu_wait_pct")) == "oversubscribed"
    assert _flags(spec, pd.Series({**row, "cpu_wait_pct": float("nan")})) == "oversubscribed"


def test_the_job_schedule_names_a_job_without_a_window():
    """A skipped point's job (bfloat16 on a CPU without it) is a row with a sliver of start-up and
    no window: its label says why the row is empty."""
    from analysis.schedule import job_schedule

    jobs = pd.DataFrame(
        [
            {"job": "intraop threads=1", "phase": "startup", "start_unix": 0.0, "end_unix": 0.1},
            {"job": "intraop threads=1", "phase": "window", "start_unix": 0.5, "end_unix": 1.0},
            {"job": "bf16 threads=1", "phase": "startup", "start_unix": 1.2, "end_unix": 1.25},
        ]
    )
    fig = job_schedule(jobs, {"host": "h"})
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["intraop threads=1", "bf16 threads=1 (no window: skipped or failed)"]


def test_a_missing_host_json_or_one_without_a_count_of_cpus_is_named(host_dir, capsys):
    """Without host.json the report rendered "unknown CPU, ? CPUs available" and exited 0 (a
    missing run.json was an error); with ``available_cpus: "two"`` it stopped in a TypeError.
    Both are named in one line, and nothing is written."""
    html, md = host_dir / "r.html", host_dir / "r.md"
    args = ["--host-dir", str(host_dir), "--experiments", "jit", "--html", str(html), "--md", str(md)]
    facts = json.loads((host_dir / "host.json").read_text())
    (host_dir / "host.json").unlink()
    for said in (
        f"error: cannot read {host_dir / 'host.json'}: No such file or directory",
        f"error: {host_dir / 'host.json'}: 'available_cpus' is 'two': a count of CPUs (integer >= 1) was expected",
    ):
        with pytest.raises(SystemExit) as stop:
            report_main(args)
        assert stop.value.code == 1 and said in capsys.readouterr().err
        assert not html.exists() and not md.exists()
        (host_dir / "host.json").write_text(json.dumps(facts | {"available_cpus": "two"}))


def test_a_reason_shared_by_several_unmeasured_points_is_written_once():
    """Points skipped for one reason (no native bfloat16, at every thread count) make one entry
    of the list of points without a measurement, named together and counted, and the summary
    table gives the reason on the first of their rows; another reason keeps its own entry."""
    from report.build import summary_table, unmeasured

    summary = pd.read_csv(Path(__file__).parent / "fixtures" / "intraop_summary_skipped.csv")
    rows = summary[summary["status"] != "ok"]
    why = rows["reason"].iloc[0]
    assert why.startswith("no native bfloat16 on this CPU") and (rows["reason"] == why).sum() == 3
    got = unmeasured(rows, ["workload", "threads"])
    assert got[0] == {"point": "workload=matmul_bf16 threads=1, 2, 4", "status": "skipped", "reason": why, "points": 3}
    assert got[1]["point"] == "workload=matmul threads=2; workload=tiny threads=4" and got[1]["points"] == 2
    assert got[1]["status"] == "failed" and len(got) == 2
    flags = [row[-1] for row in summary_table(summary, "intraop")["rows"]]
    assert flags[1:4] == [f"skipped: {why}", "as above", "as above"], flags
    assert flags[4].startswith("failed: ") and flags[5] == "as above", flags


def test_the_theory_checks_write_their_units_as_the_rest_of_the_report(host_dir):
    """A speedup with two decimals and its CI's bounds alike (1.90x, not 1.9x), a share with the
    % sign against the number (2.59% of one CPU, not 2.59 %), a time with a space (5.3 ms)."""
    from report.trust import trust_context

    nan = float("nan")
    rows = [
        ("sampler's own cost at 40 Hz", "< 4% of one CPU", 2.59, nan, nan),
        ("sampler: one busy-looping process", "49.9% +- 10 points", 49.9, nan, nan),
        ("Convoy: median wake-up delay at 5 ms interval", ">= 2.5 ms", 5.3, nan, nan),
        ("matmul GFLOP/s: 2 threads over 1", ">= 1.50x", 1.9, 1.41, 1.93),
    ]
    fidelity = pd.DataFrame(
        [dict(zip(("check", "expected", "measured", "ci_low", "ci_high"), r), verdict="pass", reason="") for r in rows]
    )
    run = json.loads((host_dir / "run.json").read_text())
    got = [c["measured"] for c in trust_context(fidelity, run, [], 0.0)["checks"]]
    assert got == ["2.59% of one CPU", "49.9%", "5.3 ms", "1.90x (95% CI 1.41-1.93)"]
