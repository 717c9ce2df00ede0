"""Render the report context (from :mod:`report.build`) with the Jinja2 templates.

HTML autoescaping is on: everything from data (host labels, CPU model strings, config values,
error messages) appears as text. The HTML inlines its images as data URIs, so it is one file
that opens offline; the Markdown references ``figures/*.png`` by relative path.
"""

from __future__ import annotations

import re
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

TEMPLATES = Path(__file__).with_name("templates")


#: Characters that start Markdown markup inside a line (CommonMark and GitHub's tables and
#: strikethrough): each is made literal with a backslash, which CommonMark allows before any
#: ASCII punctuation (spec section 2.4). ``_`` only where it can open or close emphasis, at the
#: edge of a word (``cpu_util_pct`` stays as it is: CommonMark never emphasises inside a word;
#: ``__getitem__`` becomes ``\\_\\_getitem\\_\\_``); ``&`` only where it would start an entity
#: (``>= 1.40x`` stays as it is).
_MD_SPECIAL = re.compile(r"[\\`*\[\]<|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|&(?=#?\w+;)")

#: What opens a block at the start of a line: a block quote, a heading, a list item (``- ``,
#: ``+ ``, ``1. ``). Escaped only where the text starts a line of the document (:func:`md_block`).
_MD_BLOCK = re.compile(r"^(\s*)([>#]|[+-](?=\s)|\d{1,9}(?=[.)]\s))")

#: A code span: a run of backticks, then anything, then a run of the same length (spec 6.1).
_CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")


def _one_line(value) -> str:
    return str(value).replace("\r", " ").replace("\n", " ")


def _md_escape(text: str) -> str:
    return _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), text)


def md_text(value) -> str:
    """Text from data, made inert in Markdown, on one line: outside code spans every character
    that could start markup (raw HTML, emphasis, links, table cells, strikethrough) gets a
    backslash, which renders as the character itself (``<b>`` stays ``<b>`` on the page, not a
    tag, and reads as ``\\<b\\>`` in the file, never ``&lt;b&gt;``); code spans the text
    already holds (a finding's `` `python train.py` ``) are kept as code, their pipes escaped
    for tables (GitHub's table syntax takes ``\\|`` inside code spans too). HTML entities are
    not Markdown's escaping: inside a code span they would show literally."""
    text, out, at = _one_line(value), [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_md_escape(text[at : m.start()]))
        out.append(m.group(0).replace("|", "\\|"))
        at = m.end()
    out.append(_md_escape(text[at:]))
    return "".join(out)


def md_block(value) -> str:
    """:func:`md_text` for text that starts a line of the document (a list item's, a
    paragraph's): a leading ``>``, ``#``, ``- `` or ``1. `` is escaped too, so it stays text."""
    text = md_text(value)
    m = _MD_BLOCK.match(text)
    if not m:
        return text
    lead, mark = m.group(1), m.group(2)
    return lead + (mark + "\\" if mark[0].isdigit() else "\\" + mark) + text[m.end() :]


def md_code(value) -> str:
    """Data shown as a Markdown code span, on one line: fenced by one backtick more than the
    longest run of backticks inside (CommonMark 6.1), padded with a space where it starts or
    ends with a backtick, pipes escaped for tables."""
    text = _one_line(value).replace("|", "\\|")
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html_text(value) -> Markup:
    """Text from data for the HTML report: escaped as text, except that the code spans it holds
    (a finding's `` `max_window_s` ``, CommonMark's syntax, which the Markdown report renders
    as code) become ``<code>`` elements, their content escaped too. Without this the HTML page
    shows the backticks themselves. Text without a code span is only escaped."""
    text, out, at = str(value), [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(escape(text[at : m.start()]))
        out.append(Markup("<code>%s</code>") % m.group(2).strip())
        at = m.end()
    out.append(escape(text[at:]))
    return Markup("").join(out)


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(enabled_extensions=("html", "html.j2"), default_for_string=False),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["md"] = md_text
    env.filters["md_code"] = md_code
    env.filters["md_block"] = md_block
    env.filters["spans"] = html_text
    return env


def render_html(context: dict, template: str = "report") -> str:
    """The self-contained HTML report (``template``: ``report`` or ``compare``)."""
    return environment().get_template(f"{template}.html.j2").render(**context)


def render_markdown(context: dict, template: str = "report") -> str:
    """The Markdown report, images by relative path (``template``: ``report`` or ``compare``)."""
    return environment().get_template(f"{template}.md.j2").render(**context)
