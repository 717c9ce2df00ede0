"""JIT experiment, analysis: steady-state speedup of each mode over eager, what it costs up
front and after how many calls it pays off, and the latency chart."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.findings import fmt_x, in_order, num, pick
from analysis.plotting import PALETTE, SPEEDUP, bar_legend, hatch_noisy, plt, speedup_note, yerr
from experiments.jit import MODES
from lab.contract import Analysis, Context


def _mode_part(r: pd.Series, eager: pd.Series | None) -> str:
    """One mode's clause: speedup, up-front cost, and after how many calls it pays off."""
    if r["status"] != "ok":
        return f"{r['mode']} {r['status']} ({r['reason']})"
    part = f"{r['mode']} {fmt_x(r)} at steady state, first call {r['first_call_s'] * 1000:,.0f} ms"
    warm = r.get("first_call_warm_s")
    if warm is not None and np.isfinite(warm):  # compile: measured cold, then in a process that found the cache
        part += f" with an empty compile cache ({warm * 1000:,.0f} ms in a later process that found it filled)"
    part += f" + setup {r['setup_s'] * 1000:,.0f} ms"
    if eager is not None and np.isfinite(r["speedup"]):
        # eager latency measured interleaved in this job = latency x speedup
        saved_ms = r["latency_ms"] * (r["speedup"] - 1)
        upfront_ms = (r["setup_s"] + r["first_call_s"] - eager["first_call_s"]) * 1000
        if r["speedup_ci_low"] > 1:
            part += f", pays off after {math.ceil(max(upfront_ms, 0) / saved_ms):,} calls"
        elif r["speedup_ci_high"] < 1:
            part += ", never pays off here (slower at steady state)"
        elif np.isfinite(r["speedup_ci_low"]):
            part += ", no clear steady-state gain (95% CI includes 1), so no payoff is claimed"
        else:
            part += ", no 95% CI of the speedup (too few rounds), so no payoff is claimed"
    same = r.get("allclose")
    if same is not None and not pd.isna(same) and not bool(same):
        part += ", OUTPUT DIFFERS from eager"
    return part


def findings(ctx: Context) -> list[str]:
    """Per model, eager's latency and every other mode's speedup and up-front cost, from
    ``ctx.summary``."""
    summary = ctx.summary
    out = []
    for model in summary["model"].unique():
        sub = summary[summary["model"] == model]
        eager = pick(sub, mode="eager")
        parts = [_mode_part(r, eager) for _, r in sub.iterrows() if r["mode"] != "eager"]
        if eager is not None and parts:
            out.append(f"{model} (eager {num(eager['latency_ms'], 'ms')} per batch): " + "; ".join(parts) + ".")
    return out


def headlines(ctx: Context) -> list[dict]:
    """Per model, the mode that is clearly faster than eager at steady state, if any, from
    ``ctx.summary``; the question names only the modes the config ran (TorchScript,
    torch.compile)."""
    summary = ctx.summary
    parts = []
    for model in summary["model"].unique():
        sub = summary[(summary["model"] == model) & summary["speedup"].notna() & (summary["mode"] != "eager")]
        better = sub[sub["speedup_ci_low"] > 1]
        if len(better):
            r = better.loc[better["speedup"].idxmax()]
            parts.append(f"{model}: {r['mode']} {fmt_x(r, 'rerun')} at steady state")
        elif len(sub):
            parts.append(f"{model}: no mode clearly faster than eager")
    if not parts:
        return []
    tried = [n.split(" (")[0] for n in _mode_names(in_order(summary["mode"], MODES)) if n != "eager"]
    question = f"Do{'es' if len(tried) == 1 else ''} {' or '.join(tried)} pay for inference?"
    return [{"question": question, "answer": "; ".join(parts)}]


def _mode_names(modes: list[str]) -> list[str]:
    """The measured modes in words, for the title: ``["eager", "TorchScript (script, trace)"]``;
    a mode the config did not run is not named."""
    script = [m for m in modes if m in ("script", "trace")]
    names = ["eager"] if "eager" in modes else []
    names += [f"TorchScript ({', '.join(script)})"] if script else []
    return names + (["torch.compile"] if "compile" in modes else [])


