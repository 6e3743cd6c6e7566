"""ui.locate over the store's URL helpers, and what the installed ``ui`` package holds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gapwatch.ui import locate


def test_urls_read_as_the_store_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    assert locate.display_url("postgresql://u:secret@h/db") == "postgresql+psycopg://u:***@h/db"
    assert locate.display_url("sqlite:///x.db") == "sqlite:///x.db"
    assert locate.display_url("nonsense://") == "nonsense://"  # shown as given, no traceback
    assert locate.sqlite_path("sqlite:///a/b.db") == Path("a/b.db")
    assert locate.sqlite_path("plain.db") == Path("plain.db")  # a bare path is a SQLite file
    assert locate.sqlite_path("postgresql://h/db") is None
    with pytest.raises(locate.UIError, match="in-memory"):
        locate.sqlite_path("sqlite://")
    with pytest.raises(locate.UIError, match="unsupported store URL scheme"):
        locate.sqlite_path("mysql://h/db")
    monkeypatch.delenv(locate.ENV_URL, raising=False)
    monkeypatch.setenv("GAPWATCH_DB_URL", "sqlite:///from-env.db")
    assert locate.sqlite_path(locate.resolve(None)) == Path("from-env.db")
    monkeypatch.delenv("GAPWATCH_DB_URL")
    assert locate.sqlite_path(locate.resolve(None)) == Path("gapwatch.db")
    assert locate.resolve("sqlite:///given.db") == "sqlite:///given.db"


def test_development_tools_are_not_in_the_package() -> None:
    for name in ("gapwatch.ui.browser", "gapwatch.ui.screenshot"):
        assert importlib.util.find_spec(name) is None, name
    assert importlib.util.find_spec("tools.browser") is not None  # found from the repo root
