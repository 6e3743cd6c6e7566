"""The UI's one door to the store: which database, opened read-only, queries cached.

Every page reads through these functions. Each query is cached with a short time to
live (``TTL_S``) so a page over a running sweep shows new steps within seconds while
repeated reruns (a widget change, an auto-refresh) do not hit the database again. Rows
come back as plain dicts / pandas frames (``ui.data`` shapes them further).

The database URL comes from ``$GAPWATCH_UI_DB_URL`` (set by ``ui.launch.serve``), else
``--db URL`` after ``--`` on the ``streamlit run`` line, else ``$GAPWATCH_DB_URL``, else
``sqlite:///./gapwatch.db``, as the rest of gapwatch does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ui import data

ENV_URL = "GAPWATCH_UI_DB_URL"
"""Environment variable ``ui.launch.serve`` passes the store URL in."""
DEFAULT_URL = "sqlite:///./gapwatch.db"
TTL_S = 5.0
"""Seconds a cached query answer stays fresh."""


class UIError(Exception):
    """A problem the user can fix (no database, bad URL, bad link), said in one line."""


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


def _open(url: str) -> Any:
    from store import open_store

    try:
        return open_store(url, read_only=True)
    except TypeError:  # a store without the read_only flag: plain open
        return open_store(url)


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Any:
    return _open(url)


def store() -> Any:
    """The open store for this process's URL; UIError if the database is gone."""
    url = db_url()
    check_database(url)
    return _store(url)


def as_dict(row: Any) -> dict[str, Any]:
    """A store row (dataclass, named tuple, mapping or plain object) as a plain dict."""
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        out = {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
    elif hasattr(row, "_asdict"):
        out = dict(row._asdict())
    elif isinstance(row, dict):
        out = dict(row)
    else:
        out = {k: v for k, v in vars(row).items() if not k.startswith("_")}
    if "config" not in out and isinstance(out.get("config_json"), str):
        out["config"] = json.loads(out["config_json"])
    if "evidence" not in out and isinstance(out.get("evidence_json"), str):
        out["evidence"] = json.loads(out["evidence_json"])
    return out


@st.cache_data(ttl=TTL_S, show_spinner=False)
def sweeps(url: str) -> list[dict[str, Any]]:
    """Every sweep, newest first as the store orders them."""
    return [as_dict(s) for s in _store(url).sweeps()]


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs(url: str, sweep_id: int | None = None) -> list[dict[str, Any]]:
    """Runs of one sweep (or all), each a dict with the store's run fields."""
    return [as_dict(r) for r in _store(url).runs(sweep_id)]


@st.cache_data(ttl=TTL_S, show_spinner=False)
def run(url: str, run_id: int) -> dict[str, Any]:
    """One run; a run id the store does not hold -> UIError."""
    from store import StoreError

    try:
        return as_dict(_store(url).run(run_id))
    except (StoreError, KeyError, LookupError) as exc:
        raise UIError(f"run {run_id} is not in the store; pick one from the sweep page") from exc


@st.cache_data(ttl=TTL_S, show_spinner=False)
def latest(url: str, run_ids: tuple[int, ...], names: tuple[str, ...]) -> dict[int, dict[str, Any]]:
    """Newest value per run per name (None where not finite)."""
    if not run_ids:
        return {}
    return {int(k): dict(v) for k, v in _store(url).latest(list(run_ids), list(names)).items()}


@st.cache_data(ttl=TTL_S, show_spinner=False)
def metric_names(url: str, run_id: int) -> list[str]:
    return list(_store(url).metric_names(run_id))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def series(
    url: str,
    run_ids: tuple[int, ...],
    names: tuple[str, ...],
    max_points: int,
    labels: tuple[tuple[int, str], ...],
) -> pd.DataFrame:
    """Downsampled series (in the database) as ``ui.data.series_frame``'s frame."""
    if not run_ids or not names:
        return data.series_frame([], {})
    points = _store(url).series(list(run_ids), list(names), max_points=max_points)
    return data.series_frame((as_dict(p) for p in points), dict(labels))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def distribution_steps(url: str, run_id: int, name: str) -> list[int]:
    return [int(s) for s in _store(url).distribution_steps(run_id, name)]


@st.cache_data(ttl=TTL_S, show_spinner=False)
def distributions(
    url: str, run_id: int, name: str, steps: tuple[int, ...]
) -> list[tuple[int, dict[str, Any]]]:
    """``(step, payload)`` at the given stored steps."""
    rows = _store(url).distributions(run_id, name, steps=list(steps))
    out = []
    for r in rows:
        d = as_dict(r)
        payload = d["payload"]
        if isinstance(payload, str):
            payload = json.loads(payload)
        out.append((int(d["step"]), payload))
    return out


@st.cache_data(ttl=TTL_S, show_spinner=False)
def decisions(
    url: str, run_id: int | None = None, sweep_id: int | None = None
) -> list[dict[str, Any]]:
    return [as_dict(d) for d in _store(url).decisions(run_id=run_id, sweep_id=sweep_id)]


def labels_for(run_rows: Sequence[dict[str, Any]]) -> tuple[tuple[int, str], ...]:
    """Hashable ``(id, label)`` pairs for :func:`series` (cache keys must hash)."""
    return tuple((int(r["id"]), data.run_label(r)) for r in run_rows)
