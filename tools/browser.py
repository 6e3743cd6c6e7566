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

# The drawn charts (vega-embed rendered an svg with marks in it, at a nonzero size), the
# views in them (a concatenated chart holds several, each with its title; a chart
# without a title counts as one), the tables (the data grid's canvas) and the exceptions
# the page shows. Attributes only: nothing here forces a layout of the page.
_DRAWN_JS = """
() => {
  const drawn = Array.from(document.querySelectorAll(
      '[data-testid="stVegaLiteChart"] svg.marks, [data-testid="stVegaLiteChart"] canvas.marks'))
    .filter(s => s.tagName === 'CANVAS' ? s.width > 0
                 : +s.getAttribute('width') > 0 && s.querySelector('path, line'));
  const views = drawn.reduce(
    (n, s) => n + Math.max(1, s.querySelectorAll('.role-title-text').length), 0);
  const tables = Array.from(document.querySelectorAll('[data-testid="stDataFrame"]'))
    .filter(t => t.querySelector('canvas')).length;
  const errors = document.querySelectorAll('[data-testid="stException"]').length;
  return {charts: drawn.length, views, tables, errors};
}
"""
# Evaluated in the page on every animation frame until it returns the state: when the
# page shows an exception, or when it has drawn at least what was asked for.
_WAIT_JS = (
    "(want) => { const s = (" + _DRAWN_JS.strip() + ")(); "
    "return (s.errors || (s.charts >= want.charts && s.views >= want.views "
    "&& s.tables >= want.tables)) ? s : false; }"
)


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
    """``{"charts": n, "views": n, "tables": n, "errors": n}`` for the open page."""
    return dict(page.evaluate(_DRAWN_JS))


def load(
    page: Any, url: str, *, charts: int = 0, views: int = 0, tables: int = 0,
    timeout_s: float = 30.0,
) -> float:  # fmt: skip
    """Open ``url`` and wait until at least ``charts`` charts holding ``views`` views and
    ``tables`` tables are drawn; returns the seconds from navigation start to that moment.

    The wait runs inside the page, once per animation frame, so the probe costs the page
    next to nothing (a 20 ms poll from Python, as this once did, took CPU from the page it
    timed on a 2-core machine).
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    want = {"charts": charts, "views": views, "tables": tables}
    t0 = time.perf_counter()
    page.goto(url, wait_until="commit", timeout=timeout_s * 1000)
    left_ms = max(1.0, (t0 + timeout_s - time.perf_counter()) * 1000)
    try:
        handle = page.wait_for_function(_WAIT_JS, arg=want, polling="raf", timeout=left_ms)
    except PlaywrightTimeout:
        state = drawn_state(page)
        raise BrowserError(
            f"{url} drew {state['charts']} of {charts} charts ({state['views']} of {views} "
            f"views) and {state['tables']} of {tables} tables within {timeout_s:.0f} s"
        ) from None
    seconds = time.perf_counter() - t0
    state = dict(handle.json_value())
    if state["errors"]:
        raise BrowserError(f"{url} shows an exception: {page.inner_text('body')[:300]!r}")
    return seconds


# Every view of every drawn chart: its title, its plot area, and each mark layer's items
# (type, layer index, and per item its box, stroke, fill and text), boxes in page pixels.
# A concatenated chart's views are its innermost groups named like
# ``concat_1_concat_0_group``; a single chart is one view (its root). Vega-Lite names a view's mark groups
# ``<view>_layer_<k>_marks`` (``..._pathgroup`` holds a line layer's paths).
_VIEWS_JS = """
() => {
  const box = e => { const b = e.getBoundingClientRect();
                     return {top: b.top, bottom: b.bottom, left: b.left, right: b.right}; };
  const out = [];
  for (const svg of document.querySelectorAll('[data-testid="stVegaLiteChart"] svg.marks')) {
    const groups = Array.from(svg.querySelectorAll('g.role-scope'))
      .filter(g => /(^|\\s)(concat_\\d+_)+group(\\s|$)/.test(g.getAttribute('class')));
    // the views: groups holding no other such group (a row of views is one too)
    let cells = groups.filter(g => !groups.some(o => o !== g && g.contains(o)));
    if (!cells.length) cells = [svg.querySelector('g.root')];
    for (const cell of cells) {
      const name = (cell.getAttribute('class').match(/(concat_\\d+_)+/) || [''])[0];
      const title = cell.querySelector('.role-title-text');
      const bg = cell.querySelector(':scope > g > path.background');
      const layers = Array.from(cell.querySelectorAll('g.role-mark'))
        .filter(g => !name || (g.getAttribute('class') || '').includes(name))
        .map(g => {
          const cls = g.getAttribute('class');
          const layer = cls.match(/(?:^|_)layer_(\\d+)_/);
          return {
            type: (cls.match(/mark-(\\w+)/) || [null, ''])[1],
            layer: layer ? +layer[1] : 0,
            items: Array.from(g.children).map(e => ({
              tag: e.tagName, stroke: e.getAttribute('stroke'), fill: e.getAttribute('fill'),
              text: e.tagName === 'text' ? e.textContent : null, ...box(e)})),
          };
        });
      out.push({title: title ? title.textContent : '', plot: bg ? box(bg) : box(cell), layers});
    }
  }
  return out;
}
"""


def views(page: Any) -> list[dict[str, Any]]:
    """Every view of every drawn chart on the open page: ``title``, ``plot`` (the plot
    area's box) and ``layers`` (per mark layer: ``type`` such as line, rule, symbol, text,
    rect; ``layer``, its index in the view; ``items``, each drawn element's box, stroke,
    fill and text). Boxes are ``{top, bottom, left, right}`` in page pixels.
    """
    return list(page.evaluate(_VIEWS_JS))


def line_geometry(page: Any) -> list[dict[str, Any]]:
    """Per drawn line view of the open page: ``title``, ``plot``, ``lines`` (each line's
    stroke colour and box: the paths of its first layer) and ``stopLabels`` (each stop
    rule label's text and box). Used to check that every run's line is drawn where a
    reader can see it, and that no two stop labels overlap.
    """
    from gapwatch.ui.charts import STOP_COLOR

    out = []
    for v in views(page):
        first = [ly for ly in v["layers"] if ly["layer"] == 0 and ly["type"] == "line"]
        if not first:
            continue
        texts = [it for ly in v["layers"] if ly["type"] == "text" for it in ly["items"]]
        out.append(
            {
                "title": v["title"],
                "plot": v["plot"],
                "lines": [it for ly in first for it in ly["items"] if it["tag"] == "path"],
                "stopLabels": [
                    it for it in texts if (it["fill"] or "").lower() == STOP_COLOR.lower()
                ],
            }
        )
    return out
