"""Development tools that drive the web UI in a real browser; not part of the installed
package (``pip install gapwatch`` ships ``ui`` without them).

- ``browser.py``: Debian's Chromium through Playwright: open a page, wait until it is
  drawn, read where its charts put their marks. Used by the browser tests and
  ``bench/ui_bench.py``.
- ``screenshot.py``: ``python -m tools.screenshot``: the README's image of the pair page.

Run them from the repository root (``python -m tools.screenshot``); the tests find them
through pytest's ``pythonpath``.
"""
