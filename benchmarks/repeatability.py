"""Repeatability benchmark: run config.quick.yaml twice and compare the two runs point by point.

For every configuration point of every experiment it reports the ratio of the two runs'
medians of the throughput metric (run 2 / run 1) and of the speedups, and the share of
points whose medians agree within +-10% (goal: at least 90%). This is a benchmark, not a
test: it measures how reproducible the pipeline's numbers are on this machine.

Usage (from the repository root, in the project's venv)::

    python benchmarks/repeatability.py [--label rep] [--cores 4] [--markdown out.md]

It runs ``snakemake --cores 4 --configfile config.quick.yaml --config host=<label>-1`` and
``... host=<label>-2`` (about 3 minutes each on 2 CPUs), then compares
``results/<label>-{1,2}/<experiment>/summary.csv``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.tables import read_table  # noqa: E402
from experiments import registry  # noqa: E402
from experiments.declare import point_label  # noqa: E402
from experiments.fileio import write_text  # noqa: E402

TOLERANCE = 0.10


def run(label: str, cores: int) -> None:
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--cores",
        str(cores),
        "--configfile",
        "config.quick.yaml",
        "--config",
        f"host={label}",
        "--forcerun",
        "host_info",
    ]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def compare(a: str, b: str) -> pd.DataFrame:
    """Per point: median and speedup of run ``a`` and ``b`` and their ratios (b / a)."""
    rows = []
    for exp, registered in registry.experiments().items():
        pa, pb = ROOT / "results" / a / exp / "summary.csv", ROOT / "results" / b / exp / "summary.csv"
        if not (pa.exists() and pb.exists()):
            continue
        sa, sb = read_table(pa, exp), read_table(pb, exp)
        keys = list(registered.spec.keys)
        m = sa.merge(sb, on=keys, suffixes=("_1", "_2"))
        for _, r in m.iterrows():
            rows.append(
                {
                    "experiment": exp,
                    "point": point_label({k: r[k] for k in keys}),
                    "metric": r["metric_1"],
                    "median_1": r["median_1"],
                    "median_2": r["median_2"],
                    "median_ratio": r["median_2"] / r["median_1"],
                    "speedup_1": r["speedup_1"],
                    "speedup_2": r["speedup_2"],
                    "speedup_ratio": r["speedup_2"] / r["speedup_1"],
                }
            )
    out = pd.DataFrame(rows)
    out["median_agrees"] = (out["median_ratio"] - 1).abs() <= TOLERANCE
    out["speedup_agrees"] = (out["speedup_ratio"] - 1).abs() <= TOLERANCE
    return out


def markdown(df: pd.DataFrame, host: dict) -> str:
    lines = [
        f"Machine: {host.get('cpu_model')}, {host.get('available_cpus')} available CPUs, "
        f"Python {platform.python_version()}, torch {host.get('torch_version')}.",
        "",
        f"Points whose medians agree within +-10%: {df['median_agrees'].mean():.0%} "
        f"({int(df['median_agrees'].sum())} of {len(df)}); speedups within +-10%: "
        f"{df['speedup_agrees'].mean():.0%}.",
        "",
        "| experiment | point | metric | median run 1 | median run 2 | ratio | speedup 1 | speedup 2 | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in df.iterrows():
        lines.append(
            f"| {r['experiment']} | {r['point']} | {r['metric']} | {r['median_1']:.4g} | {r['median_2']:.4g} | "
            f"{r['median_ratio']:.3f} | {r['speedup_1']:.3f} | {r['speedup_2']:.3f} | {r['speedup_ratio']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", default="repeat", help="host label prefix of the two runs")
    p.add_argument("--cores", type=int, default=4)
    p.add_argument("--markdown", default=None, help="also write the table to this file")
    p.add_argument("--no-run", action="store_true", help="only compare existing results")
    args = p.parse_args(argv)
    a, b = f"{args.label}-1", f"{args.label}-2"
    if not args.no_run:
        run(a, args.cores)
        run(b, args.cores)
    df = compare(a, b)
    host = json.loads((ROOT / "results" / a / "host.json").read_text())
    text = markdown(df, host)
    print(text)
    if args.markdown:
        write_text(Path(args.markdown), text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
