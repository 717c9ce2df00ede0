"""The comparison of benchmarks/peers.py and its tables: each tool's rerun agreement, each peer
value against the lab's intervals (95% CI and rerun interval, raw and on whole cores), as
docs/benchmarks.md's Markdown. Input: the passes :func:`peers.main` measured, each
``{"pyperf": ..., "tub": ..., "lab": ...}`` with ``values`` ``{point: {"value", "low", "high",
...}}``."""

from __future__ import annotations

import math
import platform
import time
from pathlib import Path


def agreement(first: dict, second: dict, interval: str = "", headline: bool = False) -> tuple[int, int]:
    """``(inside, compared)``: values of one tool whose second measurement lies inside the
    first one's stated interval, and the reverse, over the values both passes have;
    ``interval="rerun_"`` judges by the lab's rerun interval (``rerun_low``, ``rerun_high``);
    ``headline``: the lab's figure as its headline gives it (:func:`_figure`)."""
    inside = total = 0
    for name, a in first.items():
        b = second.get(name)
        if b is None:
            continue
        (av, alo, ahi), (bv, blo, bhi) = (_figure(v, interval, headline) for v in (a, b))
        if alo is None or blo is None:
            continue
        inside += int(alo <= bv <= ahi) + int(blo <= av <= bhi)  # numpy's True + True is True
        total += 2
    return inside, total


def _figure(v: dict, interval: str, headline: bool) -> tuple:
    """``(value, low, high)`` of a value's ``interval`` (``""`` or ``rerun_``), on whole cores where
    ``headline`` and the lab's headline gives that figure (``v["headline"] == "norm"``); low and
    high None where the value has no such interval."""
    norm = headline and v.get("headline") == "norm"
    key, lo, hi = (
        ("norm", f"norm_{interval}low", f"norm_{interval}high")
        if norm
        else ("value", f"{interval}low", f"{interval}high")
    )
    return (v[key], v[lo], v[hi]) if lo in v else (v[key], None, None)


def _ncpu_of(name: str) -> int:
    return 2 if "2 " in name.split(":")[1] else 1


def against_lab(peer: dict, lab: dict) -> list[dict]:
    """Each peer value against the lab's interval of the same point (same pass): raw; for
    speedups on whole cores (pyperf's processes by their loops' own pace, ``norm``, and its
    GIL-bound threads at the sequential loop's pace by their loops' CPU time;
    torch.utils.benchmark's speedup x CPUs / the CPUs the probe saw delivered around it); and
    against the interval the lab's headline gives, by the peer's figure of the same kind."""
    out = []
    for name, v in peer["values"].items():
        mine = lab["values"].get(name)
        if mine is None:
            continue
        row = {"point": name, "peer": v["value"], "lab_low": mine["low"], "lab_high": mine["high"]}
        row["inside"] = bool(mine["low"] <= v["value"] <= mine["high"])
        row |= {"lab_rerun_low": mine["rerun_low"], "lab_rerun_high": mine["rerun_high"]}
        row["inside_rerun"] = bool(mine["rerun_low"] <= v["value"] <= mine["rerun_high"])
        _, lo, hi = _figure(mine, "rerun_", headline=True)  # the figure the lab's headline gives
        row |= {"lab_headline_low": lo, "lab_headline_high": hi}
        if "sustained" in v:  # torch.utils.benchmark's calls, stalled ones included: the lab's kind of figure
            row["sustained"] = v["sustained"]
            row["inside_sustained"] = bool(mine["low"] <= v["sustained"] <= mine["high"])
        # work that keeps both CPUs busy is put on whole cores, and GIL-bound threads at the sequential
        # loop's pace where the peer timed its loops (pyperf's "norm"); not sleeping threads
        parallel = "over" in name and ("processes" in name or "matmul" in name)
        if "norm" in mine and (parallel or "norm" in v):
            n = _ncpu_of(name)
            if "norm" in v:  # pyperf: its drift between benchmarks taken out, on whole cores
                peer_norm = v["norm"]
            else:  # measured back to back (torch.utils.benchmark): on whole cores
                peer_norm = v["value"] * n / min(n, peer["delivered"])
            row |= {"peer_norm": peer_norm, "lab_norm_low": mine["norm_low"], "lab_norm_high": mine["norm_high"]}
            row["inside_norm"] = bool(mine["norm_low"] <= peer_norm <= mine["norm_high"])
            row["inside_norm_rerun"] = bool(mine["norm_rerun_low"] <= peer_norm <= mine["norm_rerun_high"])
        # the peer's figure of the same kind as the headline's: on whole cores where the lab leads with it
        same = row["peer_norm"] if "peer_norm" in row and mine.get("headline") == "norm" else v["value"]
        row["inside_headline"] = bool(lo <= same <= hi)
        out.append(row)
    return out


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def _cell(v: dict) -> str:
    text = f"{v['value']:.3g} ({v['low']:.3g}-{v['high']:.3g})"
    if "drift_corrected" in v:
        text += f"; drift taken out {v['drift_corrected']:.3g}"
    if "units" in v:  # pyperf's loops, timed by themselves: the loop's pace in each benchmark
        (_, base), (mode, point) = v["units"].items()
        text += f"; a loop {base['elapsed_ms']:.1f} ms sequential, {point['elapsed_ms']:.1f} ms"
        text += f" ({point['cpu_ms']:.1f} ms on a CPU) in {mode.removeprefix('cpu_')}"
        if mode == "cpu_threads":  # one thread runs at a time: the speedup at the sequential loop's pace
            # (the lab's experiments.gil.shortfall.pace: speedup x the loop's CPU time in the threads over sequential)
            text += f"; at the sequential loop's pace {v['norm']:.3g}"
    if "sustained" in v:
        text += f"; sustained {v['sustained']:.3g}"
    if not math.isnan(v.get("steal_pct", math.nan)):
        text += f"; steal {v['steal_pct']:.0f}%"
    if "norm_low" in v:
        text += f"; on whole cores {v['norm']:.3g} ({v['norm_low']:.3g}-{v['norm_high']:.3g})"
    elif "norm" in v and "cpu_threads" not in v.get("units", {}):  # the threads' is said as their pace above
        text += f"; on whole cores {v['norm']:.3g}"
    return text


