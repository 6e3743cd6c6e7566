"""Which store the UI serves and whether it exists (no Streamlit import: the launcher,
the CLI and the pages all use it).

The database URL comes from ``$GAPWATCH_UI_DB_URL`` (set by ``ui.launch.serve``), else
``--db URL`` after ``--`` on the ``streamlit run`` line, else the store's own default
(``store.engine.resolve_url``: ``$GAPWATCH_DB_URL``, else ``sqlite:///./gapwatch.db``).
Parsing, masking and the SQLite file behind a URL are the store's helpers; this module
only turns their errors into the UI's one-line ``UIError`` and refuses a missing file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sqlalchemy.engine import URL

from gapwatch.store import StoreError
from gapwatch.store.engine import display, mask, resolve_url, unreachable
from gapwatch.store.engine import sqlite_path as _sqlite_file

ENV_URL = "GAPWATCH_UI_DB_URL"
"""Environment variable ``ui.launch.serve`` passes the store URL in."""


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


def _parsed(url: str | None) -> URL:
    """The store's reading of ``url`` (None: its default); a bad URL -> UIError."""
    try:
        return resolve_url(url)
    except StoreError as exc:
        raise UIError(str(exc)) from None


def resolve(url: str | None) -> str:
    """``url`` as given, else the store's default URL (``$GAPWATCH_DB_URL`` or the file)."""
    return url or _parsed(None).render_as_string(hide_password=False)


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
    return resolve(None)


def display_url(url: str) -> str:
    """``url`` with any password masked, for showing in the page or the terminal (masked
    as text where it does not parse)."""
    try:
        return display(resolve_url(url))
    except StoreError:
        return mask(url)


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL (or a bare path), None for other backends."""
    u = _parsed(url)
    if not u.drivername.startswith("sqlite"):
        return None
    path = _sqlite_file(u)
    if path is None:
        raise UIError(
            f"store URL {url!r} names an in-memory SQLite database, which the UI cannot "
            "share with the process that wrote it; pass a file: sqlite:///path.db"
        )
    return path


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


def unreachable_line(url: str, exc: BaseException) -> str | None:
    """The page's one line for a store it cannot reach right now (PostgreSQL down or
    restarting, a SQLite file held by another process), URL masked; None for any other
    error."""
    why = unreachable(exc)
    if why is None:
        return None
    return (
        f"store unreachable: {display_url(url)} ({why}); a running sweep keeps its "
        "results until it is back; reload this page to try again"
    )
