"""The UI's one door to the store: which database, opened read-only, queries cached.

Every page reads through these functions. Each query is cached with a short time to
live (``TTL_S``) so a page over a running sweep shows new steps within seconds while
repeated reruns (a widget change, an auto-refresh) do not hit the database again. Rows
come back as plain dicts / pandas frames (``ui.data`` shapes them further). Which
database is served is ``ui.locate``'s business.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st

from gapwatch.ui import data
from gapwatch.ui.locate import (
    ENV_URL,
    TTL_S,
    UIError,
    check_database,
    db_url,
    display_url,
)

__all__ = ["ENV_URL", "TTL_S", "UIError", "check_database", "db_url", "display_url"]


def _open(url: str) -> Any:
    from gapwatch.store import open_store

    return open_store(url, read_only=True)


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
    from gapwatch.store import StoreError

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
def non_finite(url: str, run_id: int) -> dict[str, dict[str, int]]:
    """Per metric, the run's stored non-finite values by kind (``Store.non_finite``)."""
    return dict(_store(url).non_finite(run_id))


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
    return data.series_frame(points, dict(labels))


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


def run_jsonl(url: str, run_id: int) -> bytes:
    """The run's metrics as the ``.jsonl`` log ``gapwatch export`` writes and ``gapwatch
    replay`` reads (``store.export.jsonl_lines``), read when the user asks for it."""
    from gapwatch.store.export import jsonl_lines

    return "".join(jsonl_lines(_store(url).history(run_id))).encode("utf-8")


def labels_for(run_rows: Sequence[dict[str, Any]]) -> tuple[tuple[int, str], ...]:
    """Hashable ``(id, label)`` pairs for :func:`series` (cache keys must hash)."""
    return tuple((int(r["id"]), data.run_label(r)) for r in run_rows)
