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

from lab.declare import Col, Column, Experiment, Flag, SpanKind, Timeline, thread_ladder

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
    anything is measured, with the name it was probably meant to be; ``workload.repeats`` gives
    each of the verification's ``verify_processes`` worker processes 2 rounds at least (an
    interval, and the spread within a process that the spread between them is judged against,
    need 2), as ``rounds.workers`` does for the other experiments.

    Raises:
        ValueError: ``config key workload.entry: '...': ...`` or ``config key workload.repeats: ...``.
    """
    repeats, processes = int(section["repeats"]), int(section["verify_processes"])
    if repeats < 2 * processes:
        raise ValueError(
            f"config key workload.repeats: {repeats} is not allowed (workload.verify_processes {processes} would"
            f" give a worker process fewer than 2 verification rounds); allowed: integer >= {2 * processes},"
            f" or fewer verify_processes"
        )
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
    columns={
        "samples_per_s": Col("float", "`batches x batch_size / wall_s`, every replica's batches counted"),
        "data_stall_pct": Col("float", "time rank 0's loop spent inside `next(iterator)`"),
        "batches": Col("int", "batches of the window, all replicas", "batches"),
        "window": Col(
            "str",
            "`steps` (the window's steps from a running iterator: `steps`, or as many as fill `window_s` at the "
            "start's measured step time), `epoch` (from a fresh iterator) or `diagnosis` (the search's epoch of the "
            "start)",
            "-",
        ),
        "loop_cpu_s": Col("float", "CPU time of the training process itself over the window; NaN with replicas", "s"),
        "workers_cpu_s": Col(
            "float",
            "CPU time of the rest of its process tree (its DataLoader workers) over the window; NaN with replicas",
            "s",
        ),
        "epoch_batches": Col(
            "int",
            "epoch windows: the epoch's length (empty for a dataset without `len`); fewer `batches` than this: cut at"
            " `timeline_steps_max`",
            "batches",
        ),
        "peak_uss_mb": Col(
            "float",
            "USS of the process(es) and their DataLoader workers (psutil `memory_full_info`), the largest of the "
            "reads before and after the window (before a steps window: the read after its configuration's last one, "
            "if any; in an epoch window also after its first and last step)",
            "MB",
        ),
        "peak_pss_mb": Col("float", "PSS, read as `peak_uss_mb`"),
        "main_pss_mb": Col("float", "PSS of the training process(es), at the last read", "MB"),
        "workers_pss_mb": Col("float", "PSS of their DataLoader workers, at the last read", "MB"),
        "worker_uss_growth_mb": Col(
            "float",
            "the largest growth of one worker's USS: in an epoch window from after its first step to after its last, "
            "else from the read before the window to the one after it",
            "MB",
        ),
        "memory_grows": Col(
            "bool",
            "that growth is more than 5% of the worker's USS and more than 5 MB (copy-on-read of Python objects, "
            "pytorch/pytorch#13246)",
            "-",
        ),
        "setup_s": Col(
            "float", "creating the configuration's model (TorchScript, torch.compile), once per configuration", "s"
        ),
        "first_call_s": Col("float", "the configuration's first step after its setup, once per configuration", "s"),
        "worker_warning": Col("str", "PyTorch's warning about too many workers, else empty", "-"),
        "oversubscribed": Col("bool", "`processes x (threads + num_workers)` above the available CPUs", "-"),
        "start_method": Col("str", "`fork` with workers, else empty", "-"),
        "comparison": Col("int", "search: the comparison's index among those measured", "-"),
        "config": Col("str", "the window's configuration in one line", "-"),
        "max_abs_diff": Col(
            "float",
            "bfloat16 windows: the largest output difference against float32 from the same weights and batches",
            "-",
        ),
        "loss_after": Col(
            "float",
            "bfloat16 windows: the loss after `numerics_steps` steps, from the same weights and batches as "
            "`loss_after_fp32`",
            "-",
        ),
        "loss_after_fp32": Col("float", "the same in float32", "-"),
    },
    order=0,
)
