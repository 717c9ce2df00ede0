"""What each experiment's results mean: its swept parameters, metric, baseline and figures.

This module is plain Python with no heavy imports: the Snakefile reads it at parse time to
build the path scheme ``results/<host>/<experiment>/<key>~<value>/.../metrics.csv`` (keys in
the order of :attr:`ExperimentSpec.keys`), and the analysis uses it to summarise.

Speedup always compares a higher-is-better throughput metric with the baseline of the
point's group (``baseline`` below), measured interleaved in the point's own job: the median of
the per-round ratios ``metric_r / baseline_r`` (see :mod:`analysis.stats`).
Parallel efficiency is ``speedup / p`` (Amdahl's and Gustafson's textbook definition, e.g.
Hennessy and Patterson, *Computer Architecture*), with ``p`` the number of parallel workers the
point uses (:attr:`ExperimentSpec.units`); it is left empty where ``p`` has no meaning
(DataLoader workers feed one training loop; JIT modes are not parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ExperimentSpec:
    """How to read one experiment's metrics.

    Attributes:
        name: experiment name (config section, path component, ``experiment`` column).
        keys: swept parameters, in path order; together they identify a point.
        metric: throughput column (higher is better), or a mapping from a key's value to the
            column (intraop: matmul, matmul_bf16 -> ``gflop_per_s``, else ``samples_per_s``).
        metric_key: the key that selects the metric when ``metric`` is a mapping.
        group: keys whose points share a baseline (speedups are computed within a group).
        baseline: ``{key: value}`` picking the baseline point inside each group.
        units: key giving ``p`` for parallel efficiency, ``"processes*threads"`` for a
            product, or None where efficiency has no meaning.
        sequential_units: for the gil experiment, ``p`` of the baseline mode is 1.
        figures: names of the figures drawn for this experiment.
        question: the question the experiment answers, for the report.
    """

    name: str
    keys: tuple[str, ...]
    metric: str | dict[str, str]
    group: tuple[str, ...]
    baseline: dict
    units: str | None
    figures: tuple[str, ...]
    question: str
    metric_key: str | None = None
    extra_medians: tuple[str, ...] = field(default=())

    def metric_for(self, point: dict) -> str:
        """The metric column for a point (``point`` maps keys to values)."""
        if isinstance(self.metric, str):
            return self.metric
        return self.metric.get(str(point[self.metric_key]), self.metric["*"])


SPECS: dict[str, ExperimentSpec] = {
    "gil": ExperimentSpec(
        name="gil",
        keys=("workload", "mode", "workers"),
        metric="tasks_per_s",
        group=("workload", "workers"),
        baseline={"mode": "sequential"},
        units="workers",
        figures=("gil_speedup", "gil_timeline", "gil_cores"),
        question="Do threads speed up CPU-bound Python code? I/O-bound code? Do processes?",
    ),
    "multiprocessing": ExperimentSpec(
        name="multiprocessing",
        keys=("processes", "threads"),
        metric="samples_per_s",
        group=(),
        baseline={"processes": 1, "threads": 1},
        units="processes*threads",
        figures=("multiprocessing_throughput", "multiprocessing_timeline", "multiprocessing_cores"),
        question="How does training throughput change with the number of processes and threads per process?",
    ),
    "dataloader": ExperimentSpec(
        name="dataloader",
        keys=("dataset", "num_workers"),
        metric="samples_per_s",
        group=("dataset",),
        baseline={"num_workers": 0},
        units=None,
        figures=("dataloader_throughput", "dataloader_stall", "dataloader_timeline", "dataloader_cores"),
        question="How does DataLoader num_workers change throughput for cheap, CPU-heavy and slow-to-read data?",
        extra_medians=("data_stall_pct", "first_epoch_s"),
    ),
    "intraop": ExperimentSpec(
        name="intraop",
        keys=("workload", "threads"),
        metric={"matmul": "gflop_per_s", "matmul_bf16": "gflop_per_s", "*": "samples_per_s"},
        metric_key="workload",
        group=("workload",),
        baseline={"threads": 1},
        units="threads",
        figures=("intraop_scaling",),
        question="How does throughput change with torch.set_num_threads (intra-op threads)?",
    ),
    "jit": ExperimentSpec(
        name="jit",
        keys=("model", "mode"),
        metric="samples_per_s",
        group=("model",),
        baseline={"mode": "eager"},
        units=None,
        figures=("jit_latency",),
        question="Does TorchScript or torch.compile speed up inference over eager, and what does it cost up front?",
        extra_medians=("latency_ms", "setup_s", "first_call_s"),
    ),
}

#: Experiments whose jobs record work spans: each gets a timeline, a per-core heatmap and a
#: Chrome trace (``results/<host>/traces/<experiment>.json``).
TIMELINES: tuple[str, ...] = ("gil", "multiprocessing", "dataloader")

#: Figures of the whole run rather than of one experiment (drawn from ``jobs.csv``).
HOST_FIGURES: tuple[str, ...] = ("job_schedule",)

#: Every figure name -> the experiment whose data it draws (None: the whole run).
FIGURES: dict[str, str | None] = {fig: spec.name for spec in SPECS.values() for fig in spec.figures} | {
    fig: None for fig in HOST_FIGURES
}

#: The seed article's published timings (002_c724ca3a57c5b9fb: 4-core i5-4460, Python 3.5),
#: sequential against two threads, in seconds.
SEED_TIMINGS = {
    "cpu": {"sequential_s": 71.47, "threads_s": 72.08},
    "io": {"sequential_s": 42.10, "threads_s": 22.01},
}
SEED_MACHINE = "4-core Intel i5-4460, Python 3.5"
