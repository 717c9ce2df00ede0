"""GIL experiment: do threads speed up CPU-bound Python? I/O-bound Python? Do processes?

The declaration; the measurement is in :mod:`experiments.gil.measure`, findings, figures and
theory checks in :mod:`experiments.gil.analysis`, the report's prose in ``report.yaml``. The
config section's schema, the command line and the parameter table come from its ``Params``.
"""

from lab import interpreters, workspeed
from lab.declare import Col, Experiment, Flag, SpanKind, Timeline


def parallel_units(point) -> float:
    """``p`` for parallel efficiency: the tasks run at once (1 when sequential)."""
    return 1.0 if point["mode"] == "sequential" else float(point["workers"])


EXPERIMENT = Experiment(
    name="gil",
    keys=("interpreter", "workload", "mode", "workers"),
    metrics={"tasks_per_s": "tasks/s"},
    group=("interpreter", "workload", "workers"),
    baseline={"mode": "sequential"},
    parallel_units=parallel_units,
    figures=("gil_speedup",),
    free_params=frozenset({"warmup"}),
    flags=(Flag("gil_enabled", "GIL off", "all"),),
    timeline=Timeline(
        title="GIL timeline: work spans per thread or process, and CPU utilisation",
        kinds=(
            SpanKind("cpu", "#0072B2", "CPU-bound chunk"),
            SpanKind("io", "#56B4E9", "sleep-loop chunk"),
            SpanKind("release", "#009E73", "sha256 chunk (releases the GIL)"),
            SpanKind("shared", "#CC79A7", "shared list/dict chunk"),
        ),
        on_cpu_share=True,
    ),
    host_files=("interpreters.json",),
    interpreters=True,
    columns={
        "tasks_per_s": Col("float", "`workers / wall_s`"),
        "start_method": Col("str", "`fork` for `mode=processes`, empty otherwise (so empty in baseline rows)", "-"),
        "python_version": Col(
            "str",
            "the version of the interpreter that ran the tasks (the point's `interpreter`), as it said when started",
            "-",
        ),
        **interpreters.COLUMNS,
        **workspeed.COLUMNS,
    },
    order=10,
)

#: Workloads in report order and what the report calls them.
WORKLOADS = {
    "cpu": "CPU-bound Python (counting loop)",
    "io": "I/O-bound Python (sleep loop)",
    "release": "C code that releases the GIL (sha256)",
    "shared": "Threads on one shared list and dict",
}

#: Modes in report order.
MODES = ("sequential", "threads", "processes")
