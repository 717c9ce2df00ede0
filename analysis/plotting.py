"""Shared chart style and helpers; every figure of every experiment is drawn with these.

Every measured quantity is drawn with its uncertainty: error bars span the 95%
confidence interval of the median; points flagged noisy (IQR > 10% of the median) get a hollow
marker or hatching. Colours are the Okabe-Ito colour-blind-safe palette. The backend is Agg
(headless), set before pyplot is imported.
"""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from analysis import capacity  # noqa: E402
from analysis.findings import bound  # noqa: E402

# Okabe-Ito colour-blind-safe palette.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]

#: The summary columns of a speedup and its 95% CI.
SPEEDUP = ("speedup", "speedup_ci_low", "speedup_ci_high")

plt.rcParams.update(
    {
        "figure.dpi": 110,
        "savefig.dpi": 110,
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "legend.frameon": False,
    }
)


cpus_text = capacity.cpus_text


def yerr(df: pd.DataFrame, centre: str = "median", low: str = "ci_low", high: str = "ci_high") -> np.ndarray:
    """Error bar lengths (2 x n) from a centre and CI columns; missing values draw no bar."""
    lo = (df[centre] - df[low]).clip(lower=0).fillna(0).to_numpy(dtype=float)
    hi = (df[high] - df[centre]).clip(lower=0).fillna(0).to_numpy(dtype=float)
    return np.vstack([lo, hi])


def noisy_mask(sub: pd.DataFrame) -> np.ndarray:
    """Boolean array: which rows are flagged noisy (missing counts as not noisy)."""
    return sub["noisy"].fillna(False).astype(bool).to_numpy()


def speedup_line(
    ax, x, sub: pd.DataFrame, colour: str, label: str | None = None, linestyle: str = "-", top: float | None = None
) -> None:
    """Speedup over the interleaved baseline with its 95% CI; noisy points drawn hollow. With
    ``top`` (:func:`speedup_top`), an error bar that reaches above it is drawn to ``top`` with an
    arrowhead and its upper bound written beside it, so that one erratic point's interval does
    not squash every other point of the chart."""
    shown = sub.assign(speedup_ci_high=sub["speedup_ci_high"].clip(upper=top)) if top else sub
    ax.errorbar(
        x, shown["speedup"], yerr=yerr(shown, *SPEEDUP), color=colour, marker="o", capsize=3, label=label, ls=linestyle
    )
    if top:
        for xi, hi in zip(np.asarray(x, dtype=float), sub["speedup_ci_high"].to_numpy(dtype=float)):
            if np.isfinite(hi) and hi > top:
                ax.plot([xi], [top], marker="^", color=colour, markersize=7, zorder=4, clip_on=False)
                ax.annotate(
                    f"to {bound(hi)}", (xi, top), xytext=(6, -4), textcoords="offset points", fontsize=8, color=colour
                )
    noisy = noisy_mask(sub)
    if noisy.any():
        ax.scatter(
            np.asarray(x)[noisy],
            sub["speedup"].to_numpy()[noisy],
            s=36,
            facecolors="white",
            edgecolors=colour,
            linewidths=1.5,
            zorder=4,
        )


#: How an oversubscribed point (more threads or processes x threads than available CPUs) is
#: marked on every chart that draws one: matplotlib scatter keywords.
OVERSUBSCRIBED_MARK = {"s": 110, "marker": "s", "facecolors": "none", "edgecolors": "#D55E00", "linewidths": 1.5}


def mark_oversubscribed(ax, x, y, what: str) -> None:
    """An orange square on each oversubscribed point at ``(x, y)`` (equal-length sequences; none
    drawn when empty), labelled ``oversubscribed (<what> > available CPUs)`` for the legend."""
    if len(x):
        ax.scatter(x, y, zorder=5, label=f"oversubscribed ({what} > available CPUs)", **OVERSUBSCRIBED_MARK)


#: The footnote's words for :func:`mark_whole_cores`'s diamonds, on every chart that draws them.
WHOLE_CORES_NOTE = (
    " Black diamond, beside its point: the speedup on whole cores with its 95% CI (each round's ratio divided by"
    " the share of a core its work got, timed by its own units or by the probe), where it is the figure to quote:"
    " the surer of the two, the correction counted as the measured figure's error."
)


def mark_whole_cores(ax, x, sub: pd.DataFrame) -> np.ndarray:
    """A black diamond with its 95% CI at each point of ``sub`` (rows in the order of ``x``) whose
    headline leads with the speedup on whole cores (:func:`analysis.findings.transfer_case`
    ``on_whole_cores``), labelled ``on whole cores`` for the legend; returns the mask of the
    points marked (none drawn where it is all False)."""
    from analysis.findings import transfer_case

    marked = np.array([transfer_case(r) == "on_whole_cores" for r in sub.to_dict("records")], dtype=bool)
    if marked.any():
        shown = sub[marked]
        ax.errorbar(
            np.asarray(x, dtype=float)[marked],
            shown["speedup_norm"],
            yerr=yerr(shown, "speedup_norm", "speedup_norm_ci_low", "speedup_norm_ci_high"),
            fmt="D",
            color="black",
            markersize=5,
            capsize=2,
            elinewidth=1,
            zorder=5,
            label="on whole cores",
        )
    return marked


