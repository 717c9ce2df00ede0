"""Render the report context (from :mod:`report.build`) with the Jinja2 templates.

HTML autoescaping is on: everything from data (host labels, CPU model strings, config values,
error messages) appears as text. The HTML inlines its images as data URIs, so it is one file
that opens offline; the Markdown references ``figures/*.png`` by relative path.
"""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

TEMPLATES = Path(__file__).with_name("templates")


def _md_cell(value) -> str:
    """Text from data, made inert in Markdown: no raw HTML, no table breaks, one line."""
    text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(enabled_extensions=("html", "html.j2"), default_for_string=False),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["md"] = _md_cell
    return env


def render_html(context: dict, template: str = "report") -> str:
    """The self-contained HTML report (``template``: ``report`` or ``compare``)."""
    return environment().get_template(f"{template}.html.j2").render(**context)


def render_markdown(context: dict, template: str = "report") -> str:
    """The Markdown report, images by relative path (``template``: ``report`` or ``compare``)."""
    return environment().get_template(f"{template}.md.j2").render(**context)
