"""Start-method experiment: what the DataLoader's multiprocessing start method (``fork``,
``spawn``, ``forkserver``) costs at the start of an epoch, per batch and at its end.

The declaration; the measurement is in :mod:`experiments.startmethod.measure`, findings and the
figure in :mod:`experiments.startmethod.analysis`, the report's prose in ``report.yaml``. The
config section's schema, the command line and the parameter table come from ``Params``.
Every point is compared with ``fork`` (the Linux default), measured interleaved in its job.
"""

from lab.declare import Col, Column, Experiment
from lab.pressure import WORKERS_OVERSUBSCRIBED


def check_config(section) -> None:
    """``batches`` must exceed the batches requested at start-up (``num_workers`` x 2, the
    DataLoader's prefetch), else no batch is left for the steady state: refused at parse time,
    one line naming the key, rather than in every job.

    Raises:
        ValueError: naming ``startmethod.batches``.
    """
    least = int(section["num_workers"]) * 2 + 1
    if int(section["batches"]) < least:
        raise ValueError(
            f"config key startmethod.batches: {section['batches']} is not allowed (the first num_workers x 2 ="
            f" {least - 1} batches are the start-up round); allowed: integer >= {least}"
        )


EXPERIMENT = Experiment(
    name="startmethod",
    keys=("start_method",),
    metrics={"epochs_per_s": "epochs/s"},
    group=(),
    baseline={"start_method": "fork"},
    figures=("startmethod_latency",),
    extra_columns=(
        Column("first_batch_ms", "first batch", "ms"),
        Column("steady_batches_per_s", "steady state", "batches/s"),
        Column("shutdown_ms", "worker shutdown", "ms"),
    ),
    free_params=frozenset({"warmup_epochs"}),
    check_config=check_config,
    columns={
        "epochs_per_s": Col(
            "float", "`1 / wall_s`: one epoch of a new DataLoader per window, worker start-up and shutdown included"
        ),
        "batches_per_s": Col("float", "every batch of the epoch over `wall_s`", "batches/s"),
        "first_batch_ms": Col("float", "from `iter(loader)` to the first batch: worker start-up included"),
        "steady_batches_per_s": Col(
            "float", "batches after the start-up round (the first `num_workers` x 2, requested at once) over their time"
        ),
        "shutdown_ms": Col("float", "from the last batch to the end of iteration (the loader joins its workers)"),
        "oversubscribed": Col("bool", WORKERS_OVERSUBSCRIBED, "-"),
        "torch_threads": Col(
            "int",
            "`torch.get_num_threads()` in the main process, set before every window (equals `threads`)",
            "threads",
        ),
        "interop_threads": Col("int", "`torch.get_num_interop_threads()` (not set; torch default)", "threads"),
        "omp_num_threads_env": Col("str", "`$OMP_NUM_THREADS` in the job; empty if unset", "-"),
    },
    order=35,
)

#: Start methods in report order and what the report calls them.
METHODS = {
    "fork": "fork (Linux default)",
    "spawn": "spawn (macOS/Windows default)",
    "forkserver": "forkserver",
}
