"""Convoy effect: how late does a thread that sleeps wake up next to a CPU-bound thread, under
the GIL and without it, for each switch interval?

The declaration; the measurement is in
:mod:`experiments.convoy.measure`, findings, figures and theory checks in
:mod:`experiments.convoy.analysis`, the report's prose in ``report.yaml``. The config section's
schema, the command line and the parameter table come from its ``Params``. The threads are
:func:`experiments.convoy.tasks.convoy`.
"""

from lab import interpreters
from lab.declare import Col, Column, Experiment, Flag, SpanKind, Timeline

EXPERIMENT = Experiment(
    name="convoy",
    keys=("interpreter", "switch_interval_ms"),
    metrics={"io_iterations_per_s": "iterations/s"},
    group=("interpreter", "switch_interval_ms"),
    baseline={},  # each job measures the sleeping thread alone, interleaved with the pair
    figures=("convoy_latency",),
    extra_columns=(
        Column("latency_p50_ms", "wake-up delay, median", "ms"),
        Column("latency_p99_ms", "wake-up delay, p99", "ms"),
    ),
    flags=(Flag("gil_enabled", "GIL off", "all"),),
    free_params=frozenset({"warmup"}),
    host_files=("interpreters.json",),
    interpreters=True,
    timeline=Timeline(
        title="Convoy timeline: the sleeping thread and the CPU-bound thread, and CPU utilisation",
        kinds=(
            SpanKind("io", "#56B4E9", "sleep iteration (10 ms asked)"),
            SpanKind("cpu", "#0072B2", "counting chunk"),
        ),
        on_cpu_share=True,
    ),
    columns={
        "io_iterations_per_s": Col(
            "float", "iterations of the sleeping thread over the window: `io_iterations / wall_s`"
        ),
        "latency_p50_ms": Col(
            "float", "how late the sleeping thread woke up, per iteration, over the window's iterations: median"
        ),
        "latency_p99_ms": Col("float", "the same, 99th percentile"),
        "python_version": Col(
            "str", "the version of the interpreter that ran the threads (the point's `interpreter`)", "-"
        ),
        "gil_enabled": interpreters.COLUMNS["gil_enabled"],
    },
    order=12,
)
