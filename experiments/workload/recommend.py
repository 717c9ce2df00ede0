"""The recommendation: what the verification measured, as data, and as files people can paste.

:func:`recommendation` turns the workload's summary, replicates and jobs into one dict (kept in
``findings.json`` under ``data``): the current settings, the search's best, the verified gain
with its 95% CI, and whether that is a recommendation at all: only when the CI of the gain lies
above 1. Otherwise the current settings are fine here, and the files say so. From it:
``recommended.json`` (the dict), ``recommended.env`` (thread variables) and ``recommended.py``
(a snippet with the DataLoader arguments, ``torch.set_num_threads``, autocast, channels_last,
the process layout and the inference mode).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from analysis.stats import median_ci
from experiments.workload import KNOBS


def _config(rows: pd.DataFrame) -> dict:
    r = rows.iloc[0]
    return {k: (r[k].item() if hasattr(r[k], "item") else r[k]) for k in KNOBS}


def _median(rows: pd.DataFrame, column: str) -> dict:
    values = rows[column].astype(float).dropna().to_numpy() if column in rows else np.array([])
    if not len(values):
        return {"median": None, "ci": [None, None]}
    lo, hi = median_ci(values)
    return {"median": float(np.median(values)), "ci": [lo, hi]}


def gain_windows(replicates: pd.DataFrame) -> pd.DataFrame:
    """``replicates`` without the verification's whole-epoch windows when it also has rounds of
    steps (``window`` column): the gain, throughput, data stall and CPU utilisation are those
    of the rounds; the epoch windows (repeat 0) give the timeline and the workers' memory across
    an epoch. With ``verify_epochs`` every window is an epoch, and all count."""
    if "window" not in replicates:
        return replicates
    ver = replicates["stage"] == "verify"
    if not (ver & (replicates["window"] == "steps")).any():
        return replicates
    return replicates[~(ver & (replicates["window"] == "epoch"))]


def _search_outcome(jobs: list[dict]) -> dict:
    for job in jobs:
        if (job.get("params") or {}).get("stage") == "search":
            return job.get("outcome") or {}
    return {}


def recommendation(summary: pd.DataFrame, replicates: pd.DataFrame, jobs: list[dict]) -> dict:
    """The recommendation dict (see the module docstring); ``status`` is ``ok``, or the verify
    point's status with its ``reason`` when nothing was verified."""
    ver = summary[summary["stage"] == "verify"]
    search = _search_outcome(jobs)
    first = replicates.iloc[0] if len(replicates) else {}
    base = {
        k: (first.get(k).item() if hasattr(first.get(k), "item") else first.get(k))
        for k in ("entry", "task", "batch_size")
    }
    base["search"] = {k: search.get(k) for k in ("stopped", "spent_s", "budget_s", "skipped_knobs")}
    base["search"]["comparisons"] = len(search.get("trail", []))
    base["numerics"] = search.get("numerics", {})
    base["current_source"] = search.get("current_source") or "the current settings"
    if ver.empty or ver["status"].iloc[0] != "ok":
        why = ver["reason"].iloc[0] if len(ver) else "the verification was not run (workload.stage)"
        failed = summary[summary["status"] != "ok"]
        return {**base, "status": "failed" if len(failed) else "not run", "reason": why or failed["reason"].iloc[0]}
    r = ver.iloc[0]
    every = replicates[(replicates["stage"] == "verify") & (replicates["status"] == "ok")]
    rows = gain_windows(every)
    current, best = _config(rows[rows["role"] == "baseline"]), _config(rows[rows["role"] == "point"])
    lo, hi = r["speedup_ci_low"], r["speedup_ci_high"]
    verified = bool(np.isfinite(lo) and lo > 1)
    sides = {"current": rows[rows["role"] == "baseline"], "best_found": rows[rows["role"] == "point"]}
    measured = {
        col: {side: _median(sub, col) for side, sub in sides.items()}
        for col in ("samples_per_s", "data_stall_pct", "cpu_util_pct", "peak_pss_mb")
    }
    return {
        **base,
        "status": "ok",
        "payoff_calls": (
            payoff_calls(sides["current"], sides["best_found"])
            if verified and base.get("task") == "infer" and best["mode"] != current["mode"]
            else None
        ),
        "verified": verified,
        "gain": float(r["speedup"]),
        "gain_ci": [float(lo), float(hi)],
        "rounds": int(r["n"]),
        "current": current,
        "best_found": best,
        "recommended": best if verified else current,
        "changes": {k: [current[k], best[k]] for k in KNOBS if current[k] != best[k]} if verified else {},
        "measured": measured,
        "memory_grows": bool(every["memory_grows"].fillna(False).astype(bool).any())
        if "memory_grows" in every
        else False,
        "worker_uss_growth_mb": float(every["worker_uss_growth_mb"].max())
        if "worker_uss_growth_mb" in every and every["worker_uss_growth_mb"].notna().any()
        else None,
    }


