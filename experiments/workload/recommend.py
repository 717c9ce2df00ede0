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

from analysis.capacity import cpus_text, pooled_contended
from analysis.findings import fmt_x, interval
from analysis.stats import median_ci
from experiments.workload import KNOB_TYPES, KNOBS


def _config(rows: pd.DataFrame) -> dict:
    """The knobs of the first row, each as its own type (a column that also holds a failed or
    skipped row's empty cells is read as float: 2.0 workers must not reach the snippet)."""
    r = rows.iloc[0]
    return {k: KNOB_TYPES[k][0](r[k].item() if hasattr(r[k], "item") else r[k]) for k in KNOBS}


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
    keep = ("stopped", "spent_s", "diagnosis_s", "budget_s", "skipped_knobs", "needed_s", "order", "diagnosis")
    keep += ("budget_auto",)
    base["search"] = {k: search.get(k) for k in keep}
    base["search"]["comparisons"] = sum(1 for c in search.get("trail", []) if c.get("ratios"))
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
    # a gain is a recommendation only when its CI lies above 1 and the search's best differs
    verified = bool(np.isfinite(lo) and lo > 1) and best != current
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
        "gain_rerun": [float(r.get(f"speedup_rerun_{side}", np.nan)) for side in ("low", "high")],
        "rounds": int(r["n"]),
        "processes": int(every["worker"].nunique()) if "worker" in every else 1,
        "current": current,
        "best_found": best,
        "recommended": best if verified else current,
        "changes": {k: [current[k], best[k]] for k in KNOBS if current[k] != best[k]} if verified else {},
        "measured": measured,
        "verify_contended": pooled_contended(rows),
        "memory_grows": bool(every["memory_grows"].fillna(False).astype(bool).any())
        if "memory_grows" in every
        else False,
        "worker_uss_growth_mb": float(every["worker_uss_growth_mb"].max())
        if "worker_uss_growth_mb" in every and every["worker_uss_growth_mb"].notna().any()
        else None,
    }


def untried_knobs(jobs: list[dict], trail: list[dict], skipped: dict) -> list[str]:
    """Knobs the config gave several values that the search never compared (its budget ran out
    first), in search order; knobs dropped for a reason (``skipped``) are not among them."""
    params = next((j.get("params") or {} for j in jobs if (j.get("params") or {}).get("stage") == "search"), {})
    # a comparison the budget did not let start tried nothing
    tried = {c.get("knob") for c in trail if c.get("rounds") or c.get("decision") in ("invalid", "excluded")}
    order = _search_outcome(jobs).get("order") or KNOBS
    several = [k for k in order if isinstance(params.get(k), (list, tuple)) and len(set(params[k])) > 1]
    return [k for k in several if k not in tried and k not in skipped]


def search_sentence(d: dict) -> str:
    """What the search compared, in how long, why it stopped and what it did not try."""
    s = d.get("search") or {}
    if not s.get("comparisons"):
        return ""
    how = {"converged": "it converged", "budget": "its time budget ran out", "passes": "its passes were spent"}
    spent, budget = s.get("spent_s") or 0, s.get("budget_s") or 0
    n = s["comparisons"]
    text = f"The search compared {n} candidate{'s' if n != 1 else ''} in {spent:.0f} s of its {budget:.0f} s budget"
    text += " (the comparison under way finished its round)" if spent > budget else ""
    if s.get("stopped") == "budget" and spent < budget:
        # the search does not start a comparison it expects to overrun (experiments/workload/search.py)
        text += (
            f" and stopped because the next comparison would not fit in the {budget - spent:.0f} s left"
            f" (one took {spent / n:.0f} s on average)."
        )
    else:
        text += f" and stopped because {how.get(s.get('stopped'), s.get('stopped'))}."
    diagnosis = s.get("diagnosis_s") or 0  # before the budget's clock started; absent in older results
    text += f" The diagnosis before it took {diagnosis:.0f} s, outside the budget." if diagnosis >= 0.5 else ""
    skipped = s.get("skipped_knobs") or {}
    if not s.get("diagnosis"):  # the diagnosis sentence gives its own reasons
        text += "".join(f" {why[0].upper()}{why[1:]}." for why in skipped.values())
    untried = s.get("untried") or []
    if untried:
        text += f" Not tried within the budget: {', '.join(untried)} (a larger workload.budget_s would)."
    return text


def against_themselves(d: dict) -> bool:
    """Whether the search kept the current settings, so the verification measured them against
    themselves (an A/A comparison: its figure is this machine's noise)."""
    return d.get("best_found") == d.get("current")