def hatch_noisy(bars, sub: pd.DataFrame) -> None:
    """Hatch the bars of ``sub``'s noisy points (:func:`noisy_mask`); ``bars`` drawn from its rows in order."""
    for b, noisy in zip(bars, noisy_mask(sub)):
        if noisy:
            b.set_hatch("//")


def bar_legend(ax, **kwargs) -> None:
    """The legend of a bar chart whose noisy bars are hatched (:func:`hatch_noisy`): one plain
    patch per bar label, in its colour, whether the first bar of that label was hatched or not
    (matplotlib's own legend copies the first bar, hatch and all, so a colour read as noisy),
    then one hatched white patch, ``noisy``, where any bar is hatched. Other handles (lines) are
    kept as they are, after the bars; a label drawn more than once (diamonds beside two bars'
    groups) is listed once. ``kwargs``: :meth:`matplotlib.axes.Axes.legend`'s."""
    handles, labels = ax.get_legend_handles_labels()
    firsts = [labels.index(label) for label in dict.fromkeys(labels)]
    bar = [getattr(handles[i], "patches", None) is not None for i in firsts]
    firsts = [i for i, b in zip(firsts, bar) if b] + [i for i, b in zip(firsts, bar) if not b]  # bars first
    handles, labels = [handles[i] for i in firsts], [labels[i] for i in firsts]
    plain = []
    for handle in handles:
        first = handle.patches[0] if getattr(handle, "patches", None) else handle
        if isinstance(first, Rectangle):
            handle = Patch(facecolor=first.get_facecolor(), edgecolor="black", linewidth=0.5)
        plain.append(handle)
    if any(isinstance(p, Rectangle) and p.get_hatch() for p in ax.patches):
        plain.append(Patch(facecolor="white", edgecolor="black", linewidth=0.5, hatch="//"))
        labels = [*labels, "noisy"]
    ax.legend(plain, labels, **kwargs)


def speedup_top(summary: pd.DataFrame, ideal: float) -> float:
    """The top of a speedup chart's axis: 1.3 times the larger of ``ideal`` (the available
    CPUs, say) and the largest measured speedup. Intervals reaching above it are drawn capped
    (:func:`speedup_line`)."""
    est = pd.to_numeric(summary["speedup"], errors="coerce")
    return 1.3 * max(float(ideal), float(est.max()) if est.notna().any() else 0.0)


def speedup_note(fig: Figure, extra: str = "", noisy: str = "Hollow") -> None:
    """The footnote of a speedup chart: how speedups and their CIs were measured, and how noisy
    points are marked (``noisy``: ``Hollow`` for line charts, ``Hatched`` for bar charts)."""
    note(
        fig,
        "Speedup: median of per-round ratios to the baseline measured interleaved in the same job; "
        f"error bars: 95% CI. {noisy}: noisy (IQR > 10% of median)." + extra,
    )


#: Characters of a footnote line per inch of figure width (7.5 pt DejaVu Sans, 4-4.8 pt a
#: character on average), so that a footnote does not widen the saved figure past its axes.
NOTE_CHARS_PER_INCH = 15


def note(fig: Figure, text: str) -> None:
    """A footnote in small grey type at the bottom left, wrapped to the figure's width (a line
    longer than the figure widened the saved image, ``bbox_inches="tight"``, and left the axes
    in its left part). Lines that a footnote breaks on its own are kept."""
    width = max(40, int(fig.get_figwidth() * NOTE_CHARS_PER_INCH))
    wrapped = "\n".join(textwrap.fill(line, width) for line in text.splitlines())
    fig.text(0.01, 0.005, wrapped, fontsize=7.5, color="#555555")


def not_measured_panel(ax, title: str, sub: pd.DataFrame) -> None:
    """An axis for a group without any measured point: its status and reason, wrapped."""
    first = sub.iloc[0]
    reason = str(first.get("reason") or "") if pd.notna(first.get("reason")) else ""
    text = f"not measured: {first['status']}" + (f"\n\n{textwrap.fill(reason, 40)}" if reason else "")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, transform=ax.transAxes, wrap=True)
    ax.set_title(title, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])


def baseline_text(sub: pd.DataFrame, unit: str) -> str:
    """``baseline 1,234 samples/s``: the median of the interleaved baselines' medians."""
    base = sub["baseline_median"].dropna()
    return f"baseline {base.median():,.0f} {unit}" if len(base) else ""


def circle_best(ax, x: float, y: float, label: str) -> None:
    """Ring the best point of a line chart."""
    ax.scatter(
        [x], [y], marker="o", s=260, facecolors="none", edgecolors="#D55E00", linewidths=2, zorder=5, label=label
    )
