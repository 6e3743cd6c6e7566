"""Which store the UI serves and whether it exists (no Streamlit import: the launcher,
the CLI and the pages all use it).

The database URL comes from ``$GAPWATCH_UI_DB_URL`` (set by ``ui.launch.serve``), else
``--db URL`` after ``--`` on the ``streamlit run`` line, else ``$GAPWATCH_DB_URL``, else
``sqlite:///./gapwatch.db``, as the rest of gapwatch does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

ENV_URL = "GAPWATCH_UI_DB_URL"
"""Environment variable ``ui.launch.serve`` passes the store URL in."""
DEFAULT_URL = "sqlite:///./gapwatch.db"


def _seconds(env: str, default: float) -> float:
    """A positive number of seconds from ``$env``; anything else keeps the default."""
    raw = os.environ.get(env)
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if value > 0:
        return value
    print(
        f"gapwatch ui: ignoring {env}={raw!r} (not a positive number of seconds)", file=sys.stderr
    )
    return default


class UIError(Exception):
    """A problem the user can fix (no database, bad URL, bad link), said in one line."""


TTL_S = _seconds("GAPWATCH_UI_TTL_S", 5.0)
"""Seconds a cached query answer stays fresh (``ui.source``); $GAPWATCH_UI_TTL_S."""
REFRESH_S = _seconds("GAPWATCH_UI_REFRESH_S", 10.0)
"""Seconds between refreshes of a page over a running sweep; $GAPWATCH_UI_REFRESH_S."""


def db_url() -> str:
    """The store URL this UI process serves (see the module docstring for the order)."""
    url = os.environ.get(ENV_URL)
    if url:
        return url
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == "--db" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--db="):
            return arg.split("=", 1)[1]
    return os.environ.get("GAPWATCH_DB_URL") or DEFAULT_URL


def display_url(url: str) -> str:
    """``url`` with any password masked, for showing in the page."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL (or a bare path), None for other backends."""
    if "://" not in url:
        return Path(url)
    try:
        u = make_url(url)
    except ArgumentError as exc:
        raise UIError(
            f"cannot read store URL {url!r}: use sqlite:///path.db or "
            "postgresql+psycopg://user@host/db"
        ) from exc
    if not u.drivername.startswith("sqlite"):
        return None
    if not u.database or u.database == ":memory:":
        raise UIError(
            f"store URL {url!r} names an in-memory SQLite database, which the UI cannot "
            "share with the process that wrote it; pass a file: sqlite:///path.db"
        )
    return Path(u.database)


def check_database(url: str) -> None:
    """Raise UIError (one line) unless ``url`` names a database that exists.

    A SQLite file that does not exist is refused before anything creates it: the UI
    only reads, so an empty new file would hide a mistyped path.
    """
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise UIError(
            f"no store database at {path.resolve()}: run `gapwatch sweep` to create one, "
            "or pass the right one with --db URL"
        )
