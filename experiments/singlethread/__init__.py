"""Single-thread cost: how fast does one thread of pure Python run under each interpreter,
against the first configured one (a GIL build)?

The declaration; the measurement is in
:mod:`experiments.singlethread.measure`, findings and the chart in
:mod:`experiments.singlethread.analysis`, the report's prose in ``report.yaml``. The config
section's schema, the command line and the parameter table come from its ``Params``. The tasks
are :mod:`lab.pytasks`' (the gil experiment's), run sequentially, one task.
"""

from lab import interpreters
from lab.declare import Col, Experiment, Flag

EXPERIMENT = Experiment(
    name="singlethread",
    keys=("interpreter", "workload"),
    metrics={"tasks_per_s": "tasks/s"},
    group=("workload",),  # best: the interpreter whose one thread ran fastest against the reference
    baseline={},  # each job measures the reference interpreter interleaved with its own
    figures=("singlethread_ratio",),
    free_params=frozenset({"warmup"}),
    flags=(Flag("gil_enabled", "GIL off", "all"),),
    host_files=("interpreters.json",),
    interpreters=True,
    columns={
        "tasks_per_s": Col("float", "`1 / wall_s`: one task, run on one thread"),
        "python_version": Col(
            "str",
            "the version of the interpreter that ran the task; baseline rows: the first interpreter of config "
            "`interpreters`, the reference",
            "-",
        ),
        **interpreters.COLUMNS,
    },
    order=11,
)

#: Workloads in report order and what the report calls them.
WORKLOADS = {
    "cpu": "CPU-bound Python (counting loop)",
    "release": "C code that releases the GIL (sha256)",
    "shared": "appends, pops and dict updates",
}