def best_gave(d: dict) -> str:
    """What the verification's figure is of: the search's best against the current settings, or
    (:func:`against_themselves`) those settings against themselves."""
    return "measured against themselves they gave" if against_themselves(d) else "the best found gave"


def outcome(d: dict) -> str:
    """Which of three answers the search and the verification give: ``verified faster``,
    ``searched completely`` (nothing clearly faster: keep the settings) or ``search
    incomplete`` (the budget ended it before every knob the diagnosis kept was tried);
    ``failed`` where nothing was verified."""
    if d.get("status") != "ok":
        return "failed"
    if d.get("verified"):
        return "verified faster"
    s = d.get("search") or {}
    return "search incomplete" if s.get("stopped") == "budget" or s.get("untried") else "searched completely"


def incomplete_text(d: dict) -> str:
    """``search incomplete: 4 of 6 knobs tried in its 45 s budget; about 240 s would try all;
    not tried: threads, precision`` (where the diagnosis's estimate was within the budget, that
    the comparisons took longer than it predicted, instead of "would try all"); where every knob
    was tried but the budget ended the search before it converged, that, and the diagnosis's
    estimate it overran (``needed_s``, from the
    diagnosis's step time: contention or a slower machine stretches the comparisons); "" for a
    search that tried every knob and ended on its own."""
    s = d.get("search") or {}
    untried = s.get("untried") or []
    if s.get("stopped") != "budget" and not untried:
        return ""
    planned = s.get("order") or []
    budget, needed = s.get("budget_s") or 0, s.get("needed_s")
    if planned and not untried:
        text = f"search incomplete: all {len(planned)} knobs tried, but its {budget:.0f} s budget ran out"
        text += " before it converged"
        if needed and needed <= budget:
            text += (
                f" (the diagnosis expected about {needed:.0f} s: the comparisons took longer than its steps predicted)"
            )
        return text
    head = f"{len(planned) - len(untried)} of {len(planned)} knobs tried" if planned else "its budget ran out"
    text = f"search incomplete: {head} in its {budget:.0f} s budget"
    if needed and needed > budget:
        text += f"; about {needed:.0f} s would try all"
    elif needed:  # within the budget by the diagnosis's estimate, yet the budget ran out
        text += f"; the diagnosis expected about {needed:.0f} s for all: the comparisons took longer"
        text += " than its steps predicted"
    return text + (f"; not tried: {', '.join(untried)}" if untried else "")


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


def gain_text(gain: float, ci) -> str:
    """``1.09x (95% CI 1.03-1.15)``: the verified gain with its CI as ``recommended.json`` keeps
    it (``[low, high]``, null where the rounds gave none: too few to bound a median), without
    the interval where it is missing."""
    if gain is None or not math.isfinite(gain):
        return "no gain measured"
    lo, hi = ci or (None, None)
    row = {"speedup": gain, "speedup_ci_low": lo, "speedup_ci_high": hi}
    return fmt_x(row) + ("" if interval(row) else " (no 95% CI: too few rounds)")


def _header(data: dict, comment: str) -> list[str]:
    if data.get("status") != "ok":
        return [f"{comment} No recommendation: {data.get('reason')}"]
    gain = gain_text(data["gain"], data["gain_ci"])
    if data["verified"]:
        return [
            f"{comment} Measured here: {gain} the throughput of the current settings"
            f" ({describe_changes(data['changes'])})."
        ]
    if against_themselves(data):
        return [
            f"{comment} Your current settings are fine here: the search found nothing faster"
            f" (against themselves {gain}).",
        ]
    return [f"{comment} Your current settings are fine here: the best found gave {gain}, not clearly faster."]


def as_env(data: dict) -> str:
    """``recommended.env``: the thread variables of the recommended settings, as ``export``
    lines (``source recommended.env`` before ``python train.py``)."""
    lines = ["# Thread settings for the workload, from the lab's measurement.", *_header(data, "#")]
    if data.get("status") == "ok":
        t = data["recommended"]["threads"]
        lines += [f"export OMP_NUM_THREADS={t}", f"export MKL_NUM_THREADS={t}"]
        if data["recommended"]["processes"] > 1:
            lines.append(f"# {data['recommended']['processes']} processes of {t} threads each (see recommended.py)")
    return "\n".join(lines) + "\n"


def _loader_line(cfg: dict, task: str, batch_size: int) -> list[str]:
    ddp = cfg["processes"] > 1 and task == "train"
    order = "sampler=torch.utils.data.DistributedSampler(dataset)" if ddp else f"shuffle={task == 'train'}"
    args = f"batch_size={batch_size}, {order}, num_workers={cfg['num_workers']}"
    if cfg["num_workers"]:
        args += f", persistent_workers={cfg['persistent_workers']}, prefetch_factor={cfg['prefetch_factor']}"
    return [f"loader = torch.utils.data.DataLoader(dataset, {args})"]


