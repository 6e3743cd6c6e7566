"""The read queries the UI and the rules need, as SQL the database runs itself.

``series_sql(dialect)`` downsamples in the query: per (run, name) series of more than
``max_points`` rows it cuts the step range [first, last] into ``nb`` equal-width buckets
and keeps the first row, the last row and each bucket's minimum and maximum, so at most
``2 + 2 * nb <= max_points`` points come back and a one-step spike always survives.
Non-finite rows (value NULL, flag set) count as their bucket's extreme (``-inf`` as the
minimum, ``nan``/``inf`` as the maximum), so a NaN is never thinned away.

Two forms, one meaning. PostgreSQL: ``ROW_NUMBER`` windows per bucket (ties: lowest step).
SQLite: ``GROUP BY`` bucket with its documented bare-column ``MIN``/``MAX`` (the other
columns come from the row holding the extreme; ties: any one of them), which measured
about 2x faster than the window form there (bench/store_bench.py). Per-series counts
come from a ``GROUP BY`` on the primary key rather than ``COUNT(*) OVER``, which SQLite
evaluates by buffering each partition (4x the cost of the whole scan).
"""

from __future__ import annotations

from sqlalchemy import TextClause, bindparam, text

_FLAG_LO = "CASE WHEN flag = '-inf' THEN 0 WHEN flag IS NULL THEN 1 ELSE 2 END"
_FLAG_HI = "CASE WHEN flag IN ('nan', 'inf') THEN 0 WHEN flag IS NULL THEN 1 ELSE 2 END"

_STATS = """
WITH st AS (
  SELECT run_id, name_id, COUNT(*) AS n, MIN(step) AS s0, MAX(step) AS s1
  FROM metrics
  WHERE run_id IN :run_ids AND name_id IN :name_ids
  GROUP BY run_id, name_id
),
bk AS (
  SELECT m.run_id, m.name_id, m.step, m.value, m.flag, st.s0, st.s1,
         ((m.step - st.s0) * :nb) / (st.s1 - st.s0 + 1) AS b
  FROM st JOIN metrics m ON m.run_id = st.run_id AND m.name_id = st.name_id
  WHERE st.n > :max_points AND m.run_id IN :run_ids AND m.name_id IN :name_ids
),
ends AS (
  SELECT m.run_id, m.name_id, m.step, m.value, m.flag
  FROM st JOIN metrics m ON m.run_id = st.run_id AND m.name_id = st.name_id
  WHERE (st.n <= :max_points OR m.step = st.s0 OR m.step = st.s1)
    AND m.run_id IN :run_ids AND m.name_id IN :name_ids
)
"""
"""Shared CTEs. ``st``: per-series count and step range; ``bk``: rows of the series to
thin, with their bucket; ``ends``: whole short series, and first and last rows. The
repeated ``IN`` filters keep PostgreSQL's planner from merge-joining the whole index."""

_SQLITE_SERIES = (
    _STATS
    + """
SELECT run_id, name_id, step, value, flag FROM ends
UNION
SELECT run_id, name_id, step, value, flag FROM (
  SELECT run_id, name_id, step, value, flag,
         MIN(CASE WHEN flag = '-inf' THEN -9e999 ELSE value END)
  FROM bk GROUP BY run_id, name_id, b)
UNION
SELECT run_id, name_id, step, value, flag FROM (
  SELECT run_id, name_id, step, value, flag,
         MAX(CASE WHEN flag IN ('nan', 'inf') THEN 9e999 ELSE value END)
  FROM bk GROUP BY run_id, name_id, b)
ORDER BY run_id, name_id, step
"""
)

_PG_SERIES = (
    _STATS
    + f"""
, ranked AS (
  SELECT run_id, name_id, step, value, flag, s0, s1,
         ROW_NUMBER() OVER (PARTITION BY run_id, name_id, b
                            ORDER BY {_FLAG_LO}, value, step) AS lo,
         ROW_NUMBER() OVER (PARTITION BY run_id, name_id, b
                            ORDER BY {_FLAG_HI}, value DESC, step) AS hi
  FROM bk
)
SELECT run_id, name_id, step, value, flag FROM ends
UNION ALL
SELECT run_id, name_id, step, value, flag FROM ranked
WHERE (lo = 1 OR hi = 1) AND step <> s0 AND step <> s1
ORDER BY run_id, name_id, step
"""
)


def series_sql(dialect: str) -> TextClause:
    """The downsampling series query for ``dialect`` ('sqlite' or 'postgresql')."""
    sql = _SQLITE_SERIES if dialect == "sqlite" else _PG_SERIES
    return text(sql).bindparams(
        bindparam("run_ids", expanding=True), bindparam("name_ids", expanding=True)
    )


LATEST_SQL: TextClause = text(
    """
WITH pairs AS (
  SELECT r.id AS run_id, n.id AS name_id,
         (SELECT MAX(m.step) FROM metrics m
          WHERE m.run_id = r.id AND m.name_id = n.id) AS step
  FROM runs r CROSS JOIN metric_names n
  WHERE r.id IN :run_ids AND n.id IN :name_ids
)
SELECT p.run_id, p.name_id, m.value
FROM pairs p
JOIN metrics m ON m.run_id = p.run_id AND m.name_id = p.name_id AND m.step = p.step
"""
).bindparams(bindparam("run_ids", expanding=True), bindparam("name_ids", expanding=True))
"""One primary-key probe per (run, name) for its newest step, not a scan of every row."""

HISTORY_SQL: TextClause = text(
    """
SELECT m.step, n.name, m.value, m.flag
FROM metrics m JOIN metric_names n ON n.id = m.name_id
WHERE m.run_id = :run_id AND m.step > :after AND m.step <= :until
ORDER BY m.step, n.name
"""
)
HISTORY_OF_SQL: TextClause = text(
    """
SELECT m.step, n.name, m.value, m.flag
FROM metrics m JOIN metric_names n ON n.id = m.name_id
WHERE m.run_id = :run_id AND m.step > :after AND m.step <= :until
  AND m.name_id IN :name_ids
ORDER BY m.step, n.name
"""
).bindparams(bindparam("name_ids", expanding=True))
"""A run's steps after ``after``, only the named metrics (a watcher's control figures)."""

RUN_METRIC_NAMES_SQL: TextClause = text(
    """
SELECT n.name FROM metric_names n
WHERE EXISTS (SELECT 1 FROM metrics m WHERE m.run_id = :run_id AND m.name_id = n.id)
ORDER BY n.name
"""
)

SWEEP_COUNTS_SQL: TextClause = text(
    "SELECT sweep_id, status, COUNT(*) FROM runs GROUP BY sweep_id, status"
)


def buckets_for(max_points: int) -> int:
    """Buckets per series so that first + last + a min and a max per bucket fit."""
    return (max_points - 2) // 2
