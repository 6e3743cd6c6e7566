"""gapwatch's web UI: a Streamlit app over the store, read-only.

Start it with ``gapwatch ui [--db URL] [--port N]`` (``ui.launch.serve``). Map:

- ``app.py``: the Streamlit entry point; registers the four pages (``views/``):
  sweeps ``/``, one sweep ``/sweep?sweep=ID``, runs compared ``/compare?runs=ID,ID``,
  one run ``/run?run=ID``. Every choice on a page lives in its URL.
- ``source.py``: the only module that reads the store (cached, short TTL);
  ``locate.py``: which database (the store's URL helpers), and whether it exists
  (no Streamlit import).
- ``data.py``: pure pandas shaping (runs table, steps saved, series, ECDFs);
  ``board.py``: strategies across seeds (leaderboard with spread and ranks, outcomes by
  threshold); ``sweep_model.py``: the sweep page's tables and charts, cached.
- ``charts.py``: Vega-Lite line and ECDF views and the one chart a page's views share;
  ``labels.py``: stop labels that never overlap; ``sweep_charts.py``: spread, outcome
  and threshold views; ``nav.py``: URL state and the per-page error guard.
- ``launch.py``: ``serve`` and ``running_server`` (headless server on a free port).
  The browser driver and the screenshot script are development tools outside the
  package, in the repository's ``tools/``.

Depends on ``store`` and ``correction.names`` only; nothing in the package imports ``ui``
but the CLI's ``gapwatch ui``.
"""
