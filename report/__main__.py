"""``python -m report --host-dir results/<host> --experiments E... --html F --md F``."""

from __future__ import annotations

import argparse
from pathlib import Path

from report.build import build_context
from report.render import render_html, render_markdown


def _write(path: str, text: str) -> None:
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(p)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m report", description="Render the HTML and Markdown reports.")
    p.add_argument("--host-dir", required=True)
    p.add_argument("--experiments", nargs="+", required=True)
    p.add_argument("--html", required=True)
    p.add_argument("--md", required=True)
    args = p.parse_args(argv)
    ctx = build_context(args.host_dir, args.experiments)
    _write(args.html, render_html(ctx))
    _write(args.md, render_markdown(ctx))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
