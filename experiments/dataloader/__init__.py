"""DataLoader experiment: training throughput against ``num_workers`` for three kinds of data.

The declaration; the measurement is in :mod:`experiments.dataloader.measure`, findings and
figures in :mod:`experiments.dataloader.analysis`, the report's prose in ``report.yaml``. The
config section's schema, the command line and the parameter table come from its ``Params``.
"""

from lab.declare import Column, Experiment, Flag, SpanKind, Timeline

EXPERIMENT = Experiment(
    name="dataloader",
    keys=("dataset", "num_workers"),
    metrics={"samples_per_s": "samples/s"},
    group=("dataset",),
    baseline={"num_workers": 0},
    figures=("dataloader_throughput", "dataloader_stall"),
    extra_columns=(
        Column("data_stall_pct", "data stall", "%"),
        Column("first_epoch_s", "first epoch", "s", in_table=False),
    ),
    flags=(Flag("worker_warning", "worker warning", "text"),),
    free_params=frozenset({"warmup_epochs"}),
    timeline=Timeline(
        title="DataLoader: main loop and workers per batch, and CPU utilisation",
        kinds=(
            SpanKind("wait", "#D55E00", "main loop waits for a batch (data stall)"),
            SpanKind("step", "#0072B2", "training step"),
            SpanKind("fetch", "#009E73", "batch fetched and collated"),
        ),
    ),
    order=30,
)

#: Datasets in report order and what the report calls them.
DATASETS = {"tensor": "in-memory TensorDataset", "cpu": "CPU-heavy __getitem__", "io": "sleeping __getitem__ (I/O)"}
