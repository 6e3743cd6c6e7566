"""Drive Debian's Chromium (``/usr/bin/chromium``) with Playwright's sync API: open a page
of a running UI and wait until its charts and tables are drawn. Used by the browser
tests, ``bench/ui_bench.py`` and ``tools/screenshot.py``. Never runs ``playwright install``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

CHROMIUM = os.environ.get("GAPWATCH_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1400, "height": 1000}

# Counts the drawn charts (vega-embed rendered an svg or canvas with marks in it) and
# tables (the data grid's canvas) on the page, and the exceptions it shows.
_DRAWN_JS = """
() => {
  const charts = Array.from(document.querySelectorAll('[data-testid="stVegaLiteChart"]'))
    .filter(c => {
      const g = c.querySelector('svg.marks, canvas.marks, canvas');
      if (!g) return false;
      const r = g.getBoundingClientRect();
      return r.width > 0 && r.height > 0 && (g.tagName !== 'svg' || g.querySelector('path, line, text'));
    }).length;
  const tables = Array.from(document.querySelectorAll('[data-testid="stDataFrame"]'))
    .filter(t => t.querySelector('canvas')).length;
  const errors = document.querySelectorAll('[data-testid="stException"]').length;
  return {charts, tables, errors};
}
"""


class BrowserError(Exception):
    """The browser could not start, or a page did not draw in time (one line)."""


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright ``Browser``), closed on exit."""
    from playwright.sync_api import Error, sync_playwright

    if not os.path.exists(CHROMIUM):
        raise BrowserError(
            f"no Chromium at {CHROMIUM}: apt-get install -y chromium, "
            "or set GAPWATCH_CHROMIUM to its path"
        )
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        except Error as exc:
            first = str(exc).strip().splitlines()[0]
            raise BrowserError(f"Chromium at {CHROMIUM} did not start: {first}") from exc
        try:
            yield browser
        finally:
            browser.close()


def drawn_state(page: Any) -> dict[str, Any]:
    """``{"charts": n, "tables": n, "errors": n}`` for the open page."""
    return dict(page.evaluate(_DRAWN_JS))


def load(page: Any, url: str, *, charts: int, tables: int = 0, timeout_s: float = 30.0) -> float:
    """Open ``url`` and wait until at least ``charts`` charts and ``tables`` tables are
    drawn; returns the seconds from navigation start to that moment.
    """
    t0 = time.perf_counter()
    page.goto(url, wait_until="commit")
    deadline = t0 + timeout_s
    state: dict[str, Any] = {}
    while time.perf_counter() < deadline:
        state = drawn_state(page)
        if state["errors"]:
            raise BrowserError(f"{url} shows an exception: {page.inner_text('body')[:300]!r}")
        if state["charts"] >= charts and state["tables"] >= tables:
            return time.perf_counter() - t0
        time.sleep(0.02)
    raise BrowserError(
        f"{url} drew {state.get('charts')} of {charts} charts and {state.get('tables')} of "
        f"{tables} tables within {timeout_s:.0f} s"
    )


# Where each drawn line chart put its plot area, its lines (by stroke colour) and its
# stop labels (text in the stop colour), in page pixels. Vega-Lite names the first
# layer's mark group ``layer_0_pathgroup``; the line charts draw their series there.
_GEOMETRY_JS = """
(stopColor) => Array.from(document.querySelectorAll('[data-testid="stVegaLiteChart"]'))
  .filter(c => c.querySelector('g.layer_0_pathgroup g.mark-line path'))
  .map(c => {
    const box = e => { const b = e.getBoundingClientRect();
                       return {top: b.top, bottom: b.bottom, left: b.left, right: b.right}; };
    const title = c.querySelector('.role-title-text');
    return {
      title: title ? title.textContent : '',
      plot: box(c.querySelector('g.layer_0_pathgroup')),
      lines: Array.from(c.querySelectorAll('g.layer_0_pathgroup g.mark-line path'))
        .map(p => ({stroke: p.getAttribute('stroke'), ...box(p)})),
      stopLabels: Array.from(c.querySelectorAll('g.role-mark text'))
        .filter(t => (t.getAttribute('fill') || '').toLowerCase() === stopColor)
        .map(t => ({text: t.textContent, ...box(t)})),
    };
  })
"""


def line_geometry(page: Any) -> list[dict[str, Any]]:
    """Per drawn line chart of the open page: ``title``, ``plot`` (its plot area's box),
    ``lines`` (each line's stroke colour and box) and ``stopLabels`` (each stop rule
    label's text and box); boxes are ``{top, bottom, left, right}`` in page pixels.
    Used to check that every run's line is drawn where a reader can see it.
    """
    from ui.charts import STOP_COLOR

    return list(page.evaluate(_GEOMETRY_JS, STOP_COLOR.lower()))
