"""The UI over a store that goes away: a private PostgreSQL server stopped under a page
that had been showing it, and a page opened while it is down, say "store unreachable" in
one line (URL masked) instead of a traceback, and show the store again once it is back."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from gapwatch import ui
from gapwatch.store import open_store
from gapwatch.ui.source import ENV_URL
from tests.orchestrator.pg_server import PrivatePostgres

APP = str(Path(ui.__file__).with_name("app.py"))
SECRET = "hunter2"


def _page(monkeypatch: pytest.MonkeyPatch, url: str) -> tuple[AppTest, str]:
    monkeypatch.setenv(ENV_URL, url)
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = "\n".join(str(e.value) for kind in ("error", "title", "markdown", "caption")
                      for e in getattr(at, kind))  # fmt: skip
    return at, shown.replace("\\", "").replace("\u2060", "")


def test_the_ui_says_store_unreachable_and_recovers(
    monkeypatch: pytest.MonkeyPatch, private_pg: PrivatePostgres
) -> None:
    # trust auth ignores the password: it is there to be masked
    url = private_pg.url.replace(f"{PrivatePostgres.USER}@", f"{PrivatePostgres.USER}:{SECRET}@")
    open_store(url).ensure_sweep("shown-sweep", "")
    _, before = _page(monkeypatch, url)
    assert "Pick a row" in before  # the sweep is listed
    private_pg.stop()
    st.cache_data.clear()  # as when the answers' few seconds of cache (TTL_S) have passed
    try:
        for _ in range(2):  # the page that was showing it, then again
            at, down = _page(monkeypatch, url)
            (err,) = [str(e.value) for e in at.error]
            assert "store unreachable" in down and "Connection refused" in down, down
            assert SECRET not in down and "***" in down, down
            assert "Traceback" not in down and "\n" not in err.strip()
    finally:
        private_pg.start()
    st.cache_data.clear()
    at, after = _page(monkeypatch, url)
    assert "Pick a row" in after and "store unreachable" not in after