def jit_latency(ctx: Context) -> Figure:
    """Steady-state speedup over eager per mode (left; eager measured interleaved in the same
    job) and up-front cost, setup plus first call (right, log scale; for torch.compile a black
    dash gives it in a process that found the compile cache filled), from ``ctx.summary``."""
    summary = ctx.summary
    models = list(summary["model"].unique())
    modes = in_order(summary["mode"], MODES)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    width = 0.8 / len(modes)
    x = np.arange(len(models))
    lows: list[float] = []  # up-front costs drawn (ms): the log axis starts below the smallest
    for j, mode in enumerate(modes):
        m = summary[summary["mode"] == mode].set_index("model").reindex(models)
        ok = m["status"] == "ok"
        pos = x + (j - (len(modes) - 1) / 2) * width
        style = {"color": PALETTE[j], "label": mode, "edgecolor": "black", "linewidth": 0.5}
        bars = ax1.bar(pos, m["speedup"].where(ok, 0), width, yerr=yerr(m, *SPEEDUP), capsize=3, **style)
        hatch_noisy(bars, m)
        lows.extend(_upfront(ax2, m, pos, style))
        for p, is_ok, st, v, hi in zip(pos, ok, m["status"], m["speedup"], m["speedup_ci_high"]):
            if is_ok and np.isfinite(v):  # the value above its bar and CI, as the gil chart gives it
                top = max(v, hi) if np.isfinite(hi) else v
                ax1.annotate(f"{v:.2f}x", (p, top), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8)
            if not is_ok:
                for ax in (ax1, ax2):
                    ax.annotate(
                        str(st), (p, 0), xytext=(0, 4), textcoords="offset points", rotation=90, ha="center", fontsize=8
                    )
    for ax in (ax1, ax2):
        ax.set_xticks(x, models)
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_ylabel("steady-state speedup over eager (x)")
    ax1.set_title("Steady state (after warm-up), eager interleaved")
    tops = pd.concat([summary["speedup"], summary.get("speedup_ci_high", summary["speedup"])]).dropna()
    ax1.set_ylim(0, 1.3 * max(1.0, float(tops.max()) if len(tops) else 1.0))  # room for the legend above the bars
    bar_legend(ax1, fontsize=8, loc="upper left", ncol=len(modes) + 1)
    ax2.set_yscale("log")
    ax2.set_xlim(-0.6, len(models) - 0.4)  # the outer markers and their labels inside the axes
    shown = dict(zip(*reversed(ax2.get_legend_handles_labels())))  # each mode once, and the dash
    ax2.legend(shown.values(), shown.keys(), fontsize=8, loc="upper left", ncol=min(4, len(shown)))
    if lows:
        # every marker visible, its label above it, and the legend above that
        ax2.set_ylim(min(lows) / 4, max(lows) * 20)
    ax2.set_ylabel("setup + first call (ms, log scale)")
    ax2.set_title("Up-front cost")
    fig.suptitle("Inference: " + " vs ".join(_mode_names(modes)), fontsize=11)
    speedup_note(fig, noisy="Hatched")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def _upfront(ax, m: pd.DataFrame, pos: np.ndarray, style: dict) -> list[float]:
    """One mode's up-front cost (setup + first call, ms) at ``pos``, one marker per model row
    of ``m`` (a marker, not a bar: on a log axis a bar's length means nothing); for
    torch.compile a black dash gives it in a process that found the compile cache filled
    (``first_call_warm_s``). Returns the values drawn (ms), for the log axis's limits."""
    ok = m["status"] == "ok"
    up = (m["setup_s"] + m["first_call_s"]) * 1000
    marker = {k: v for k, v in style.items() if k in ("color", "label", "edgecolor")}
    ax.scatter(pos, up.where(ok, np.nan), s=90, marker="o", linewidths=0.8, zorder=3, **marker)
    for p, v, ok_ in zip(pos, up, ok):
        if ok_:
            ax.annotate(_ms(v), (p, v), xytext=(0, 8), textcoords="offset points", ha="center", fontsize=8)
    drawn = up[ok].tolist()
    warm = (m["setup_s"] + m.get("first_call_warm_s", np.nan)) * 1000
    if warm[ok].notna().any():
        ax.scatter(
            pos, warm.where(ok), marker="_", s=400, color="black", zorder=3, label="the same, compile cache filled"
        )
        for p, v in zip(pos, warm.where(ok)):
            if np.isfinite(v):
                ax.annotate(_ms(v), (p, v), xytext=(0, -11), textcoords="offset points", ha="center", fontsize=7)
        drawn += warm[ok].dropna().tolist()
    return drawn


def _ms(value: float) -> str:
    """A value's label: milliseconds, one decimal under 10 ms."""
    return f"{value:.1f} ms" if value < 10 else f"{value:,.0f} ms"


ANALYSIS = Analysis(findings=findings, headlines=headlines, figures={"jit_latency": jit_latency})
