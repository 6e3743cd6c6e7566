"""gapwatch's Streamlit app: ``streamlit run ui/app.py`` (``gapwatch ui`` does this).

Four pages, each reachable by URL and reproducible from it (every choice is a query
parameter): ``/`` the sweeps, ``/sweep?sweep=ID`` one sweep's runs and leaderboard,
``/compare?runs=ID,ID`` runs on one axis per figure with ECDFs, ``/run?run=ID`` one run's
every metric, config and decisions. The store is only read.
"""

from __future__ import annotations

import streamlit as st

from gapwatch.ui import nav, source

st.set_page_config(page_title="gapwatch", layout="wide")

pages = [
    st.Page(nav.SWEEPS, title="Sweeps", default=True),
    st.Page(nav.SWEEP, title="Sweep", url_path="sweep"),
    st.Page(nav.COMPARE, title="Compare", url_path="compare"),
    st.Page(nav.RUN, title="Run", url_path="run"),
]
page = st.navigation(pages, position="top")

try:
    url = source.db_url()
    source.check_database(url)
except source.UIError as exc:
    st.error(nav.plain(exc))
    st.stop()

page.run()
st.caption(f"store: {nav.plain(source.display_url(url))} (read-only)")
