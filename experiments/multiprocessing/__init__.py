"""Multiprocessing experiment: training throughput with P processes x T intra-op threads.

The declaration; the measurement is in :mod:`experiments.multiprocessing.measure`, findings and
figures in :mod:`experiments.multiprocessing.analysis`, the report's prose in ``report.yaml``.
The config section's schema, the command line and the parameter table come from its ``Params``.
"""

from lab import workspeed
from lab.declare import Col, Experiment, SpanKind, Timeline


def parallel_units(point) -> float:
    """``p`` for parallel efficiency: processes x intra-op threads per process."""
    return float(point["processes"]) * float(point["threads"])


def job_env(point) -> dict[str, str | None]:
    """The job's ``OMP_WAIT_POLICY``: unset for ``default``, else the policy (libgomp reads it
    once, when torch loads it)."""
    policy = str(point["omp_wait_policy"])
    return {"OMP_WAIT_POLICY": None if policy == "default" else policy.upper()}


def include(point) -> bool:
    """A wait policy other than the default only where a process has a team of threads that
    wait for each other (more than one thread); with one thread the policy changes nothing."""
    return str(point["omp_wait_policy"]) == "default" or int(point["threads"]) > 1


def threads_per_process(point) -> int:
    """Intra-op threads of one training process (a timeline actor)."""
    return int(point["threads"])


EXPERIMENT = Experiment(
    name="multiprocessing",
    keys=("processes", "threads", "omp_wait_policy"),
    metrics={"samples_per_s": "samples/s"},
    group=("omp_wait_policy",),
    baseline={"processes": 1, "threads": 1},
    parallel_units=parallel_units,
    figures=("multiprocessing_throughput",),
    free_params=frozenset({"warmup_steps", "timeout_s", "max_window_s"}),
    job_env=job_env,
    later_keys=frozenset({"omp_wait_policy"}),
    include=include,
    timeline=Timeline(
        title="Training processes: work spans per process, and CPU utilisation",
        kinds=(SpanKind("train", "#009E73", "chunk of training steps"),),
        on_cpu_share=True,
        threads_per_actor=threads_per_process,
        scale_keys=(),  # the same work per process (or the window cap) at every point, under every wait policy
    ),
    columns={
        "samples_per_s": Col("float", "`steps_done x batch_size / wall_s`, all processes together"),
        "steps_done": Col(
            "int",
            "SGD steps all processes did in the window: `processes x steps`, fewer where the window"
            " reached `max_window_s`",
            "steps",
        ),
        "torch_threads": Col(
            "int", "largest `torch.get_num_threads()` the runner's workers reported at start-up", "threads"
        ),
        "oversubscribed": Col("bool", "`processes x threads > available_cpus`", "-"),
        **workspeed.COLUMNS,
    },
    order=20,
)
