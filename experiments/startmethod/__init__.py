"""Start-method experiment: what the DataLoader's multiprocessing start method (``fork``,
``spawn``, ``forkserver``) costs at the start of an epoch, per batch and at its end.

The declaration; the measurement is in :mod:`experiments.startmethod.measure`, findings and the
figure in :mod:`experiments.startmethod.analysis`, the report's prose in ``report.yaml``. The
config section's schema, the command line and the parameter table come from ``Params``.
Every point is compared with ``fork`` (the Linux default), measured interleaved in its job.
"""

from lab.declare import Column, Experiment


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
        Column("cold_first_batch_ms", "first batch of the process", "ms", in_table=False),
    ),
    free_params=frozenset({"warmup_epochs"}),
    check_config=check_config,
    order=35,
)

#: Start methods in report order and what the report calls them.
METHODS = {
    "fork": "fork (Linux default)",
    "spawn": "spawn (macOS/Windows default)",
    "forkserver": "forkserver",
}
