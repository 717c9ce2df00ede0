"""``python -m report --host-dir results/<host> --experiments E... --html F --md F``, or
``python -m report --compare-dir results/compare --html F --md F`` for the host comparison."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.fileio import output_args_problem, write_text
from report.build import build_context
from report.compare import build_compare_context
from report.render import render_html, render_markdown


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m report", description="Render the HTML and Markdown reports.")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--host-dir", help="results/<host>: one host's report")
    mode.add_argument("--compare-dir", help="results/compare: the host comparison report")
    p.add_argument("--experiments", nargs="+", help="with --host-dir: experiments, in report order")
    p.add_argument("--html", required=True)
    p.add_argument("--md", required=True)
    args = p.parse_args(argv)
    if not args.compare_dir and not args.experiments:
        p.error("--host-dir needs --experiments")
    if problem := output_args_problem(args, ("html", "md")):  # before reading anything
        p.error(problem)
    try:
        if args.compare_dir:
            ctx, template = build_compare_context(args.compare_dir), "compare"
        else:
            ctx, template = build_context(args.host_dir, args.experiments), "report"
    except OSError as exc:  # the analysis outputs the report reads are missing: name the file
        p.exit(
            1,
            f"{p.prog}: error: cannot read {exc.filename or 'an input'}: {exc.strerror or exc}"
            " (run the pipeline, which writes the analysis outputs first)\n",
        )
    except ValueError as exc:
        p.exit(1, f"{p.prog}: error: {exc}\n")
    write_text(Path(args.html), render_html(ctx, template))
    write_text(Path(args.md), render_markdown(ctx, template))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
