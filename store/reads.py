"""The read queries the UI and the rules need, as SQL the database runs itself.

``SERIES_SQL`` downsamples in the query: per (run, name) series it numbers the rows by
step, cuts them into ``nb`` equal-count buckets and keeps the first row, the last row and
each bucket's minimum and maximum, so at most ``2 + 2 * nb <= max_points`` points come
back and a one-step spike always survives. Non-finite rows (value NULL, flag set) count
as their bucket's extreme (``-inf`` as the minimum, ``nan``/``inf`` as the maximum), so
a NaN is never thinned away. Window functions: SQLite >= 3.25 and PostgreSQL.
"""

from __future__ import annotations

from sqlalchemy import TextClause, bindparam, text

_FLAG_LO = "CASE WHEN flag = '-inf' THEN 0 WHEN flag IS NULL THEN 1 ELSE 2 END"
_FLAG_HI = "CASE WHEN flag IN ('nan', 'inf') THEN 0 WHEN flag IS NULL THEN 1 ELSE 2 END"

SERIES_SQL: TextClause = text(
    f"""
WITH base AS (
  SELECT run_id, name_id, step, value, flag,
         ROW_NUMBER() OVER (PARTITION BY run_id, name_id ORDER BY step) AS rn,
         COUNT(*) OVER (PARTITION BY run_id, name_id) AS n
  FROM metrics
  WHERE run_id IN :run_ids AND name_id IN :name_ids
),
bucketed AS (
  SELECT run_id, name_id, step, value, flag, rn, n,
         CASE WHEN n <= :max_points THEN rn ELSE ((rn - 1) * :nb) / n END AS b
  FROM base
),
ranked AS (
  SELECT run_id, name_id, step, value, flag, rn, n,
         ROW_NUMBER() OVER (PARTITION BY run_id, name_id, b
                            ORDER BY {_FLAG_LO}, value, step) AS lo,
         ROW_NUMBER() OVER (PARTITION BY run_id, name_id, b
                            ORDER BY {_FLAG_HI}, value DESC, step) AS hi
  FROM bucketed
)
SELECT run_id, name_id, step, value, flag
FROM ranked
WHERE n <= :max_points OR rn = 1 OR rn = n OR lo = 1 OR hi = 1
ORDER BY run_id, name_id, step
"""
).bindparams(bindparam("run_ids", expanding=True), bindparam("name_ids", expanding=True))

LATEST_SQL: TextClause = text(
    """
SELECT m.run_id, m.name_id, m.value
FROM metrics m
JOIN (SELECT run_id, name_id, MAX(step) AS step
      FROM metrics
      WHERE run_id IN :run_ids AND name_id IN :name_ids
      GROUP BY run_id, name_id) l
  ON m.run_id = l.run_id AND m.name_id = l.name_id AND m.step = l.step
"""
).bindparams(bindparam("run_ids", expanding=True), bindparam("name_ids", expanding=True))

HISTORY_SQL: TextClause = text(
    """
SELECT m.step, n.name, m.value, m.flag
FROM metrics m JOIN metric_names n ON n.id = m.name_id
WHERE m.run_id = :run_id
ORDER BY m.step, n.name
"""
)

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
