"""Intra-op threads experiment: throughput against ``torch.set_num_threads``.

The declaration; the measurement is in :mod:`experiments.intraop.measure`, findings, figures and
theory checks in :mod:`experiments.intraop.analysis`, the report's prose in ``report.yaml``. The
config section's schema, the command line and the parameter table come from its ``Params``.
"""

from lab.declare import Col, Experiment, thread_ladder

#: Workloads whose metric is GFLOP/s (2 n^3 flop per call); the others report samples/s.
MATMULS = ("matmul", "matmul_bf16")


def metric_for(point) -> str:
    """GFLOP/s for the matrix multiplies, training samples/s for the training steps."""
    return "gflop_per_s" if point["workload"] in MATMULS else "samples_per_s"


def parallel_units(point) -> float:
    """``p`` for parallel efficiency: the intra-op threads."""
    return float(point["threads"])


def resolve_threads(value, ncpu: int) -> list[int]:
    """``threads: auto`` is :func:`lab.declare.thread_ladder` (powers of two up to the
    available CPUs, and their number) plus 2 x available CPUs (oversubscribed); a list is taken
    as it is."""
    if value == "auto":
        return [*thread_ladder(ncpu), 2 * ncpu]
    return list(value)


EXPERIMENT = Experiment(
    name="intraop",
    keys=("workload", "threads"),
    metrics={"gflop_per_s": "GFLOP/s", "samples_per_s": "samples/s"},
    metric_for=metric_for,
    group=("workload",),
    baseline={"threads": 1},
    parallel_units=parallel_units,
    figures=("intraop_scaling",),
    free_params=frozenset({"warmup"}),
    resolve={"threads": resolve_threads},
    columns={
        "gflop_per_s": Col(
            "float",
            "`2 n^3 x calls / wall_s / 1e9`, n = `matmul_size`; metric for `matmul` and `matmul_bf16`; `nan` for"
            " `mlp`, `tiny`",
        ),
        "samples_per_s": Col(
            "float",
            "`batch x calls / wall_s` (batch = `batch_size` for `mlp`, 4 for `tiny`); metric for `mlp`, `tiny`; "
            "`nan` for `matmul`, `matmul_bf16`",
        ),
        "calls": Col(
            "int",
            "calls timed in the window: `iterations`, or more where those take less than `min_window_s` (the"
            " fastest of calls timed before the first window)",
            "calls",
        ),
        "oversubscribed": Col("bool", "`threads > available_cpus`", "-"),
        "dtype": Col(
            "str", "element type of the workload's tensors: `bfloat16` for `matmul_bf16`, else `float32`", "-"
        ),
        "torch_threads": Col(
            "int",
            "`torch.get_num_threads()` after setting it before the window (equals `threads`, else the job fails)",
            "threads",
        ),
        "interop_threads": Col("int", "`torch.get_num_interop_threads()`; set to 1", "threads"),
        "omp_num_threads_env": Col("str", "`$OMP_NUM_THREADS` in the job; empty if unset", "-"),
    },
    order=40,
)

#: Workloads in report order and what the figures call them.
WORKLOADS = {
    "matmul": "n x n matmul, float32",
    "matmul_bf16": "n x n matmul, bfloat16",
    "mlp": "MLP training step",
    "tiny": "Linear(100,100), batch 4",
}