def payoff_calls(current: pd.DataFrame, recommended: pd.DataFrame) -> int | None:
    """After how many calls the recommendation's up-front cost is repaid: its setup and first
    call (TorchScript's profiling run, torch.compile's compilation) beyond the current settings'
    first call, over the time it saves per call (median latency, ``wall_s x processes /
    batches``). None when it saves nothing per call or costs nothing up front."""

    def latency(rows):
        return float(np.median(rows["wall_s"] * rows["processes"] / rows["batches"]))

    def upfront(rows):
        return float(rows["setup_s"].fillna(0).iloc[0] + rows["first_call_s"].fillna(0).iloc[0])

    if current.empty or recommended.empty or "setup_s" not in recommended:
        return None
    saved = latency(current) - latency(recommended)
    extra = upfront(recommended) - float(current["first_call_s"].fillna(0).iloc[0])
    if saved <= 0 or extra <= 0:
        return None
    return int(math.ceil(extra / saved))


def describe_changes(changes: dict) -> str:
    """``num_workers 0 → 2, precision float32 → bfloat16``."""
    return ", ".join(f"{k} {a} → {b}" for k, (a, b) in changes.items())


def as_json(data: dict) -> str:
    """``recommended.json``."""
    return json.dumps(_finite(data), indent=2, sort_keys=True) + "\n"


def _finite(obj):
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return None if isinstance(obj, float) and not math.isfinite(obj) else obj


def _header(data: dict, comment: str) -> list[str]:
    if data.get("status") != "ok":
        return [f"{comment} No recommendation: {data.get('reason')}"]
    gain = f"{data['gain']:.2f}x (95% CI {data['gain_ci'][0]:.2f}-{data['gain_ci'][1]:.2f})"
    if data["verified"]:
        return [
            f"{comment} Measured here: {gain} the throughput of the current settings"
            f" ({describe_changes(data['changes'])})."
        ]
    return [f"{comment} Your current settings are fine here: the best found gave {gain}, not clearly faster."]


def as_env(data: dict) -> str:
    """``recommended.env``: the thread variables of the recommended settings."""
    lines = ["# Thread settings for the workload, from the lab's verified measurement.", *_header(data, "#")]
    if data.get("status") == "ok":
        t = data["recommended"]["threads"]
        lines += [f"OMP_NUM_THREADS={t}", f"MKL_NUM_THREADS={t}"]
        if data["recommended"]["processes"] > 1:
            lines.append(f"# {data['recommended']['processes']} processes of {t} threads each (see recommended.py)")
    return "\n".join(lines) + "\n"


def _snippet(cfg: dict, task: str, batch_size: int) -> list[str]:
    loader = f"batch_size={batch_size}, shuffle={task == 'train'}, num_workers={cfg['num_workers']}"
    if cfg["num_workers"]:
        loader += f", persistent_workers={cfg['persistent_workers']}, prefetch_factor={cfg['prefetch_factor']}"
    lines = ["import torch", "", f"torch.set_num_threads({cfg['threads']})"]
    lines += [f"loader = torch.utils.data.DataLoader(dataset, {loader})"]
    if cfg["channels_last"]:
        lines += ["model = model.to(memory_format=torch.channels_last)  # and each batch:"]
        lines += ["# x = x.contiguous(memory_format=torch.channels_last)"]
    if task == "infer" and cfg["mode"] == "script":
        lines += ["model = torch.jit.script(model.eval())"]
    if task == "infer" and cfg["mode"] == "compile":
        lines += ["model = torch.compile(model.eval())  # the first call compiles (seconds)"]
    if cfg["processes"] > 1 and task == "train":
        lines += [
            "# data parallel: start with `torchrun --standalone --nproc-per-node="
            + str(cfg["processes"])
            + " train.py`,",
            '# torch.distributed.init_process_group("gloo"); model = torch.nn.parallel.DistributedDataParallel(model)',
            "# and a torch.utils.data.DistributedSampler(dataset) for the loader",
        ]
    if cfg["processes"] > 1 and task == "infer":
        lines += [
            f"# {cfg['processes']} instances: python -m torch.backends.xeon.run_cpu"
            f" --ninstances {cfg['processes']} serve.py"
        ]
    step = "loss = loss_fn(model(x), y)" if task == "train" else "out = model(x)"
    if cfg["precision"] == "bfloat16":
        lines += ['with torch.autocast("cpu", dtype=torch.bfloat16):', f"    {step}"]
    else:
        lines += [step]
    return lines


def as_python(data: dict) -> str:
    """``recommended.py``: a snippet that reproduces the recommended settings."""
    lines = ["# Settings for the workload, from the lab's verified measurement.", *_header(data, "#")]
    if data.get("status") == "ok":
        lines += _snippet(data["recommended"], data.get("task") or "train", int(data.get("batch_size") or 32))
    return "\n".join(lines) + "\n"
