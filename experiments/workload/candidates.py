"""The knob space of one workload on this machine, and which configurations can run at all.

The config gives a list per knob; some values cannot apply here and are dropped before the
search, with the reason (``skipped``): bfloat16 without native bf16 instructions (unless
``bf16: any``, see :func:`lab.capabilities.native_bf16`) and channels_last for inputs
that are not 4-D images. A configuration that asks for more than
``max_oversubscription`` x the available CPUs at once (``processes x (threads + num_workers)``:
DataLoader workers run one thread each) is not measured either; nor are ``prefetch_factor`` or
``persistent_workers`` variants without workers, which would measure the same thing twice.
The inference ``mode`` is searched for ``task: infer`` only.
"""

from __future__ import annotations

from experiments.workload import KNOBS
from lab.capabilities import native_bf16
from lab.host import available_cpus


def defaults(user_env: dict) -> dict:
    """PyTorch's defaults: no DataLoader workers (``persistent_workers`` False,
    ``prefetch_factor`` 2 as DataLoader would use with workers), the intra-op threads torch
    picks in the user's shell (``user_env.json``, measured; else this job's), one process,
    float32, eager, contiguous memory format."""
    threads = user_env.get("torch_threads")
    if not threads:
        import torch

        threads = torch.get_num_threads()
    return {
        "num_workers": 0,
        "threads": int(threads),
        "processes": 1,
        "precision": "float32",
        "channels_last": False,
        "mode": "eager",
        "prefetch_factor": 2,
        "persistent_workers": False,
    }


def knob_space(params, workload) -> tuple[dict, dict]:
    """``(space, skipped)``: knob -> values to search, in search order; knob -> why values
    were dropped (see the module docstring)."""
    space = {k: list(dict.fromkeys(getattr(params, k))) for k in KNOBS}
    skipped = {}
    if "bfloat16" in space["precision"] and params.bf16 == "native":
        ok, what = native_bf16()
        if not ok:
            space["precision"] = [p for p in space["precision"] if p != "bfloat16"] or ["float32"]
            skipped["precision"] = (
                f"bfloat16 not searched: no native bfloat16 on this CPU ({what});"
                " set workload.bf16: any to search it anyway"
            )
    if True in space["channels_last"] and workload.input_dims != 4:
        space["channels_last"] = [False]
        dims = workload.input_dims
        skipped["channels_last"] = f"channels_last applies to 4-D (image) inputs; this workload's have {dims}"
    if params.task == "train" and space["mode"] != ["eager"]:
        space["mode"] = ["eager"]
        skipped["mode"] = "TorchScript and torch.compile are searched for task: infer; training runs eager"
    return space, skipped


def to_compare(space: dict, start: dict) -> list[str]:
    """The knobs of ``space`` (knob -> values) with a value other than ``start``'s: those the
    search has a candidate to compare for (a knob of one value that differs from the start is
    one too), in ``space``'s order."""
    return [k for k, values in space.items() if any(v != start[k] for v in values)]


def invalid_reason(cfg: dict, params, workload, skipped: dict, limit: float) -> str:
    """Why ``cfg`` is not measured, or "" (see the module docstring)."""
    for knob, reason in skipped.items():
        if knob == "precision" and cfg["precision"] == "bfloat16":
            return reason
        if knob == "channels_last" and cfg["channels_last"]:
            return reason
    if cfg["num_workers"] == 0 and (cfg["persistent_workers"] or cfg["prefetch_factor"] != 2):
        return "persistent_workers and prefetch_factor apply with num_workers > 0"
    ncpu = available_cpus()
    asked = cfg["processes"] * (cfg["threads"] + cfg["num_workers"])
    if asked > limit * ncpu:
        allowed = int(limit * ncpu)
        return f"asks for {asked} CPUs at once (processes x (threads + workers)); max_oversubscription allows {allowed}"
    if cfg["processes"] > 1 and len(workload.dataset) < cfg["processes"] * params.batch_size:
        return f"{cfg['processes']} replicas need at least {cfg['processes'] * params.batch_size} items"
    return ""


def fit_threads(ncpu: int, space: dict):
    """The search's ``adjust`` for a candidate that moves ``num_workers`` (``space``: the knob
    space, :func:`knob_space`). A candidate with more DataLoader workers also tries fewer
    intra-op threads, the most of ``space["threads"]`` with ``threads + num_workers <= ncpu``
    (at least 1): workers run one thread each and compete with the training loop's threads for
    the same cores, so moving one knob alone would mostly measure oversubscription. A candidate
    with workers whose ``persistent_workers`` or ``prefetch_factor`` is not among the config's
    values (PyTorch's defaults, carried from a start without workers) takes the first configured
    one: with ``persistent_workers: [true]`` workers are tried persistent, as asked. A candidate
    without workers goes back to DataLoader's defaults for both, which apply only with workers."""
    threads = tuple(space["threads"])

    def adjust(cfg: dict, knob: str) -> dict:
        if knob != "num_workers":
            return cfg
        if cfg["num_workers"] == 0:
            return {**cfg, "persistent_workers": False, "prefetch_factor": 2}
        cfg = {**cfg, **{k: space[k][0] for k in ("persistent_workers", "prefetch_factor") if cfg[k] not in space[k]}}
        if cfg["threads"] + cfg["num_workers"] <= ncpu:
            return cfg
        fitting = [t for t in threads if t + cfg["num_workers"] <= ncpu]
        return {**cfg, "threads": max(fitting) if fitting else min(threads)}

    return adjust
