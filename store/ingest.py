"""The write hot path: validate a batch of steps and upsert it in one transaction.

``encode_steps`` turns ``[(step, metrics, distributions), ...]`` into plain row tuples
(non-finite floats become ``(None, flag)``; anything that is not a number is refused
with the metric's name). ``upsert_metrics`` sends them with the fastest idempotent path
each backend has: SQLite, one prepared ``INSERT .. ON CONFLICT DO UPDATE`` run by the
driver's ``executemany``; PostgreSQL, binary ``COPY`` into a temp table then one
``INSERT .. SELECT .. ON CONFLICT DO UPDATE``. Both statements are compiled once from
SQLAlchemy Core's dialect-specific ``insert`` so the SQL is not hand-written twice.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite

from .errors import StoreError
from .schema import Distribution, Metric

MetricRow = tuple[int, int, int, float | None, str | None]
"""(run_id, name_id, step, value, flag)"""
DistRowIn = tuple[int, str, int, str, str]
"""(run_id, name, step, scheme, payload_json)"""
StepIn = tuple[int, Mapping[str, Any], Mapping[str, Any]]

_PAYLOAD_KEYS = ("scheme", "keys", "counts", "upper")
PG_STAGING_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS gw_metrics_in (run_id integer, name_id integer, "
    "step integer, value double precision, flag varchar(8)) ON COMMIT DELETE ROWS"
)
"""PostgreSQL: the per-connection staging table COPY fills (``store.engine`` creates it)."""


def _step_of(run_id: int, raw: Any) -> int:
    if isinstance(raw, bool):
        raise StoreError(f"run {run_id}: step {raw!r} is not an integer step number")
    try:
        step = operator.index(raw)
    except TypeError:
        raise StoreError(
            f"run {run_id}: step {raw!r} ({type(raw).__name__}) is not an integer step number"
        ) from None
    if step < 0:
        raise StoreError(f"run {run_id}: step {step} is negative; steps count from 0 or 1")
    return step


def _coerce(run_id: int, step: int, name: str, v: Any) -> float:
    """A reported value as a float, or a StoreError that names the metric."""
    if not isinstance(v, str | bytes) and hasattr(v, "__float__"):
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
        except (TypeError, ValueError):
            pass
    shown = repr(v)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise StoreError(
        f"metric {name!r} at step {step} of run {run_id} is {shown} "
        f"({type(v).__name__}), not a number: report floats only"
    )


def merge_steps(
    run_id: int, steps: Iterable[StepIn]
) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    """Steps in order with repeats of one step merged (a later value wins)."""
    merged: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    for item in steps:
        try:
            raw_step, metrics, dists = item
        except (TypeError, ValueError):
            raise StoreError(
                f"run {run_id}: each step must be (step, metrics dict, distributions dict), "
                f"got {item!r:.80}"
            ) from None
        step = _step_of(run_id, raw_step)
        if not isinstance(metrics, Mapping) or not isinstance(dists, Mapping | type(None)):
            raise StoreError(f"run {run_id}, step {step}: metrics and distributions must be dicts")
        m, d = merged.setdefault(step, ({}, {}))
        m.update(metrics)
        d.update(dists or {})
    return [(s, m, d) for s, (m, d) in merged.items()]


def encode_metrics(
    run_id: int,
    steps: Sequence[tuple[int, dict[str, Any], dict[str, Any]]],
    name_ids: Mapping[str, int],
) -> list[MetricRow]:
    """Row tuples for every metric of every step; non-finite values flagged."""
    rows: list[MetricRow] = []
    append = rows.append
    for step, metrics, _ in steps:
        for name, v in metrics.items():
            fv = v if type(v) is float else _coerce(run_id, step, name, v)
            if fv - fv == 0.0:  # finite
                append((run_id, name_ids[name], step, fv, None))
            elif fv != fv:
                append((run_id, name_ids[name], step, None, "nan"))
            else:
                append((run_id, name_ids[name], step, None, "inf" if fv > 0 else "-inf"))
    return rows


def encode_distributions(
    run_id: int, steps: Sequence[tuple[int, dict[str, Any], dict[str, Any]]]
) -> list[DistRowIn]:
    """Row tuples for every distribution payload; malformed payloads refused by name."""
    rows: list[DistRowIn] = []
    for step, _, dists in steps:
        for name, payload in dists.items():
            where = f"distribution {name!r} at step {step} of run {run_id}"
            if not isinstance(payload, Mapping) or any(k not in payload for k in _PAYLOAD_KEYS):
                raise StoreError(
                    f"{where} is not a sketch payload (needs {', '.join(_PAYLOAD_KEYS)}): "
                    "send LogSketch.to_payload()"
                )
            lengths = {len(payload[k]) for k in ("keys", "counts", "upper")}
            if len(lengths) != 1:
                raise StoreError(f"{where}: keys, counts and upper differ in length")
            try:
                text = orjson.dumps(payload).decode()  # ~10x json.dumps: payloads are long
            except TypeError as exc:
                raise StoreError(f"{where} is not JSON-serialisable ({exc})") from None
            rows.append((run_id, str(name), step, str(payload["scheme"]), text))
    return rows


def _upsert_sql(table: Table, keys: list[str], cols: list[str], dialect: Any, insert: Any) -> str:
    stmt = insert(table).values({c: None for c in cols})
    stmt = stmt.on_conflict_do_update(
        index_elements=keys, set_={c: stmt.excluded[c] for c in cols if c not in keys}
    )
    return str(stmt.compile(dialect=dialect))


_METRIC_COLS = ["run_id", "name_id", "step", "value", "flag"]
_METRIC_KEYS = ["run_id", "name_id", "step"]
_DIST_COLS = ["run_id", "name", "step", "scheme", "payload"]
_DIST_KEYS = ["run_id", "name", "step"]


class Upserter:
    """Compiled upsert statements for one engine's dialect, and the code that runs them."""

    def __init__(self, dialect: Any) -> None:
        self.dialect_name: str = dialect.name
        mt: Table = Metric.__table__  # type: ignore[assignment]
        dt: Table = Distribution.__table__  # type: ignore[assignment]
        if self.dialect_name == "sqlite":
            ins: Callable[..., Any] = sqlite.insert
            self.metric_sql = _upsert_sql(mt, _METRIC_KEYS, _METRIC_COLS, dialect, ins)
            self.dist_sql = _upsert_sql(dt, _DIST_KEYS, _DIST_COLS, dialect, ins)
        else:
            ins = postgresql.insert
            # Compiled with named parameters; COPY feeds the metrics, dicts the distributions.
            self.dist_sql = _upsert_sql(dt, _DIST_KEYS, _DIST_COLS, dialect, ins)
            conflict = ", ".join(_METRIC_KEYS)
            self.metric_sql = (
                f"INSERT INTO metrics ({', '.join(_METRIC_COLS)}) "
                f"SELECT {', '.join(_METRIC_COLS)} FROM gw_metrics_in "
                f"ON CONFLICT ({conflict}) DO UPDATE SET "
                "value = EXCLUDED.value, flag = EXCLUDED.flag"
            )

    def metrics(self, conn: Connection, rows: list[MetricRow]) -> None:
        if not rows:
            return
        if self.dialect_name == "sqlite":
            conn.exec_driver_sql(self.metric_sql, rows)  # type: ignore[arg-type]
            return
        raw: Any = conn.connection.dbapi_connection
        with raw.cursor() as cur:
            with cur.copy(
                f"COPY gw_metrics_in ({', '.join(_METRIC_COLS)}) FROM STDIN (FORMAT BINARY)"
            ) as cp:
                cp.set_types(["int4", "int4", "int4", "float8", "varchar"])
                write = cp.write_row
                for r in rows:
                    write(r)
            cur.execute(self.metric_sql)

    def distributions(self, conn: Connection, rows: list[DistRowIn]) -> None:
        if not rows:
            return
        if self.dialect_name == "sqlite":
            conn.exec_driver_sql(self.dist_sql, rows)  # type: ignore[arg-type]
        else:
            conn.exec_driver_sql(
                self.dist_sql, [dict(zip(_DIST_COLS, r, strict=True)) for r in rows]
            )  # type: ignore[arg-type]
