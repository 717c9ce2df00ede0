"""DataLoader experiment: training throughput against ``num_workers`` for three kinds of data.

The declaration; the measurement is in :mod:`experiments.dataloader.measure`, findings and
figures in :mod:`experiments.dataloader.analysis`, the report's prose in ``report.yaml``. The
config section's schema, the command line and the parameter table come from its ``Params``.
"""

from lab.declare import Col, Column, Experiment, Flag, SpanKind, Timeline
from lab.pressure import WORKERS_OVERSUBSCRIBED

EXPERIMENT = Experiment(
    name="dataloader",
    keys=("dataset", "num_workers"),
    metrics={"samples_per_s": "samples/s"},
    group=("dataset",),
    baseline={"num_workers": 0},
    figures=("dataloader_throughput", "dataloader_stall"),
    extra_columns=(
        Column("data_stall_pct", "data stall", "%"),
        Column("first_epoch_s", "first (short) warm-up epoch", "s", in_table=False),
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
    columns={
        "samples_per_s": Col("float", "`items / wall_s`; one window = one epoch"),
        "batches_per_s": Col("float", "batches in the epoch / `wall_s`", "batches/s"),
        "data_stall_pct": Col("float", "time inside `next(iterator)` (sum of `wait` spans) / `wall_s` x 100"),
        "first_epoch_s": Col(
            "float",
            "wall time of the first untimed warm-up epoch only (iterating the loader, no training step; 2 batches"
            " per worker, 2 without workers), worker start-up included; `nan` when `warmup_epochs = 0`; same value"
            " on every row of one role (point and baseline each have their own loader)",
        ),
        "worker_warning": Col(
            "str",
            'PyTorch warnings containing "worker" while the DataLoader is built and during the warm-up epochs, joined'
            " by ` | `; empty if none",
            "-",
        ),
        "oversubscribed": Col("bool", WORKERS_OVERSUBSCRIBED, "-"),
        "torch_threads": Col(
            "int",
            "`torch.get_num_threads()` in the main process, set before every window (equals `threads`, else the job "
            "fails)",
            "threads",
        ),
        "interop_threads": Col(
            "int", "`torch.get_num_interop_threads()` in the main process (not set; torch default)", "threads"
        ),
        "omp_num_threads_env": Col(
            "str", "`$OMP_NUM_THREADS` in the job (set by Snakemake to the rule's threads); empty if unset", "-"
        ),
    },
    order=30,
)

#: Datasets in report order and what the report calls them.
DATASETS = {"tensor": "in-memory TensorDataset", "cpu": "CPU-heavy __getitem__", "io": "sleeping __getitem__ (I/O)"}