def _layout(cfg: dict, task: str) -> list[str]:
    if cfg["processes"] > 1 and task == "train":
        return [
            f"# data parallel: start with `torchrun --standalone --nproc-per-node={cfg['processes']} train.py`;",
            '# torch.distributed.init_process_group("gloo") first, then:',
            "model = torch.nn.parallel.DistributedDataParallel(model)",
        ]
    if cfg["processes"] > 1:
        return [
            f"# {cfg['processes']} instances: python -m torch.backends.xeon.run_cpu"
            f" --ninstances {cfg['processes']} serve.py"
        ]
    return []


def _loop(cfg: dict, task: str) -> list[str]:
    cast = ['    with torch.autocast("cpu", dtype=torch.bfloat16):'] if cfg["precision"] == "bfloat16" else []
    pad = "    " * (1 + len(cast))
    x = "x = x.contiguous(memory_format=torch.channels_last)" if cfg["channels_last"] else ""
    if task == "train":
        body = ["for x, y in loader:", *([f"    {x}"] if x else []), "    optimizer.zero_grad(set_to_none=True)"]
        body += [*cast, f"{pad}loss = loss_fn(model(x), y)", "    loss.backward()", "    optimizer.step()"]
        return body
    body = ["with torch.inference_mode():", "    for x, *_ in loader:", *([f"        {x}"] if x else [])]
    return body + [f"    {c}" for c in cast] + [f"    {pad}out = model(x)"]


def _snippet(cfg: dict, task: str, batch_size: int) -> list[str]:
    """The settings as Python, around the user's own ``model``, ``dataset``, ``loss_fn`` and
    ``optimizer`` (the names a training script has)."""
    lines = ["# model, dataset, loss_fn and optimizer are yours.", "import torch", ""]
    lines += [f"torch.set_num_threads({cfg['threads']})", *_loader_line(cfg, task, batch_size)]
    if cfg["channels_last"]:
        lines += ["model = model.to(memory_format=torch.channels_last)"]
    if task == "infer" and cfg["mode"] == "script":
        lines += ["model = torch.jit.script(model.eval())  # or torch.jit.trace(model.eval(), x) where script fails"]
    if task == "infer" and cfg["mode"] == "compile":
        lines += ["model = torch.compile(model.eval())  # the first call compiles (seconds)"]
    return lines + _layout(cfg, task) + _loop(cfg, task)


def as_python(data: dict) -> str:
    """``recommended.py``: a snippet that reproduces the recommended settings."""
    lines = ["# Settings for the workload, from the lab's measurement.", *_header(data, "#")]
    if data.get("status") == "ok":
        lines += _snippet(data["recommended"], data.get("task") or "train", int(data.get("batch_size") or 32))
    return "\n".join(lines) + "\n"


def environment_sentences(env: dict, ncpu) -> list[str]:
    """What the user's shell (``user_env.json``) does to a plain ``python train.py`` here."""
    if not env:
        return []
    variables = env.get("variables") or {}
    threads = env.get("torch_threads")
    measured = "measured with torch.get_num_threads() in a fresh interpreter with your shell's variables"
    if "OMP_NUM_THREADS" in variables or "MKL_NUM_THREADS" in variables:
        name = "OMP_NUM_THREADS" if "OMP_NUM_THREADS" in variables else "MKL_NUM_THREADS"
        out = [
            f"Your shell exports {name}={variables[name]}: your own programs run {threads} intra-op "
            f"thread{'s' if threads != 1 else ''} ({measured}) on {cpus_text(ncpu)} available."
        ]
    else:
        out = [
            f"Your shell sets no thread variable: a plain python train.py runs {threads} intra-op threads here"
            f" ({measured})."
        ]
    placement = [k for k in variables if k.startswith(("KMP_", "GOMP_")) or k in ("OMP_PROC_BIND", "OMP_PLACES")]
    if placement:
        out.append(
            "It also sets "
            + ", ".join(f"{k}={variables[k]}" for k in placement)
            + ", which pin OpenMP threads to cores."
        )
    if env.get("cgroup_quota_cpus"):
        where = f", set by cgroup {env['cgroup_quota_cgroup']}" if env.get("cgroup_quota_cgroup") else ""
        out.append(f"A CPU quota of {cpus_text(env['cgroup_quota_cpus'])} applies to it{where}.")
    return out
