"""Workload experiment: your own training or inference code, the settings that make it fastest on
this machine, found by measurement and verified.

Two jobs. ``stage~search`` imports the workload (config ``workload.entry``, or the built-in CNN
on synthetic images), checks it, and searches the knobs (DataLoader ``num_workers``,
``persistent_workers``, ``prefetch_factor``; intra-op ``threads``; ``processes``: DDP replicas
over gloo for training, independent instances for inference; ``precision``: float32 or
bfloat16 autocast; ``channels_last``; inference ``mode``: eager, TorchScript, torch.compile) by
coordinate descent, each candidate measured interleaved with the current best until the 95%
intervals separate or its rounds are spent, within a time budget. ``stage~verify`` then measures
the user's current settings (PyTorch's defaults when none are given) against the winner,
interleaved A B B A, and the analysis reports the gain with its 95% CI and writes
``recommended.json``, ``recommended.env`` and ``recommended.py``.

The declaration; the measurement is in :mod:`experiments.workload.measure`, findings, figures
and the recommendation in :mod:`experiments.workload.analysis`.
"""

from lab.declare import Column, Experiment, Flag, SpanKind, Timeline, thread_ladder

#: The knobs, in the order the search tries them, with their type and allowed values.
#: Cheap and likely changes first; processes (which starts replica processes) late.
KNOB_TYPES = {
    "num_workers": (int, None),
    "persistent_workers": (bool, None),
    "threads": (int, None),
    "precision": (str, ("float32", "bfloat16")),
    "channels_last": (bool, None),
    "mode": (str, ("eager", "script", "compile")),
    "processes": (int, None),
    "prefetch_factor": (int, None),
}
KNOBS = tuple(KNOB_TYPES)


def resolve_threads(value, ncpu: int) -> list[int]:
    """``threads: auto``: :func:`lab.declare.thread_ladder` (powers of two up to the
    available CPUs, and their number); a list is taken as it is."""
    return thread_ladder(ncpu) if value == "auto" else list(value)


def check_config(section) -> None:
    """``workload.entry`` names a module and a function that exist (found without importing
    them, :func:`experiments.workload.loader.resolve_entry`), so a typo stops the run before
    anything is measured, with the name it was probably meant to be.

    Raises:
        ValueError: ``config key workload.entry: '...': ...``.
    """
    entry = section.get("entry") or ""
    if entry:
        from experiments.workload.loader import resolve_entry

        resolve_entry(entry, f"config key workload.entry: {entry!r}")


def depends(point) -> list[dict]:
    """The verification needs the search's winner."""
    return [{"stage": "search"}] if point["stage"] == "verify" else []


EXPERIMENT = Experiment(
    name="workload",
    keys=("stage",),
    metrics={"samples_per_s": "samples/s"},
    group=(),
    baseline={},
    figures=("workload_search", "workload_verify"),
    extra_columns=(
        Column("data_stall_pct", "data stall", "%"),
        Column("peak_pss_mb", "peak PSS", "MB"),
    ),
    flags=(Flag("memory_grows", "worker memory grows", "any"),),
    free_params=frozenset({"budget_s", "max_rounds", "warmup"}),
    resolve={"threads": resolve_threads},
    depends=depends,
    # the search decides its own rounds per comparison (max_rounds) and chooses its own points
    adaptive_rounds=False,
    chooses_points=True,
    check_config=check_config,
    host_files=("user_env.json",),
    artefacts=("recommended.json", "recommended.env", "recommended.py"),
    timeline=Timeline(
        title="Your workload: one epoch of the current settings and of the search's best",
        kinds=(
            SpanKind("wait", "#D55E00", "training loop waits for a batch (data stall)"),
            SpanKind("step", "#0072B2", "training or inference step"),
            SpanKind("fetch", "#009E73", "batch fetched and collated"),
            SpanKind("memory", "#999999", "the lab reads the processes' memory (psutil)"),
        ),
        roles={"baseline": "current settings", "point": "search's best"},
    ),
    order=0,
)
