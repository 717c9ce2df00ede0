"""The quick run's HTML report in a real browser: headless Chromium through Playwright.

Chromium comes from the system (Debian's ``chromium`` package; ``.ci/run`` installs it), found
as ``$LAB_CHROMIUM`` or ``chromium``/``chromium-browser`` on PATH; Playwright drives it over the
DevTools protocol and downloads no browser. Without Chromium or Playwright the test is skipped,
unless ``LAB_REQUIRE_BROWSER=1`` (set by CI), where it fails instead.
"""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import e2e_figures

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def _chromium() -> str:
    path = os.environ.get("LAB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    required = os.environ.get("LAB_REQUIRE_BROWSER") == "1"
    if not path:
        if required:
            pytest.fail("LAB_REQUIRE_BROWSER=1 but no chromium found (set LAB_CHROMIUM or install Debian's chromium)")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if required:
            pytest.fail("LAB_REQUIRE_BROWSER=1 but playwright is not installed (pip install -r requirements-dev.txt)")
        pytest.skip("playwright not installed")
    return path


@pytest.mark.slow
def test_report_in_headless_chromium(quick_run, tmp_path):
    from playwright.sync_api import sync_playwright

    chromium = _chromium()
    report = quick_run / "results" / "e2e" / "report.html"
    home = tmp_path / "browser-home"
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "TMPDIR": str(tmp_path),
    }
    env.pop("DISPLAY", None)
    console_errors, page_errors, failed, requests = [], [], [], []
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "user-data"), executable_path=chromium, headless=True, args=FLAGS, env=env
        )
        try:
            page = ctx.new_page()
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.on("requestfailed", lambda r: failed.append(f"{r.url[:80]}: {r.failure}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report.as_uri(), wait_until="load")
            images = page.eval_on_selector_all(
                "figure img",
                "imgs => imgs.map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth,"
                " caption: i.closest('figure').querySelector('figcaption')?.textContent || ''}))",
            )
            toc = page.eval_on_selector_all(
                "nav a", "links => links.map(a => [a.hash, !!document.getElementById(a.hash.slice(1))])"
            )
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            ctx.close()
    assert console_errors == [] and page_errors == []
    assert failed == []
    # the page itself is the only request: images are inlined, nothing comes from a network
    assert [r for r in requests if not r.startswith("data:")] == [report.as_uri()]
    expected = len(e2e_figures())  # the run's experiments, the fixture's included
    assert len(images) == expected
    for img in images:
        assert img["complete"] and img["width"] > 0, img["alt"]
        assert len(img["alt"]) > 30 and len(img["caption"]) > 40, img["alt"]
    assert toc and all(ok for _, ok in toc), toc
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 100_000
    shutil.copy(shot, quick_run / "results" / "e2e" / "report-screenshot.png")