def markdown(passes: list[dict]) -> str:
    """The results as docs/benchmarks.md tables."""
    lines = [f"Machine: {_cpu_model()}, run {time.strftime('%Y-%m-%d %H:%M')}.", ""]
    lines += ["| tool | point | pass 1 (stated) | pass 2 (stated) |", "|---|---|---|---|"]
    for tool in ("pyperf", "tub", "lab"):
        for name, a in passes[0][tool]["values"].items():
            b = passes[1][tool]["values"].get(name) if len(passes) > 1 else None
            lines.append(f"| {tool} | {name} | {_cell(a)} | {_cell(b) if b else ''} |")
    lines += ["", "| tool | rerun agreement | wall time per pass (s) |", "|---|---|---|"]
    for tool, interval, label in (
        ("pyperf", "", "pyperf"),
        ("tub", "", "tub"),
        ("lab", "", "lab (95% CI)"),
        ("lab", "rerun_", "lab (95% rerun interval)"),
        ("lab", "rerun_+", "lab as its headlines give it (95% rerun interval)"),
    ):
        if len(passes) > 1:
            first, second = passes[0][tool]["values"], passes[1][tool]["values"]
            inside, total = agreement(first, second, interval.rstrip("+"), headline=interval.endswith("+"))
            agree = f"{inside}/{total} ({100 * inside / total:.0f}%)" if total else ""
        else:
            agree = ""
        walls = ", ".join(f"{p[tool]['wall_s']:.0f}" for p in passes)
        lines.append(f"| {label} | {agree} | {walls} |")
    lines += ["", "| pass | point | peer | lab 95% CI | inside | lab rerun interval | inside |"]
    lines[-1] += " peer on whole cores | lab on whole cores (CI; rerun interval) | inside (CI; rerun) |"
    lines[-1] += " lab as its headline gives it (rerun interval) | peer inside |"
    lines += ["|---|---|---|---|---|---|---|---|---|---|---|---|"]
    sustained = []
    for i, p in enumerate(passes, 1):
        for tool in ("pyperf", "tub"):
            for r in against_lab(p[tool], p["lab"]):
                norm = (
                    f"{r['peer_norm']:.3g} | {r['lab_norm_low']:.3g}-{r['lab_norm_high']:.3g};"
                    f" {p['lab']['values'][r['point']]['norm_rerun_low']:.3g}-"
                    f"{p['lab']['values'][r['point']]['norm_rerun_high']:.3g} |"
                    f" {r['inside_norm']}; {r['inside_norm_rerun']}"
                    if "peer_norm" in r
                    else " | | "
                )
                lines.append(
                    f"| {i} | {tool}: {r['point']} | {r['peer']:.3g} | {r['lab_low']:.3g}-{r['lab_high']:.3g} |"
                    f" {r['inside']} | {r['lab_rerun_low']:.3g}-{r['lab_rerun_high']:.3g} | {r['inside_rerun']} |"
                    f" {norm} | {r['lab_headline_low']:.3g}-{r['lab_headline_high']:.3g} | {r['inside_headline']} |"
                )
                if "sustained" in r:
                    sustained.append(
                        f"| {i} | {r['point']} | {r['peer']:.3g} | {r['sustained']:.3g} |"
                        f" {r['lab_low']:.3g}-{r['lab_high']:.3g} | {r['inside']} | {r['inside_sustained']} |"
                    )
    if sustained:
        lines += ["", "torch.utils.benchmark's median call against its sustained throughput (stalled calls included):"]
        lines += ["", "| pass | point | median call | sustained | lab 95% CI | median inside | sustained inside |"]
        lines += ["|---|---|---|---|---|---|---|", *sustained]
    return "\n".join(lines) + "\n"
